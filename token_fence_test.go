package pgsweep_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Token fencing under concurrency. 32 claimers, each on a connection of its
// own and all under the SAME owner string, claim with 1-second leases; a
// share of them sleep past their lease before they act, so the others claim
// those messages again (the owner is the same every time: only the token
// tells the claims apart). Each claimer renews, fails (retry at once),
// releases and completes with the token of its claim, always sending every
// id it claimed, stale or not. A trigger logs in the database, in order,
// every claim (id, new token) and every act on a row (id, the row's token
// when it acted). Proven from the two logs:
//   - every message is completed exactly once, nothing is left;
//   - what each call says it acted on is exactly what the database did under
//     that call's token (per verb, token and id): no call ever acted on a
//     row another claim held;
//   - every act happened within the tenure of its token (the row's latest
//     claim) and every id a call did not act on had been claimed again by
//     another token (a stale token), so a live token was never refused;
//   - stale tokens were tried, and refused, for renew, complete and fail, and
//     rows were taken over after their lease expired.
func TestTokenFenceUnderConcurrency(t *testing.T) {
	const (
		messages = 2000
		claimers = 32
		batch    = 10
		lease    = time.Second
		owner    = "same-owner" // every claimer: the label cannot fence anything
	)
	ctx, db, c := pgtest.Start(t, 2)
	s := db.Q()
	if err := c.QueueCreate(ctx, "q", pgsweep.Outbox, 1000); err != nil {
		t.Fatal(err)
	}
	// claim_rescan 0: every claim scans from the head, so an expired lease
	// is taken over by the next claim (not only after the next rescan).
	if err := c.QueueConfigure(ctx, "q", map[string]any{"claim_rescan": "0 seconds"}); err != nil {
		t.Fatal(err)
	}
	// The trigger function is SECURITY DEFINER (the test's role): the verbs
	// may run as a role that has no right on the log.
	db.MustExec(t, fmt.Sprintf(`
		CREATE UNLOGGED TABLE %[1]s.fence_log (seq bigserial PRIMARY KEY, verb text NOT NULL, id bigint NOT NULL,
		                                       token uuid NOT NULL, prev uuid);
		CREATE FUNCTION %[1]s.fence_log() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
		SET search_path = pg_catalog, pg_temp AS $$
		BEGIN
			IF TG_OP = 'DELETE' THEN
				INSERT INTO %[1]s.fence_log (verb, id, token) VALUES ('complete', OLD.id, OLD.token);
				RETURN OLD;
			END IF;
			IF NEW.token IS NOT NULL AND NEW.token IS DISTINCT FROM OLD.token THEN
				INSERT INTO %[1]s.fence_log (verb, id, token, prev) VALUES ('claim', NEW.id, NEW.token, OLD.token);
			ELSIF NEW.token IS NULL AND OLD.token IS NOT NULL AND NEW.attempt = OLD.attempt - 1 THEN
				INSERT INTO %[1]s.fence_log (verb, id, token) VALUES ('release', NEW.id, OLD.token);
			ELSIF NEW.token IS NULL AND OLD.token IS NOT NULL THEN
				INSERT INTO %[1]s.fence_log (verb, id, token) VALUES ('fail', NEW.id, OLD.token);
			ELSIF NEW.token IS NOT NULL AND NEW.visible_at <> OLD.visible_at THEN
				INSERT INTO %[1]s.fence_log (verb, id, token) VALUES ('renew', NEW.id, OLD.token);
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fence_log AFTER UPDATE OR DELETE ON %[1]s.message
		FOR EACH ROW WHEN (pg_trigger_depth() = 0) EXECUTE FUNCTION %[1]s.fence_log();`, s))
	sendN(t, c, "q", messages)

	// What the claimers' calls said, per call.
	type call struct {
		verb      string
		token     pgsweep.Token
		requested []int64
		acted     []int64
	}
	var (
		mu        sync.Mutex
		calls     []call
		completed atomic.Int64
	)
	record := func(cl call) {
		mu.Lock()
		calls = append(calls, cl)
		mu.Unlock()
	}
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute) // liveness only
	defer cancel()
	errc := make(chan error, claimers)
	var wg sync.WaitGroup
	for i := range claimers {
		cc, err := pgsweep.NewClient(pgtest.Conn(t, db.URL), &pgsweep.ClientOptions{Schema: db.Schema})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 10))
			for completed.Load() < messages && runCtx.Err() == nil {
				ds, err := cc.Claim(runCtx, "q", owner, batch, lease)
				if err != nil {
					errc <- err
					return
				}
				if len(ds) == 0 {
					// time under test: an empty claim waits for leases to expire
					time.Sleep(20 * time.Millisecond)
					continue
				}
				tok, all := ds[0].Token, ids(ds)
				for _, d := range ds {
					if d.Token != tok {
						errc <- fmt.Errorf("one claim returned tokens %s and %s", tok, d.Token)
						return
					}
				}
				record(call{"claim", tok, all, all})
				stale := rng.Float64() < 0.15
				if stale { // time under test: past the lease, others (same owner) may claim these again
					time.Sleep(lease + 300*time.Millisecond + time.Duration(rng.IntN(300))*time.Millisecond)
				}
				if stale || rng.Float64() < 0.3 {
					got, err := cc.Renew(runCtx, "q", tok, all, lease)
					if err != nil {
						errc <- err
						return
					}
					record(call{"renew", tok, all, got})
				}
				var fail, release, done []int64
				for _, id := range all {
					switch r := rng.Float64(); {
					case r < 0.1:
						fail = append(fail, id)
					case r < 0.15:
						release = append(release, id)
					default:
						done = append(done, id)
					}
				}
				if len(fail) > 0 {
					res, err := cc.Fail(runCtx, "q", tok, fail, "try again", time.Millisecond)
					if err != nil {
						errc <- err
						return
					}
					var acted []int64
					for _, r := range res {
						acted = append(acted, r.ID)
					}
					record(call{"fail", tok, fail, acted})
				}
				if len(release) > 0 {
					got, err := cc.Release(runCtx, "q", tok, release)
					if err != nil {
						errc <- err
						return
					}
					record(call{"release", tok, release, got})
				}
				if len(done) > 0 {
					got, err := cc.Complete(runCtx, "q", tok, done)
					if err != nil {
						errc <- err
						return
					}
					record(call{"complete", tok, done, got})
					completed.Add(int64(len(got)))
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if runCtx.Err() != nil {
		t.Fatalf("not drained in time: %d of %d completed", completed.Load(), messages)
	}

	// Exactly once.
	if n := count(t, db, "message", "true"); n != 0 || completed.Load() != messages {
		t.Fatalf("%d completed, %d rows left; want %d and 0", completed.Load(), n, messages)
	}
	doneBy := map[int64]int{}
	for _, cl := range calls {
		if cl.verb == "complete" {
			for _, id := range cl.acted {
				doneBy[id]++
			}
		}
	}
	for id, n := range doneBy {
		if n != 1 {
			t.Fatalf("message %d completed %d times", id, n)
		}
	}
	if len(doneBy) != messages {
		t.Fatalf("%d messages completed, want %d", len(doneBy), messages)
	}

	// The database's log, in order.
	type event struct {
		verb  string
		id    int64
		token pgsweep.Token
		prev  *pgsweep.Token
	}
	rows, err := db.Pool.Query(ctx, "SELECT verb, id, token, prev FROM "+s+".fence_log ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	var events []event
	for rows.Next() {
		var e event
		if err := rows.Scan(&e.verb, &e.id, &e.token, &e.prev); err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	// What the calls said they did equals what the database did, per verb,
	// token and id.
	type key struct {
		verb  string
		token pgsweep.Token
		id    int64
	}
	said, did := map[key]int{}, map[key]int{}
	for _, cl := range calls {
		for _, id := range cl.acted {
			said[key{cl.verb, cl.token, id}]++
		}
	}
	for _, e := range events {
		did[key{e.verb, e.token, e.id}]++
	}
	for k, n := range said {
		if did[k] != n {
			t.Fatalf("%s with token %s on message %d: the call acted %d times, the database logged %d", k.verb, k.token, k.id, n, did[k])
		}
	}
	for k, n := range did {
		if said[k] != n {
			t.Fatalf("%s with token %s on message %d: the database logged %d, the calls acted %d times", k.verb, k.token, k.id, n, said[k])
		}
	}

	// Every act within its token's tenure; takeovers of live tokens counted.
	holder := map[int64]pgsweep.Token{}      // id -> token of the claim that holds it now
	claimedBy := map[int64][]pgsweep.Token{} // id -> every token that claimed it, in order
	takeovers := 0
	for _, e := range events {
		switch e.verb {
		case "claim":
			if cur, held := holder[e.id]; held {
				if e.prev == nil || *e.prev != cur {
					t.Fatalf("message %d claimed by %s over %v; the log says %s held it", e.id, e.token, e.prev, cur)
				}
				takeovers++ // its lease expired and another claim (same owner) took it
			}
			holder[e.id] = e.token
			claimedBy[e.id] = append(claimedBy[e.id], e.token)
		default:
			if cur, held := holder[e.id]; !held || cur != e.token {
				t.Fatalf("message %d: %s with token %s while %v held it", e.id, e.verb, e.token, cur)
			}
			if e.verb != "renew" {
				delete(holder, e.id)
			}
		}
	}

	// Every id a call did not act on had been claimed again by another
	// token: only stale tokens were refused.
	refused := map[string]int{}
	for _, cl := range calls {
		if cl.verb == "claim" {
			continue
		}
		for _, id := range cl.requested {
			if slices.Contains(cl.acted, id) {
				continue
			}
			ts := claimedBy[id]
			i := slices.Index(ts, cl.token)
			if i < 0 || i == len(ts)-1 {
				t.Fatalf("%s with token %s refused message %d, which no later claim took (claims %v): a live token was refused",
					cl.verb, cl.token, id, ts)
			}
			refused[cl.verb]++
		}
	}
	if takeovers == 0 || refused["renew"] == 0 || refused["complete"] == 0 || refused["fail"] == 0 {
		t.Fatalf("%d takeovers, stale calls refused %v: the test exercised too little", takeovers, refused)
	}
	t.Logf("%d messages, %d calls, %d logged events, %d takeovers after expiry by the same owner; ids refused to stale tokens: %v",
		messages, len(calls), len(events), takeovers, refused)
}
