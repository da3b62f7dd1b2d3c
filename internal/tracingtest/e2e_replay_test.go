package tracingtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/relay"
	_ "github.com/pgsweep/pgsweep/relay/amqp" // relay.OpenURL in the child
	_ "github.com/pgsweep/pgsweep/relay/nats"
)

// A relay killed with SIGKILL after the broker took a message and before
// the database recorded it as published: another relay publishes the
// message again once the dead one's lease expired, and the replay carries
// the message's original creation context, byte for byte, as the first
// publish did (seed 002: a replay preserves identity, body and headers,
// including the original creation context); the replaying relay's span
// links to that context.
//
// NATS: the subscription on the subject sees both publishes; the stream's
// duplicate window drops the replay (same Nats-Msg-Id), so the stream holds
// the message once. RabbitMQ has no duplicate window: the consumer gets
// the message twice, with the same message_id.
func TestE2EReplayAfterKillNATS(t *testing.T)     { t.Parallel(); e2eReplay(t, natsKit) }
func TestE2EReplayAfterKillRabbitMQ(t *testing.T) { t.Parallel(); e2eReplay(t, amqpKit) }

// The child relay: this test binary, re-executed into
// TestRelayKilledHelperProcess with these variables set.
const (
	killHelperEnv  = "PGSWEEP_TRACE_RELAY_HELPER"      // "1" in the child
	killHelperArgs = "PGSWEEP_TRACE_RELAY_HELPER_ARGS" // JSON of killArgs
	killHelperLine = "BROKER-HAS-IT"                   // the child's stdout line once the broker confirmed
)

type killArgs struct {
	DatabaseURL, Schema, Queue, To string
}

// TestRelayKilledHelperProcess is the child: a relay whose transport
// publishes, and once the broker confirmed every message of the call,
// says so on stdout and never returns, so that the relay never records
// the publish (its Worker keeps renewing the lease until the parent kills
// the process). Run alone, it does nothing.
func TestRelayKilledHelperProcess(t *testing.T) {
	if os.Getenv(killHelperEnv) != "1" {
		return
	}
	var a killArgs
	if err := json.Unmarshal([]byte(os.Getenv(killHelperArgs)), &a); err != nil {
		fmt.Fprintln(os.Stderr, "helper args:", err)
		os.Exit(3)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, a.DatabaseURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pool:", err)
		os.Exit(3)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	tr, err := relay.OpenURL(a.To, "killed relay", log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "transport:", err)
		os.Exit(3)
	}
	r, err := relay.New(pool, a.Queue, stuckAfterPublish{tr}, relay.Options{Schema: a.Schema, Owner: "relay-killed",
		Lease: time.Second, PollInterval: 50 * time.Millisecond, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		os.Exit(3)
	}
	err = r.Run(ctx)
	fmt.Fprintln(os.Stderr, "relay returned:", err)
	os.Exit(4)
}

// stuckAfterPublish publishes, then announces it and blocks forever.
type stuckAfterPublish struct{ relay.Transport }

func (s stuckAfterPublish) Publish(ctx context.Context, msgs []relay.Message) []relay.Result {
	res := s.Transport.Publish(ctx, msgs)
	for _, r := range res {
		if r.Err != nil {
			return res // not confirmed: the relay retries; the parent waits on
		}
	}
	fmt.Println(killHelperLine)
	select {}
}

func e2eReplay(t *testing.T, newKit func(*testing.T, trace.TracerProvider) *brokerKit) {
	rec := newRecorder(t)
	k := newKit(t, rec)
	db := pgtest.New(t, 10)
	ctx := context.Background()
	if err := db.Client.QueueCreate(ctx, "orders", pgsweep.Outbox, 5); err != nil {
		t.Fatal(err)
	}
	c, err := pgsweep.NewClient(db.Pool, &pgsweep.ClientOptions{Schema: db.Schema, TracerProvider: rec})
	if err != nil {
		t.Fatal(err)
	}
	actx, remote := appContext(t)
	actx, app := rec.Tracer("app").Start(actx, "app")
	tx, err := db.Pool.Begin(actx)
	if err != nil {
		t.Fatal(err)
	}
	id, _, err := c.WithDB(tx).Send(actx, "orders", pgsweep.Message{Payload: json.RawMessage(`{"order":42}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(actx); err != nil {
		t.Fatal(err)
	}
	app.End()
	send := rec.one(t, "send orders")
	original := traceParent(send.SpanContext())
	var stored map[string]string
	if err := db.Pool.QueryRow(ctx, "SELECT headers FROM "+db.Rel("message")+" WHERE id = $1", id).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored[pgsweep.TraceParentHeader] != original {
		t.Fatalf("stored traceparent %q, want the send span's %q", stored[pgsweep.TraceParentHeader], original)
	}

	// the child publishes and is killed before it records the publish
	b, _ := json.Marshal(killArgs{DatabaseURL: db.URL, Schema: db.Schema, Queue: "orders", To: k.url})
	cmd := exec.Command(os.Args[0], "-test.run=^TestRelayKilledHelperProcess$")
	cmd.Env = append(os.Environ(), killHelperEnv+"=1", killHelperArgs+"="+string(b))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	announced := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == killHelperLine {
				close(announced)
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	select {
	case <-announced:
	case err := <-exited:
		t.Fatalf("the child relay exited (%v) before the broker confirmed", err)
	case <-time.After(time.Minute): // a bound for a loaded machine, not a measurement
		t.Fatal("the child relay did not publish")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err == nil || cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed by SIGKILL", err)
	}
	first := k.receive(t, 1)[0]
	var attempt int
	if err := db.Pool.QueryRow(ctx, "SELECT attempt FROM "+db.Rel("message")+" WHERE id = $1", id).Scan(&attempt); err != nil {
		t.Fatalf("the message is no longer in the outbox after the kill: %v", err)
	}

	// a relay with the recorder replays it once the dead one's lease expired
	r, err := relay.New(db.Pool, "orders", k.transport(t), relay.Options{Schema: db.Schema, Owner: "relay-replay",
		Lease: time.Second, PollInterval: 50 * time.Millisecond, TracerProvider: rec})
	if err != nil {
		t.Fatal(err)
	}
	runRelay(t, context.Background(), r)
	second := k.receive(t, 1)[0]
	pgtest.Eventually(t, time.Minute, queueEmpty(db, "orders"))
	publishName := "publish " + k.dest
	pgtest.Eventually(t, time.Minute, pgtest.Until("the replay's publish span to end", func() bool { return len(rec.ended(publishName)) == 1 }))

	// both copies: the original creation context, byte for byte
	identity := "orders/" + strconv.FormatInt(id, 10)
	for i, d := range []delivery{first, second} {
		if d.headers[pgsweep.TraceParentHeader] != original || d.headers[pgsweep.TraceStateHeader] != "pgsweep=e2e" {
			t.Errorf("copy %d: traceparent %q tracestate %q, want %q and %q (as stored)", i+1, d.headers[pgsweep.TraceParentHeader],
				d.headers[pgsweep.TraceStateHeader], original, "pgsweep=e2e")
		}
		if d.msgID != identity {
			t.Errorf("copy %d: message id %q, want %q", i+1, d.msgID, identity)
		}
		if got := d.headers[relay.HeaderAttempt]; got != strconv.Itoa(i+1) {
			t.Errorf("copy %d: %s %q, want %d", i+1, relay.HeaderAttempt, got, i+1)
		}
	}
	if n := k.stored(t); k.system == "nats" && n != 1 {
		t.Errorf("the stream holds %d messages, want 1: its duplicate window drops the replay", n)
	}
	// the broker-side consumer's spans: both children of the send span
	for _, s := range rec.ended("process " + k.dest) {
		if s.Parent().SpanID() != send.SpanContext().SpanID() || s.SpanContext().TraceID() != remote.TraceID() {
			t.Errorf("consumer span: parent %s trace %s, want the send span %s", s.Parent().SpanID(), s.SpanContext().TraceID(), send.SpanContext().SpanID())
		}
	}
	if n := len(rec.ended("process " + k.dest)); n != 2 {
		t.Errorf("%d consumer spans, want 2", n)
	}

	// the replaying relay's span links to the original creation context
	pub := rec.one(t, publishName)
	wantAttrs(t, pub, semconv.MessagingSystemKey.String(k.system), semconv.MessagingDestinationName(k.dest),
		semconv.MessagingMessageID(identity), attribute.Int("pgsweep.batch.published", 1))
	if len(pub.Links()) != 1 || !sameSpan(pub.Links()[0].SpanContext, send.SpanContext()) || pub.Links()[0].SpanContext.TraceID() != remote.TraceID() {
		t.Fatalf("replay's publish span links %v, want one link to the send span %s", pub.Links(), send.SpanContext().SpanID())
	}
	if v, _ := linkAttr(pub.Links()[0], "pgsweep.message.attempt"); v.AsInt64() != int64(attempt)+1 || attempt != 1 {
		t.Errorf("replay's link: attempt %d, want 2 (the killed relay's claim was attempt %d)", v.AsInt64(), attempt)
	}
	// and the replaying relay's Worker continues the send span's trace
	var proc sdktrace.ReadOnlySpan
	for _, s := range rec.ended("process orders") {
		if _, batch := attr(s, semconv.MessagingBatchMessageCountKey); !batch {
			proc = s
		}
	}
	if proc == nil || proc.Parent().SpanID() != send.SpanContext().SpanID() || proc.SpanContext().TraceID() != remote.TraceID() {
		t.Fatalf("no process span of the replaying relay's Worker under the send span")
	}
	wantAttrs(t, proc, attribute.Int("pgsweep.message.attempt", 2))
}

// linkAttr returns a link's attribute k.
func linkAttr(l sdktrace.Link, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range l.Attributes {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}
