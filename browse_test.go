package pgsweep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

func browseAll(t *testing.T, c *pgsweep.Client, queue, state string) []pgsweep.BrowsedMessage {
	t.Helper()
	var out []pgsweep.BrowsedMessage
	var after int64
	for {
		p, err := c.BrowseMessages(context.Background(), queue, state, after, 1000)
		if err != nil {
			t.Fatalf("browse %s: %v", state, err)
		}
		out = append(out, p.Messages...)
		if p.End {
			return out
		}
		after = p.Next
	}
}

// TestBrowseStates: each state's messages with their state's fields; the
// payload, headers and key only for a caller with the queue's browse right
// (the superuser, an admin until browse is revoked), never for the monitor.
func TestBrowseStates(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 4, "b", pgsweep.Outbox, 3)
	send := func(m pgsweep.Message) int64 {
		t.Helper()
		id, _, err := c.Send(ctx, "b", m)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	secret := func(i int) pgsweep.Message {
		return pgsweep.Message{Payload: json.RawMessage(fmt.Sprintf(`{"secret": "s%d"}`, i)), Key: fmt.Sprintf("k%d", i),
			Headers: map[string]string{"h": fmt.Sprintf("v%d", i)}}
	}
	m1 := send(secret(1))
	ds, err := c.Claim(ctx, "b", "w1", 1, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != m1 {
		t.Fatalf("claim m1: %+v, %v", ds, err)
	}
	inFlight := ds[0]
	m2 := send(secret(2))
	if ds, err = c.Claim(ctx, "b", "w2", 1, time.Minute); err != nil || len(ds) != 1 || ds[0].ID != m2 {
		t.Fatalf("claim m2: %+v, %v", ds, err)
	}
	if _, err := c.Fail(ctx, "b", ds[0].Token, []int64{m2}, "boom <script>", time.Hour); err != nil {
		t.Fatal(err)
	}
	m3 := send(secret(3))
	if ds, err = c.Claim(ctx, "b", "w3", 1, time.Minute); err != nil || len(ds) != 1 || ds[0].ID != m3 {
		t.Fatalf("claim m3: %+v, %v", ds, err)
	}
	if _, err := c.DeadLetter(ctx, "b", ds[0].Token, []int64{m3}, "bad"); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	m4 := secret(4)
	m4.DeliverAt = later
	id4 := send(m4)
	m5m := secret(5)
	m5m.Lane = "L"
	id5 := send(m5m)
	m6m := secret(6)
	m6m.Lane = "L"
	id6 := send(m6m)

	mon := roleClient(t, db, "monitor")
	adm := roleClient(t, db, "admin")
	for _, who := range []struct {
		name   string
		c      *pgsweep.Client
		browse bool
	}{{"superuser", c, true}, {"admin", adm, true}, {"monitor", mon, false}} {
		ids := func(ms []pgsweep.BrowsedMessage) []int64 {
			var out []int64
			for _, m := range ms {
				out = append(out, m.ID)
				if (m.Payload != nil || m.Headers != nil || m.Key != "") != who.browse {
					t.Errorf("%s: message %d payload %s headers %s key %q: want them only with the browse right", who.name, m.ID, m.Payload, m.Headers, m.Key)
				}
				if m.PayloadBytes <= 0 || m.HeadersBytes <= 0 {
					t.Errorf("%s: message %d sizes %d, %d", who.name, m.ID, m.PayloadBytes, m.HeadersBytes)
				}
			}
			return out
		}
		pending := browseAll(t, who.c, "b", pgsweep.BrowsePending)
		if got := ids(pending); !slices.Equal(got, []int64{id5, id6}) || pending[0].WaitingInLane || !pending[1].WaitingInLane ||
			pending[0].Lane != "L" || !pending[1].At.IsZero() {
			t.Fatalf("%s: pending %+v", who.name, pending)
		}
		sched := browseAll(t, who.c, "b", pgsweep.BrowseScheduled)
		if got := ids(sched); !slices.Equal(got, []int64{id4}) || !sched[0].At.Equal(later) {
			t.Fatalf("%s: scheduled %+v, want at %v", who.name, sched, later)
		}
		fl := browseAll(t, who.c, "b", pgsweep.BrowseInFlight)
		if got := ids(fl); !slices.Equal(got, []int64{m1}) || fl[0].Holder != "w1" || !fl[0].At.Equal(inFlight.LeaseExpiresAt) || fl[0].Attempts != 1 {
			t.Fatalf("%s: in flight %+v, want holder w1 until %v", who.name, fl, inFlight.LeaseExpiresAt)
		}
		failed := browseAll(t, who.c, "b", pgsweep.BrowseFailed)
		if got := ids(failed); !slices.Equal(got, []int64{m2}) || failed[0].LastError != "boom <script>" || failed[0].Holder != "" {
			t.Fatalf("%s: failed %+v", who.name, failed)
		}
		dead := browseAll(t, who.c, "b", pgsweep.BrowseDead)
		if got := ids(dead); !slices.Equal(got, []int64{m3}) || dead[0].LastError != "bad" {
			t.Fatalf("%s: dead %+v", who.name, dead)
		}
		// one by id: the same row, in whichever state
		for _, want := range slices.Concat(pending, sched, fl, failed, dead) {
			got, found, err := who.c.BrowseMessage(ctx, "b", want.ID)
			if err != nil || !found || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: BrowseMessage(%d) = %+v, %v, %v; want %+v", who.name, want.ID, got, found, err, want)
			}
		}
		if got, found, err := who.c.BrowseMessage(ctx, "b", id6+1000); err != nil || found {
			t.Fatalf("%s: BrowseMessage of no message: %+v, %v, %v", who.name, got, found, err)
		}
		if who.browse {
			if string(dead[0].Payload) != `{"secret": "s3"}` || dead[0].Key != "k3" || string(fl[0].Headers) != `{"h": "v1"}` {
				t.Fatalf("%s: dead %+v in flight %+v: want the payload, key and headers as sent", who.name, dead[0], fl[0])
			}
		}
	}
	// the monitor's whole view of the queue carries no payload
	for _, state := range []string{pgsweep.BrowsePending, pgsweep.BrowseScheduled, pgsweep.BrowseInFlight, pgsweep.BrowseFailed, pgsweep.BrowseDead} {
		b, _ := json.Marshal(browseAll(t, mon, "b", state))
		if strings.Contains(string(b), "secret") || strings.Contains(string(b), `"k`) {
			t.Fatalf("the monitor sees %s", b)
		}
	}
	// without the browse right an admin sees no payload either
	if err := c.QueueRevoke(ctx, "b", db.Schema+"_admin", pgsweep.RightBrowse); err != nil {
		t.Fatal(err)
	}
	if p, err := adm.BrowseMessages(ctx, "b", pgsweep.BrowseDead, 0, 10); err != nil || len(p.Messages) != 1 || p.Messages[0].Payload != nil || p.Messages[0].Key != "" {
		t.Fatalf("admin without browse: %+v, %v", p, err)
	}
	// a worker may not browse at all
	w := roleClient(t, db, "worker")
	var pgErr *pgconn.PgError
	if _, err := w.BrowseMessages(ctx, "b", pgsweep.BrowseDead, 0, 10); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("worker: %v, want 42501", err)
	}
	for _, bad := range []struct {
		queue, state string
		after        int64
		limit        int
	}{{"b", "nope", 0, 10}, {"b", "dead", -1, 10}, {"b", "dead", 0, 0}, {"b", "dead", 0, 1001}, {"nope", "dead", 0, 10}, {"", "dead", 0, 10}} {
		if _, err := mon.BrowseMessages(ctx, bad.queue, bad.state, bad.after, bad.limit); !errors.Is(err, pgsweep.ErrInvalidArgument) {
			t.Errorf("%+v: %v, want ErrInvalidArgument", bad, err)
		}
	}
	for _, bad := range []struct {
		queue string
		id    int64
	}{{"b", 0}, {"b", -1}, {"nope", 1}} {
		if _, _, err := mon.BrowseMessage(ctx, bad.queue, bad.id); !errors.Is(err, pgsweep.ErrInvalidArgument) {
			t.Errorf("BrowseMessage %+v: %v, want ErrInvalidArgument", bad, err)
		}
	}
	if _, err := mon.BrowseMatching(ctx, "b", pgsweep.BrowseDead, strings.Repeat("x", 1001), 0, 10); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Errorf("BrowseMatching with 1001 characters: %v, want ErrInvalidArgument", err)
	}
}

// TestBrowsePagesUnderClaims: paging through the pending messages while
// claims take some between pages never repeats an id or goes back, and
// shows every message that stayed pending.
func TestBrowsePagesUnderClaims(t *testing.T) {
	ctx, _, c := pgtest.StartQueue(t, 4, "p", pgsweep.Outbox, 3)
	var ms []pgsweep.Message
	for i := 0; i < 20; i++ {
		ms = append(ms, pgsweep.Message{Payload: json.RawMessage(`{}`)})
	}
	sent, err := c.SendBatch(ctx, "p", ms)
	if err != nil {
		t.Fatal(err)
	}
	claimed := map[int64]bool{}
	var seen []int64
	var after int64
	for {
		p, err := c.BrowseMessages(ctx, "p", pgsweep.BrowsePending, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range p.Messages {
			if len(seen) > 0 && m.ID <= seen[len(seen)-1] {
				t.Fatalf("id %d after %v: a page went back or repeated", m.ID, seen)
			}
			if claimed[m.ID] {
				t.Fatalf("id %d was claimed before its page", m.ID)
			}
			seen = append(seen, m.ID)
		}
		if p.End {
			break
		}
		after = p.Next
		// a claim between pages takes the 4 oldest pending: the 3 shown and one not yet
		ds, err := c.Claim(ctx, "p", "w", 4, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			claimed[d.ID] = true
		}
	}
	for _, id := range sent {
		if !claimed[id] && !slices.Contains(seen, id) {
			t.Fatalf("message %d stayed pending and was never shown (seen %v)", id, seen)
		}
	}
	if len(claimed) == 0 || len(seen) == 20 {
		t.Fatalf("claimed %d, seen %d: the claims must have taken some before their page", len(claimed), len(seen))
	}
}

// TestBrowseScanLimit: a state rare among many messages: a page stops after
// 10,000 rows read, says where it stopped (not the end), and the next page
// goes on from there.
func TestBrowseScanLimit(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 4, "s", pgsweep.Outbox, 3)
	if _, _, err := c.Send(ctx, "s", pgsweep.Message{Payload: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// the newest message is the one in flight: claim it after 10,000 older ones wait
	var ms []pgsweep.Message
	for i := 0; i < 10000; i++ {
		ms = append(ms, pgsweep.Message{Payload: json.RawMessage(`{}`)})
	}
	if _, err := c.SendBatch(ctx, "s", ms); err != nil {
		t.Fatal(err)
	}
	first, err := c.BrowseMessages(ctx, "s", pgsweep.BrowsePending, 0, 1)
	if err != nil || len(first.Messages) != 1 {
		t.Fatalf("first pending: %+v, %v", first, err)
	}
	ids, err := c.CancelMessages(ctx, "s", []int64{first.Messages[0].ID})
	if err != nil || len(ids) != 1 {
		t.Fatalf("cancel: %v, %v", ids, err)
	}
	last, _, err := c.Send(ctx, "s", pgsweep.Message{Payload: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	db.MustExec(t, "UPDATE "+db.Schema+".message SET status = 'failed', last_error = 'x' WHERE id = $1", last)

	p, err := c.BrowseMessages(ctx, "s", pgsweep.BrowseFailed, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Messages) != 0 || p.End || p.Next == 0 || p.Next >= last {
		t.Fatalf("first page %+v: want no message, not the end, a cursor before %d", p, last)
	}
	p, err = c.BrowseMessages(ctx, "s", pgsweep.BrowseFailed, p.Next, 10)
	if err != nil || len(p.Messages) != 1 || p.Messages[0].ID != last || !p.End || p.Messages[0].LastError != "x" {
		t.Fatalf("second page %+v, %v: want the failed message and the end", p, err)
	}
}

// TestBrowseDeadMatchingScanLimit: dead letters filtered by error text read
// at most 10,000 rows a page: a match after them comes on the next page.
func TestBrowseDeadMatchingScanLimit(t *testing.T) {
	db := pgtest.NewQueue(t, 2, "s", pgsweep.Outbox, 3)
	ctx := context.Background()
	c := db.Client
	s := pgx.Identifier{db.Schema}.Sanitize()
	db.MustExec(t, "INSERT INTO "+s+".message_dead (queue, id, payload, headers, attempts, last_error, created_at, dead_at) "+
		"SELECT 's', g, '{}', '{}', 3, CASE WHEN g = 10005 THEN 'the needle' ELSE 'hay' END, now(), now() FROM generate_series(1, 10010) g")
	p, err := c.BrowseMatching(ctx, "s", pgsweep.BrowseDead, "needle", 0, 10)
	if err != nil || len(p.Messages) != 0 || p.End || p.Next != 10000 {
		t.Fatalf("first page %+v, %v: want no message, not the end, the cursor at 10000", p, err)
	}
	p, err = c.BrowseMatching(ctx, "s", pgsweep.BrowseDead, "needle", p.Next, 10)
	if err != nil || len(p.Messages) != 1 || p.Messages[0].ID != 10005 || !p.End {
		t.Fatalf("second page %+v, %v: want the needle and the end", p, err)
	}
	if p, err := c.BrowseMatching(ctx, "s", pgsweep.BrowseDead, "hay", 0, 10); err != nil || len(p.Messages) != 10 || p.Next != 10 || p.End {
		t.Fatalf("a common match: %+v, %v: want a full page", p, err)
	}
}
