package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/internal/testsignal"
	"github.com/pgsweep/pgsweep/relay"
	relayamqp "github.com/pgsweep/pgsweep/relay/amqp"
	relaynats "github.com/pgsweep/pgsweep/relay/nats"
	"github.com/pgsweep/pgsweep/relay/relaytest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

func randName() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// stream makes a JetStream stream of its own for a test and returns the
// relay URL that publishes to it and a reader of what it holds.
func stream(t *testing.T) (relayURL string, read func() []*jetstream.RawStreamMsg) {
	t.Helper()
	name := "T" + randName()
	subject := "pgsweep.test." + name
	ns := relaytest.NewStream(t, name, subject)
	base, st := ns.Base, ns.Stream
	read = func() []*jetstream.RawStreamMsg {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatalf("stream info: %v", err)
		}
		var out []*jetstream.RawStreamMsg
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				t.Fatalf("get %d: %v", seq, err)
			}
			out = append(out, m)
		}
		return out
	}
	return base + "?subject=" + subject, read
}

func openNATS(t *testing.T, u string) *relaynats.Transport {
	t.Helper()
	tr, err := relaynats.Open(u, t.Name(), nil)
	if err != nil {
		t.Fatalf("open nats: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// start runs r until the test ends (or the returned stop is called) and
// fails the test if Run returns an error.
func start(t *testing.T, r *relay.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			t.Errorf("relay run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("relay did not stop within 30 s")
			}
		})
	}
	t.Cleanup(stop)
	// wait until it runs, so that Dispatch is taken
	pgtest.Eventually(t, 30*time.Second, pgtest.Until("the relay to run", func() bool { return r.Health().Running }))
	return stop
}

// queueEmpty is the condition that the queue holds no message (all
// published), for pgtest.Eventually.
func queueEmpty(t *testing.T, db *pgtest.DB, queue string) func() error {
	return func() error {
		var n int
		if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Rel("message")+" WHERE queue = $1", queue).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			return fmt.Errorf("queue %s still holds %d messages", queue, n)
		}
		return nil
	}
}

// waitCount waits until the values s fires add up to n (messages
// published, or settled).
func waitCount(t *testing.T, s *testsignal.Signal[int], what string, n int) {
	t.Helper()
	total := 0
	s.WaitUntil(t, fmt.Sprintf("%d messages %s", n, what), func(k int) bool { total += k; return total >= n })
	if total != n {
		t.Fatalf("%d messages %s, want %d", total, what, n)
	}
}

func send(t *testing.T, db *pgtest.DB, queue string, msgs []pgsweep.Message) []int64 {
	t.Helper()
	ids, err := db.Client.SendBatch(context.Background(), queue, msgs)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	return ids
}

func numbered(from, n int) []pgsweep.Message {
	ms := make([]pgsweep.Message, n)
	for i := range ms {
		ms[i] = pgsweep.Message{Payload: json.RawMessage(strconv.Itoa(from + i))}
	}
	return ms
}

// A message sent while no relay runs is published when one starts, with
// its payload, its headers and pgsweep's (identity, queue, id, attempt,
// created_at), and Nats-Msg-Id = its identity (its key when it has one).
func TestNATSPublishesWithHeaders(t *testing.T) {
	t.Parallel()
	db := pgtest.NewQueue(t, 10, "orders", pgsweep.Outbox, 5)
	u, read := stream(t)
	ids := send(t, db, "orders", []pgsweep.Message{
		{Payload: json.RawMessage(`{"order":1}`), Headers: map[string]string{"trace": "abc", "tenant": "t1"}},
		{Payload: json.RawMessage(`{"order":2}`), Key: "order-2"},
	})
	r, err := relay.New(db.Pool, "orders", openNATS(t, u), relay.Options{Schema: db.Schema, Owner: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	sig := relay.Signals(r)
	start(t, r)
	waitCount(t, &sig.Published, "published", 2)
	waitCount(t, &sig.Settled, "settled", 2)
	if err := queueEmpty(t, db, "orders")(); err != nil {
		t.Fatalf("both settled: %v", err)
	}
	got := read()
	if len(got) != 2 {
		t.Fatalf("stream holds %d messages, want 2", len(got))
	}
	m := got[0]
	if string(m.Data) != `{"order": 1}` && string(m.Data) != `{"order":1}` {
		t.Errorf("payload %q", m.Data)
	}
	want := map[string]string{"trace": "abc", "tenant": "t1", relay.HeaderIdentity: "orders/" + strconv.FormatInt(ids[0], 10),
		relay.HeaderQueue: "orders", relay.HeaderID: strconv.FormatInt(ids[0], 10), relay.HeaderAttempt: "1",
		"Nats-Msg-Id": "orders/" + strconv.FormatInt(ids[0], 10)}
	for k, v := range want {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, m.Header.Get(relay.HeaderCreatedAt)); err != nil {
		t.Errorf("header %s = %q: %v", relay.HeaderCreatedAt, m.Header.Get(relay.HeaderCreatedAt), err)
	}
	if id := got[1].Header.Get("Nats-Msg-Id"); id != "order-2" {
		t.Errorf("a keyed message's Nats-Msg-Id = %q, want its key", id)
	}
	if h := r.Health(); !h.Healthy || h.Published != 2 || h.Broker != "up" {
		t.Errorf("health %+v", h)
	}
}

// countingTransport counts the publishes of each identity over the real
// transport it wraps.
type countingTransport struct {
	relay.Transport
	mu    sync.Mutex
	count map[string]int
	delay time.Duration // before each Publish: a slow network
}

func (c *countingTransport) Publish(ctx context.Context, msgs []relay.Message) []relay.Result {
	if c.delay > 0 {
		select {
		case <-time.After(c.delay):
		case <-ctx.Done():
			return relay.Unavailable(len(msgs), ctx.Err())
		}
	}
	c.mu.Lock()
	if c.count == nil {
		c.count = map[string]int{}
	}
	for i := range msgs {
		c.count[msgs[i].Identity()]++
	}
	c.mu.Unlock()
	return c.Transport.Publish(ctx, msgs)
}

func (c *countingTransport) Check() error { return c.Transport.(relay.Checker).Check() }

// Direct dispatch and claims side by side, on two relays: every message is
// published exactly once (no crash here, so no replay either), though both
// relays are told to dispatch the same ids and both claim; and the
// messages sent before the relays started are published too.
func TestDispatchAndClaimsSideBySide(t *testing.T) {
	t.Parallel()
	db := pgtest.NewQueue(t, 20, "q", pgsweep.Outbox, 5)
	ctx := context.Background()
	u, read := stream(t)
	before := send(t, db, "q", numbered(0, 50)) // sent while no relay runs
	tr := &countingTransport{Transport: openNATS(t, u)}
	metrics := relay.NewMetrics(nil)
	var rs []*relay.Relay
	for i := range 2 {
		r, err := relay.New(db.Pool, "q", tr, relay.Options{Schema: db.Schema, Owner: fmt.Sprintf("r%d", i), Batch: 20,
			PollInterval: 50 * time.Millisecond, DispatchGrace: -1, Metrics: metrics})
		if err != nil {
			t.Fatal(err)
		}
		start(t, r)
		rs = append(rs, r)
	}
	all := append([]int64(nil), before...)
	var mu sync.Mutex
	// Rounds of 100 sends, each dispatched at once, until direct dispatch
	// has won at least one race: on a loaded machine the claims, woken by
	// the sends' NOTIFY, can take every message of a round first (seen
	// once in CI). Usually one round does it.
	directCount := func() float64 { return testutil.ToFloat64(metrics.Claimed.WithLabelValues("q", "direct")) }
	for round := 0; round < 10 && (round == 0 || directCount() == 0); round++ {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for k := range 25 {
					ids := send(t, db, "q", numbered(1000*(round+1)+100*w+4*k, 4))
					mu.Lock()
					all = append(all, ids...)
					mu.Unlock()
					// both relays race for the same ids, with their claims
					_ = rs[0].Dispatch(ctx, ids)
					_ = rs[1].Dispatch(ctx, ids)
				}
			})
		}
		wg.Wait()
		pgtest.Eventually(t, 30*time.Second, queueEmpty(t, db, "q"))
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.count) != len(all) {
		t.Errorf("%d identities published, want %d", len(tr.count), len(all))
	}
	for id, n := range tr.count {
		if n != 1 {
			t.Errorf("%s published %d times", id, n)
		}
	}
	if got := read(); len(got) != len(all) {
		t.Errorf("stream holds %d messages, want %d", len(got), len(all))
	}
	direct, claimed := directCount(), testutil.ToFloat64(metrics.Claimed.WithLabelValues("q", "claim"))
	if direct == 0 || claimed < 50 || int(direct+claimed) != len(all) {
		t.Errorf("claimed %v by direct dispatch and %v by claims, want both (the 50 sent before by claims) and %d in all", direct, claimed, len(all))
	}
	t.Logf("%v messages by direct dispatch, %v by claims", direct, claimed)
}

// While Dispatch is in use (and the poll is as frequent as DispatchGrace),
// the relay closes its LISTEN connection: the claims poll instead, so a
// message sent without Dispatch is still published. Ten seconds after the
// last Dispatch it listens again.
func TestDispatchInUseClosesListen(t *testing.T) {
	t.Parallel()
	db := pgtest.NewQueue(t, 10, "q", pgsweep.Outbox, 5)
	ctx := context.Background()
	channel, err := db.Client.NotifyChannel(ctx)
	if err != nil {
		t.Fatal(err)
	}
	listeners := func() int {
		t.Helper()
		var n int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = $1",
			"LISTEN "+pgx.Identifier{channel}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitListeners := func(want int, within time.Duration) {
		t.Helper()
		pgtest.Eventually(t, within, func() error {
			if n := listeners(); n != want {
				return fmt.Errorf("%d LISTEN connections, want %d", n, want)
			}
			return nil
		})
	}
	u, read := stream(t)
	r, err := relay.New(db.Pool, "q", openNATS(t, u), relay.Options{Schema: db.Schema, Owner: "quiet",
		PollInterval: 200 * time.Millisecond, DispatchGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	waitListeners(1, 5*time.Second)

	// Dispatch in use: the next NOTIFY closes the LISTEN connection
	ids := send(t, db, "q", numbered(0, 1))
	if err := r.Dispatch(ctx, ids); err != nil {
		t.Fatal(err)
	}
	send(t, db, "q", numbered(1, 1)) // a NOTIFY after the Dispatch; published by the poll
	waitListeners(0, 5*time.Second)
	t0 := time.Now()
	send(t, db, "q", numbered(2, 3)) // no Dispatch: the poll publishes them
	pgtest.Eventually(t, 5*time.Second, queueEmpty(t, db, "q"))
	t.Logf("published without LISTEN in %v", time.Since(t0).Round(time.Millisecond))
	if got := read(); len(got) != 5 {
		t.Errorf("stream holds %d messages, want 5", len(got))
	}
	// ten seconds after the last Dispatch it listens again
	waitListeners(1, 15*time.Second)
	send(t, db, "q", numbered(5, 1))
	pgtest.Eventually(t, 5*time.Second, queueEmpty(t, db, "q"))
	if got := read(); len(got) != 6 {
		t.Errorf("stream holds %d messages, want 6", len(got))
	}
}

// Dispatch never blocks: a full buffer and a relay that is not running
// leave the ids to the claims, which publish them.
func TestDispatchLeavesTheRestToClaims(t *testing.T) {
	t.Parallel()
	db := pgtest.NewQueue(t, 10, "q", pgsweep.Outbox, 5)
	ctx := context.Background()
	u, read := stream(t)
	r, err := relay.New(db.Pool, "q", openNATS(t, u), relay.Options{Schema: db.Schema, DispatchBuffer: 1, DispatchWorkers: 1,
		PollInterval: 100 * time.Millisecond, DisableNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := send(t, db, "q", numbered(0, 5))
	if err := r.Dispatch(ctx, ids); !errors.Is(err, relay.ErrNotRunning) {
		t.Errorf("Dispatch before Run: %v, want ErrNotRunning", err)
	}
	start(t, r)
	more := send(t, db, "q", numbered(10, 200))
	full := false
	for _, id := range more {
		if err := r.Dispatch(ctx, []int64{id}); errors.Is(err, relay.ErrDispatchFull) {
			full = true
		}
	}
	if !full {
		t.Log("the buffer of 1 never filled (dispatch kept up)")
	}
	pgtest.Eventually(t, 30*time.Second, queueEmpty(t, db, "q"))
	if got := read(); len(got) != 205 {
		t.Errorf("stream holds %d messages, want 205", len(got))
	}
}

// A message the broker refuses for good (larger than NATS's max_payload)
// becomes a dead letter at once; the others are published.
func TestPermanentFailureIsDeadLettered(t *testing.T) {
	t.Parallel()
	db := pgtest.NewQueue(t, 10, "q", pgsweep.Outbox, 5)
	ctx := context.Background()
	u, read := stream(t)
	// pgsweep's own cap (max_payload_bytes, 1 MiB by default) is raised so that the broker is the one to refuse
	if _, err := db.Pool.Exec(ctx, "SELECT "+db.Rel("setting_set")+"('max_payload_bytes'::pg_catalog.text, '4194304'::pg_catalog.text)"); err != nil {
		t.Fatal(err)
	}
	big := `"` + strings.Repeat("x", 2<<20) + `"` // nats-server's max_payload is 1 MiB
	ids := send(t, db, "q", []pgsweep.Message{{Payload: json.RawMessage(`1`)}, {Payload: json.RawMessage(big)}, {Payload: json.RawMessage(`3`)}})
	r, err := relay.New(db.Pool, "q", openNATS(t, u), relay.Options{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	sig := relay.Signals(r)
	start(t, r)
	waitCount(t, &sig.Published, "published", 2) // the third, refused, is not
	waitCount(t, &sig.Settled, "settled", 3)
	if err := queueEmpty(t, db, "q")(); err != nil {
		t.Fatalf("all three settled: %v", err)
	}
	var attempts int
	var lastErr string
	if err := db.Pool.QueryRow(ctx, "SELECT attempts, last_error FROM "+db.Rel("message_dead")+
		" WHERE queue = 'q' AND id = $1", ids[1]).Scan(&attempts, &lastErr); err != nil {
		t.Fatalf("the large message is not a dead letter: %v", err)
	}
	if attempts != 1 || !strings.Contains(lastErr, "maximum payload") {
		t.Errorf("dead letter after %d attempts with %q, want 1 attempt and the broker's refusal", attempts, lastErr)
	}
	if got := read(); len(got) != 2 {
		t.Errorf("stream holds %d messages, want 2", len(got))
	}
}

// A publish slower than the lease keeps its lease (renewed every Lease/3):
// another relay claims nothing meanwhile, and the message is published once.
func TestSlowPublishRenewsItsLease(t *testing.T) {
	t.Parallel()
	db := pgtest.NewQueue(t, 10, "q", pgsweep.Outbox, 5)
	ctx := context.Background()
	u, read := stream(t)
	send(t, db, "q", numbered(0, 3))
	slow := &countingTransport{Transport: openNATS(t, u), delay: 3 * time.Second}
	r, err := relay.New(db.Pool, "q", slow, relay.Options{Schema: db.Schema, Owner: "slow", Lease: time.Second, PublishTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	pgtest.Eventually(t, 20*time.Second, func() error { // the slow relay holds them now
		st, err := db.Client.QueueStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st) == 0 || st[0].Processing != 3 {
			return fmt.Errorf("the slow relay did not claim the messages: %+v", st)
		}
		return nil
	})
	fast := &countingTransport{Transport: openNATS(t, u)}
	r2, err := relay.New(db.Pool, "q", fast, relay.Options{Schema: db.Schema, Owner: "fast", PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r2)
	pgtest.Eventually(t, 20*time.Second, queueEmpty(t, db, "q"))
	fast.mu.Lock()
	defer fast.mu.Unlock()
	if len(fast.count) != 0 {
		t.Errorf("the other relay published %d messages whose lease was renewed", len(fast.count))
	}
	if got := read(); len(got) != 3 {
		t.Errorf("stream holds %d messages, want 3", len(got))
	}
}

// On shutdown the relay gives back at once what it claimed and did not
// publish (attempt not spent): here a publish that hangs past the shutdown
// timeout.
func TestShutdownReleasesWhatWasNotPublished(t *testing.T) {
	t.Parallel()
	db := pgtest.NewQueue(t, 10, "q", pgsweep.Outbox, 5)
	ctx := context.Background()
	u, _ := stream(t)
	send(t, db, "q", numbered(0, 10))
	hang := &countingTransport{Transport: openNATS(t, u), delay: time.Hour}
	r, err := relay.New(db.Pool, "q", hang, relay.Options{Schema: db.Schema, ShutdownTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, r)
	pgtest.Eventually(t, 10*time.Second, func() error {
		st, err := db.Client.QueueStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st) == 0 || st[0].Processing != 10 {
			return fmt.Errorf("the relay did not claim the messages: %+v", st)
		}
		return nil
	})
	began := time.Now()
	stop()
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("shutdown took %v", took)
	}
	var pending, attempts int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE status = 'pending' AND token IS NULL), sum(attempt) FROM "+
		db.Rel("message")+" WHERE queue = 'q'").Scan(&pending, &attempts); err != nil {
		t.Fatal(err)
	}
	if pending != 10 || attempts != 0 {
		t.Errorf("after shutdown %d of 10 messages pending, %d attempts spent; want all released, none spent", pending, attempts)
	}
}

// RabbitMQ: persistent, mandatory, confirmed; message_id = identity,
// timestamp = created_at, the headers carried through. An unroutable
// message fails (retried after the backoff), it is not dropped.
func TestAMQPPublishesAndUnroutableFails(t *testing.T) {
	t.Parallel()
	base := relaytest.AMQP(t)
	db := pgtest.NewQueue(t, 10, "q", pgsweep.Outbox, 5)
	ctx := context.Background()
	if err := db.Client.QueueConfigure(ctx, "q", map[string]any{"backoff_base": "1 hour", "backoff_max": "1 hour"}); err != nil {
		t.Fatal(err)
	}
	qname := "pgsweep-test-" + randName()
	conn, err := amqp091.Dial(base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(qname, false, false, false) })
	tr, err := relayamqp.Open(base+"?routing_key="+qname+"&declare_queue="+qname+"&routing_key_header=rk", t.Name(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	ids := send(t, db, "q", []pgsweep.Message{
		{Payload: json.RawMessage(`{"n":1}`), Headers: map[string]string{"trace": "abc"}, Key: "k-1"},
		{Payload: json.RawMessage(`{"n":2}`), Headers: map[string]string{"rk": "nowhere-" + randName()}},
	})
	r, err := relay.New(db.Pool, "q", tr, relay.Options{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	start(t, r)
	pgtest.Eventually(t, 20*time.Second, func() error {
		st, err := db.Client.QueueStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st) == 0 || st[0].Failed != 1 || st[0].Pending != 0 || st[0].Processing != 0 {
			return fmt.Errorf("queue stats %+v", st)
		}
		return nil
	})
	var lastErr string
	if err := db.Pool.QueryRow(ctx, "SELECT last_error FROM "+db.Rel("message")+" WHERE queue = 'q' AND id = $1",
		ids[1]).Scan(&lastErr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastErr, "unroutable") {
		t.Errorf("unroutable message's last error %q", lastErr)
	}
	d, ok, err := ch.Get(qname, true)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if d.MessageId != "k-1" || d.DeliveryMode != amqp091.Persistent || d.ContentType != "application/json" || string(d.Body) != `{"n": 1}` {
		t.Errorf("delivery id=%q mode=%d type=%q body=%q", d.MessageId, d.DeliveryMode, d.ContentType, d.Body)
	}
	if d.Headers["trace"] != "abc" || d.Headers[relay.HeaderID] != strconv.FormatInt(ids[0], 10) || d.Headers[relay.HeaderAttempt] != "1" ||
		d.Headers[relay.HeaderIdentity] != "k-1" {
		t.Errorf("headers %v", d.Headers)
	}
	if d.Timestamp.IsZero() {
		t.Errorf("no timestamp")
	}
	if _, ok, _ := ch.Get(qname, true); ok {
		t.Errorf("a second message reached the queue")
	}
}
