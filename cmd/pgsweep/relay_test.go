package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/relay"
	"github.com/pgsweep/pgsweep/relay/relaytest"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// The relay's process tests run `pgsweep relay` in a child process: this
// test binary, re-executed into TestRelayHelperProcess, which calls the
// CLI's run() exactly as main does. A child can be told to kill itself
// with SIGKILL right after the broker confirmed a batch and before the
// database recorded it (the worst moment: the broker holds messages the
// database still counts as unpublished), and it appends every id the
// broker confirmed to a file, so the test sees the replays.
const (
	helperEnv    = "PGSWEEP_RELAY_HELPER"
	helperArgs   = "PGSWEEP_RELAY_HELPER_ARGS"
	helperKill   = "PGSWEEP_RELAY_HELPER_KILL_AFTER" // SIGKILL after this many confirmed batches
	helperLogEnv = "PGSWEEP_RELAY_HELPER_LOG"        // file of confirmed ids
)

func TestRelayHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv(helperArgs)), &args); err != nil {
		fmt.Fprintln(os.Stderr, "helper args:", err)
		os.Exit(3)
	}
	killAfter, _ := strconv.Atoi(os.Getenv(helperKill))
	var log *os.File
	if p := os.Getenv(helperLogEnv); p != "" {
		var err error
		if log, err = os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "helper log:", err)
			os.Exit(3)
		}
	}
	var batches atomic.Int64
	relayHooks.Published = func(ids []int64) {
		if log != nil {
			var b strings.Builder
			for _, id := range ids {
				fmt.Fprintf(&b, "%d\n", id)
			}
			_, _ = log.WriteString(b.String())
		}
		if killAfter > 0 && batches.Add(1) >= int64(killAfter) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL) // confirmed by the broker, not completed
			select {}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, args, os.Stdout, os.Stderr))
}

// relayProc is a running `pgsweep relay` child.
type relayProc struct {
	cmd  *exec.Cmd
	out  *pgtest.SyncBuffer
	done chan struct{}
	err  error
}

func startRelay(t *testing.T, killAfter int, logFile string, args ...string) *relayProc {
	t.Helper()
	return startCLI(t, append(os.Environ(), helperKill+"="+strconv.Itoa(killAfter), helperLogEnv+"="+logFile), append([]string{"relay"}, args...)...)
}

// wait waits for the child to exit and returns its exit code (-1: killed).
func (p *relayProc) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("relay %v did not exit within %v; output:\n%s", p.cmd.Args, within, p.out.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

func randSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// relayDB is an outbox queue "q" in a schema of the test's own, with n
// messages sent (payloads 0..n-1).
func relayDB(t *testing.T, n int) (*pgtest.DB, []int64) {
	t.Helper()
	db := pgtest.NewQueue(t, 10, "q", pgsweep.Outbox, 20)
	ctx := context.Background()
	var ids []int64
	for lo := 0; lo < n; lo += 500 {
		msgs := make([]pgsweep.Message, 0, 500)
		for i := lo; i < min(n, lo+500); i++ {
			msgs = append(msgs, pgsweep.Message{Payload: json.RawMessage(strconv.Itoa(i)), Headers: map[string]string{"n": strconv.Itoa(i)}})
		}
		got, err := db.Client.SendBatch(ctx, "q", msgs)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	return db, ids
}

func queueLen(t *testing.T, db *pgtest.DB, queue string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Rel("message")+
		" WHERE queue = $1", queue).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// queueEmpty is the condition that queue holds no message, for
// pgtest.Eventually.
func queueEmpty(t *testing.T, db *pgtest.DB, queue string) func() error {
	return func() error {
		if n := queueLen(t, db, queue); n != 0 {
			return fmt.Errorf("queue %s still holds %d messages", queue, n)
		}
		return nil
	}
}

func deadLetters(t *testing.T, db *pgtest.DB) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Rel("message_dead")).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// confirmedCount counts the lines (confirmed ids) of a helper log.
func confirmedCount(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return 0
		}
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	s := bufio.NewScanner(f)
	for s.Scan() {
		n++
	}
	return n
}

// crashLoop runs relays that die, most by SIGKILL right after the broker
// confirmed a batch (the first, second or third) and before the database
// recorded it, the last three by a kill -9 from outside at some moment;
// then one that drains the queue and stops on SIGTERM (exit 0).
func crashLoop(t *testing.T, db *pgtest.DB, to string, rounds int, logFile string) {
	t.Helper()
	args := []string{"--database-url", db.URL, "--schema", db.Schema, "--queue", "q", "--to", to, "--http-addr", "",
		"--batch", "10", "--lease", "1s", "--poll-interval", "50ms"}
	kills := 0
	for i := range rounds {
		if queueLen(t, db, "q") == 0 {
			break
		}
		if i >= rounds-3 { // the last three: kill -9 from outside, at some moment
			p := startRelay(t, 0, logFile, args...)
			// time under test: the kill comes at an arbitrary moment
			time.Sleep(time.Duration(60+40*(rounds-i)) * time.Millisecond)
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			p.wait(t, 30*time.Second)
			continue
		}
		p := startRelay(t, 1+i%3, logFile, args...)
		deadline := time.Now().Add(60 * time.Second)
		for {
			select {
			case <-p.done:
			case <-time.After(100 * time.Millisecond):
				if queueLen(t, db, "q") > 0 && time.Now().Before(deadline) {
					continue
				}
				// nothing left to confirm (or stuck): stop it
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				if code := p.wait(t, 30*time.Second); code != 0 {
					t.Fatalf("round %d: relay exited %d after SIGTERM:\n%s", i, code, p.out.String())
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d: the relay confirmed fewer than %d batches in 60 s:\n%s", i, 1+i%3, p.out.String())
				}
			}
			break
		}
		if code := p.wait(t, time.Second); code == -1 {
			kills++
		} else if code != 0 {
			t.Fatalf("round %d: relay exited %d:\n%s", i, code, p.out.String())
		}
	}
	if kills < rounds/2 {
		t.Errorf("only %d relays died by SIGKILL between the broker's confirm and the complete", kills)
	}
	t.Logf("%d relays killed between the broker's confirm and the complete", kills)
	p := startRelay(t, 0, logFile, args...)
	pgtest.Eventually(t, 60*time.Second, queueEmpty(t, db, "q"))
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("relay exited %d after SIGTERM:\n%s", code, p.out.String())
	}
}

// kill -9 between the broker's confirm and the database's complete, many
// times: JetStream holds each message exactly once (its duplicate window
// drops the replays, recognised by Nats-Msg-Id), though the broker
// confirmed many of them more than once.
func TestRelayCrashesNATSHoldsEachOnce(t *testing.T) {
	t.Parallel()
	base := relaytest.NATS(t)
	const n = 600
	db, ids := relayDB(t, n)
	name := "C" + randSuffix()
	subject := "pgsweep.crash." + name
	logFile := filepath.Join(t.TempDir(), "confirmed")
	crashLoop(t, db, base+"?subject="+subject+"&stream="+name, 12, logFile)

	nc, err := natsgo.Connect(base)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Errorf("the stream holds %d messages, want %d", info.State.Msgs, n)
	}
	seen := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get %d: %v", seq, err)
		}
		seen[m.Header.Get("Nats-Msg-Id")]++
	}
	for _, id := range ids {
		if c := seen["q/"+strconv.FormatInt(id, 10)]; c != 1 {
			t.Errorf("message %d is in the stream %d times", id, c)
		}
	}
	if len(seen) != n {
		t.Errorf("%d identities in the stream, want %d", len(seen), n)
	}
	c := confirmedCount(t, logFile)
	if c <= n {
		t.Errorf("the broker confirmed %d publishes of %d messages: the crashes replayed nothing", c, n)
	}
	if d := deadLetters(t, db); d != 0 {
		t.Errorf("%d dead letters", d)
	}
	t.Logf("%d messages, %d confirmed publishes (%d replays dropped by the stream)", n, c, c-n)
}

// The same against RabbitMQ, which has no duplicate window: the queue
// holds each message at least once, and every copy of a message carries
// the same message_id (and body).
func TestRelayCrashesRabbitMQAtLeastOnce(t *testing.T) {
	t.Parallel()
	base := relaytest.AMQP(t)
	const n = 600
	db, ids := relayDB(t, n)
	qname := "pgsweep-crash-" + randSuffix()
	logFile := filepath.Join(t.TempDir(), "confirmed")
	conn, err := amqp091.Dial(base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(qname, false, false, false) })
	crashLoop(t, db, base+"?routing_key="+qname+"&declare_queue="+qname, 12, logFile)

	copies := map[string][]amqp091.Delivery{} // by pgsweep-id
	for {
		d, ok, err := ch.Get(qname, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		id, _ := d.Headers[relay.HeaderID].(string)
		copies[id] = append(copies[id], d)
	}
	total := 0
	for _, id := range ids {
		cs := copies[strconv.FormatInt(id, 10)]
		if len(cs) == 0 {
			t.Errorf("message %d never reached the queue", id)
			continue
		}
		total += len(cs)
		for _, c := range cs[1:] {
			if c.MessageId != cs[0].MessageId || string(c.Body) != string(cs[0].Body) {
				t.Errorf("message %d: a duplicate with message_id %q body %q, the first had %q %q", id, c.MessageId, c.Body, cs[0].MessageId, cs[0].Body)
			}
		}
		if want := "q/" + strconv.FormatInt(id, 10); cs[0].MessageId != want {
			t.Errorf("message %d: message_id %q, want %q", id, cs[0].MessageId, want)
		}
	}
	if len(copies) != n {
		t.Errorf("%d distinct messages in the queue, want %d", len(copies), n)
	}
	if total <= n {
		t.Logf("no duplicate reached the queue (%d deliveries): the crashes happened to replay nothing", total)
	}
	if d := deadLetters(t, db); d != 0 {
		t.Errorf("%d dead letters", d)
	}
	t.Logf("%d messages, %d deliveries in the queue, %d confirmed publishes", n, total, confirmedCount(t, logFile))
}

// End to end, exactly once: an outbox in one schema, relays that crash
// (kill -9 after the broker's confirm, before the complete), a RabbitMQ
// broker restarted in the middle, and a consumer that sends each delivery
// into a pgsweep inbox queue of another schema keyed by message_id; a
// Worker processes the inbox. Every message is processed exactly once.
func TestRelayEndToEndExactlyOnceThroughAnInbox(t *testing.T) {
	t.Parallel()
	broker := relaytest.Private(t, "rabbitmq")
	const n = 200
	out, _ := relayDB(t, n)
	in := pgtest.New(t, 10) // the consumer's side: another schema
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := in.Client.QueueCreate(ctx, "orders-in", pgsweep.Inbox, 5); err != nil {
		t.Fatal(err)
	}
	processed := pgx.Identifier{in.Schema, "processed"}.Sanitize()
	if _, err := in.Pool.Exec(ctx, "CREATE TABLE "+processed+" (n int NOT NULL, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		t.Fatal(err)
	}
	qname := "orders"
	to := broker.URL + "?routing_key=" + qname + "&declare_queue=" + qname

	// the consumer: each delivery into the inbox (a duplicate key is refused), then ack
	var deliveries atomic.Int64
	consumerDone := make(chan struct{})
	go func() {
		defer close(consumerDone)
		for ctx.Err() == nil {
			func() {
				conn, err := amqp091.Dial(broker.URL)
				if err != nil {
					return
				}
				defer conn.Close()
				ch, err := conn.Channel()
				if err != nil {
					return
				}
				if _, err := ch.QueueDeclare(qname, true, false, false, false, nil); err != nil {
					return
				}
				_ = ch.Qos(50, 0, false)
				ds, err := ch.Consume(qname, "", false, false, false, false, nil)
				if err != nil {
					return
				}
				for {
					select {
					case <-ctx.Done():
						return
					case d, ok := <-ds:
						if !ok {
							return
						}
						deliveries.Add(1)
						if _, _, err := in.Client.Send(ctx, "orders-in", pgsweep.Message{Payload: d.Body, Key: d.MessageId}); err != nil {
							_ = d.Nack(false, true)
							continue
						}
						_ = d.Ack(false)
					}
				}
			}()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	// the inbox's worker
	w, err := pgsweep.NewWorker(in.Pool, func(ctx context.Context, d *pgsweep.Delivery) error {
		var k int
		if err := json.Unmarshal(d.Payload, &k); err != nil {
			return err
		}
		_, err := in.Pool.Exec(ctx, "INSERT INTO "+processed+" (n) VALUES ($1)", k)
		return err
	}, pgsweep.WorkerOptions{Schema: in.Schema, Queue: "orders-in", PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(ctx) }()

	// more messages keep coming while relays crash and the broker restarts
	var sent atomic.Int64
	sent.Store(n)
	sendCtx, stopSending := context.WithCancel(ctx)
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		for sendCtx.Err() == nil {
			k := sent.Load()
			// not cancellable: a send that committed is counted
			if _, _, err := out.Client.Send(context.Background(), "q", pgsweep.Message{Payload: json.RawMessage(strconv.FormatInt(k, 10))}); err != nil {
				t.Errorf("send: %v", err)
				return
			}
			sent.Add(1)
			select {
			case <-sendCtx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	logFile := filepath.Join(t.TempDir(), "confirmed")
	args := []string{"--database-url", out.URL, "--schema", out.Schema, "--queue", "q", "--to", to, "--http-addr", "",
		"--batch", "10", "--lease", "1s", "--poll-interval", "50ms"}
	for i := range 6 {
		p := startRelay(t, 1+i%3, logFile, args...)
		if code := p.wait(t, 60*time.Second); code != -1 {
			t.Fatalf("round %d: relay exited %d:\n%s", i, code, p.out.String())
		}
	}
	// a relay runs across a broker restart and recovers by itself
	p := startRelay(t, 0, logFile, args...)
	confirmedSince := func(before int) func() error { // the relay confirmed more than before
		return func() error {
			if n := confirmedCount(t, logFile); n <= before {
				return fmt.Errorf("the relay confirmed nothing more than %d publishes:\n%s", before, p.out.String())
			}
			return nil
		}
	}
	pgtest.Eventually(t, 30*time.Second, confirmedSince(confirmedCount(t, logFile)))
	broker.Stop()
	time.Sleep(2 * time.Second) // time under test: the broker is down for 2 s
	broker.Start()
	pgtest.Eventually(t, 60*time.Second, confirmedSince(confirmedCount(t, logFile)))
	stopSending()
	<-senderDone
	total := int(sent.Load())
	pgtest.Eventually(t, 90*time.Second, queueEmpty(t, out, "q"))
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("relay exited %d after SIGTERM:\n%s", code, p.out.String())
	}
	if !strings.Contains(p.out.String(), "broker unreachable") || !strings.Contains(p.out.String(), "reachable again") {
		t.Errorf("the relay did not log the outage and its recovery:\n%s", p.out.String())
	}
	// every message processed, once
	pgtest.Eventually(t, 60*time.Second, func() error {
		var rows, distinct int
		if err := in.Pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT n) FROM "+processed).Scan(&rows, &distinct); err != nil {
			t.Fatal(err)
		}
		if rows > distinct {
			t.Fatalf("%d messages processed more than once (%d rows, %d distinct)", rows-distinct, rows, distinct)
		}
		if distinct != total {
			return fmt.Errorf("%d of %d messages processed", distinct, total)
		}
		return nil
	})
	// time under test: a late duplicate, if any, would show within this
	time.Sleep(500 * time.Millisecond)
	var rows int
	if err := in.Pool.QueryRow(ctx, "SELECT count(*) FROM "+processed).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != total {
		t.Errorf("%d processings of %d messages", rows, total)
	}
	cancel()
	<-consumerDone
	if err := <-workerDone; err != nil {
		t.Errorf("worker: %v", err)
	}
	if d := deadLetters(t, out); d != 0 {
		t.Errorf("%d dead letters in the outbox", d)
	}
	t.Logf("%d messages: %d confirmed publishes, %d deliveries to the consumer, each processed once", total, confirmedCount(t, logFile), deliveries.Load())
}

func TestRelayUsageErrors(t *testing.T) {
	db := pgtest.New(t, 2)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--to", "nats://127.0.0.1:1?subject=x"}, "--queue is required"},
		{[]string{"--queue", "q"}, "--to is required"},
		{[]string{"--queue", "q", "--to", "kafka://x"}, "scheme must be"},
		{[]string{"--queue", "q", "--to", "nats://127.0.0.1:1"}, "subject=SUBJ is required"},
		{[]string{"--queue", "q", "--to", "nats://127.0.0.1:1?subject=x&bogus=1"}, `unknown parameter "bogus"`},
		{[]string{"--queue", "q", "--to", "amqp://guest:secret@127.0.0.1:1/"}, "routing_key=K is required"},
	} {
		_, errOut, code := runCLI(t, append([]string{"relay", "--database-url", db.URL, "--schema", db.Schema}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("relay %v: code %d, %q; want 2 and %q", c.args, code, errOut, c.want)
		}
		if strings.Contains(errOut, "secret") {
			t.Errorf("relay %v: the password is in the error: %s", c.args, errOut)
		}
	}
	// what the SQL checks (an unknown queue, a batch or lease out of
	// range): the relay's first claim is refused with the SQL's error, exit 1
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--queue", "nope"}, "unknown queue"},
		{[]string{"--queue", "q", "--batch", "10001"}, "p_batch must be between 1 and 10000, got 10001"},
		{[]string{"--queue", "q", "--lease", "100ms"}, "p_lease must be between"},
	} {
		_, errOut, code := runCLI(t, append([]string{"relay", "--database-url", db.URL, "--schema", db.Schema,
			"--to", "nats://127.0.0.1:1?subject=x", "--http-addr", ""}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("relay %v: code %d, %s; want 1 and %q", c.args, code, errOut, c.want)
		}
	}
}

// Ordered lanes through crashes: two relays at a time, killed with SIGKILL
// right after the broker confirmed a batch, then two that drain the queue.
// Per lane the stream holds the messages in send order, each once.
func TestRelayLanesInOrderUnderCrashes(t *testing.T) {
	t.Parallel()
	base := relaytest.NATS(t)
	db := pgtest.NewQueue(t, 10, "q", pgsweep.Outbox, 20)
	ctx := context.Background()
	const lanes, per = 6, 25
	var msgs []pgsweep.Message
	for k := range per {
		for l := range lanes {
			msgs = append(msgs, pgsweep.Message{Payload: json.RawMessage(strconv.Itoa(k)), Lane: fmt.Sprintf("lane-%d", l)})
		}
	}
	if _, err := db.Client.SendBatch(ctx, "q", msgs); err != nil {
		t.Fatal(err)
	}
	name := "L" + randSuffix()
	to := base + "?subject=pgsweep.lanes." + name + "&stream=" + name
	args := []string{"--database-url", db.URL, "--schema", db.Schema, "--queue", "q", "--to", to, "--http-addr", "",
		"--batch", "10", "--lease", "1s", "--poll-interval", "50ms"}
	logFile := filepath.Join(t.TempDir(), "confirmed")
	for i := range 4 {
		a := startRelay(t, 1+i%3, logFile, args...)
		b := startRelay(t, 1+(i+1)%3, logFile, args...)
		for _, p := range []*relayProc{a, b} {
			if code := p.wait(t, 60*time.Second); code != -1 {
				t.Fatalf("round %d: relay exited %d:\n%s", i, code, p.out.String())
			}
		}
	}
	a := startRelay(t, 0, logFile, args...)
	b := startRelay(t, 0, logFile, args...)
	pgtest.Eventually(t, 60*time.Second, queueEmpty(t, db, "q"))
	for _, p := range []*relayProc{a, b} {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("relay exited %d after SIGTERM:\n%s", code, p.out.String())
		}
	}
	nc, err := natsgo.Connect(base)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		k, _ := strconv.Atoi(string(m.Data))
		got[m.Header.Get(relay.HeaderLane)] = append(got[m.Header.Get(relay.HeaderLane)], k)
	}
	for l := range lanes {
		lane := fmt.Sprintf("lane-%d", l)
		want := make([]int, per)
		for k := range want {
			want[k] = k
		}
		if fmt.Sprint(got[lane]) != fmt.Sprint(want) {
			t.Errorf("%s in the stream: %v, want %v", lane, got[lane], want)
		}
	}
	t.Logf("%d lanes of %d messages in order through 8 crashes, %d confirmed publishes", lanes, per, confirmedCount(t, logFile))
}

// bench relay runs end to end on a small scale and drops what it made.
func TestBenchRelaySmall(t *testing.T) {
	needBench(t)
	t.Parallel()
	nats := relaytest.NATS(t)
	url := pgtest.URL(t)
	schema := pgtest.SchemaName(t)
	out, errOut, code := runCLI(t, "bench", "relay", "--database-url", url, "--schema", schema, "--to", nats,
		"--messages", "500", "--relays", "2", "--workers", "2", "--rate", "100", "--duration", "1s")
	if code != 0 {
		t.Fatalf("bench relay: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"claim ", "burn-down ", "direct ", "notify ", "burn-down / claim + complete", "p99"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if s := pgtest.SchemaState(t, pgtest.Conn(t, url), schema); s != "absent" {
		t.Errorf("the scratch schema %s is left: %s", schema, s)
	}
	_, errOut, code = runCLI(t, "bench", "relay", "--database-url", url)
	if code != 2 || !strings.Contains(errOut, "--to is required") {
		t.Errorf("without --to: exit %d, %s", code, errOut)
	}
}
