package pgsweep_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// 50 contenders, each on its own connection, fight over one lease with the
// shortest TTL for several seconds. Holders keep it for random short times;
// some "crash" (never release, never come back under that identity). A
// trigger records every version of the lease row the database wrote, and the
// test proves from that log and from what each contender was told that two
// owners never held a live lease at once.
func TestLeaseContention(t *testing.T) {
	pgtest.SkipIfShort(t, "contention test takes several seconds")
	ctx, db, _ := pgtest.Start(t, 0)
	s := db.Q()
	_, err := db.Pool.Exec(ctx, fmt.Sprintf(`
		CREATE TABLE %[1]s.lease_log (seq bigserial PRIMARY KEY, owner text, token bigint,
		                              acquired_at timestamptz, expires_at timestamptz);
		-- SECURITY DEFINER: lease_acquire runs as the install's owner role,
		-- which has no right on this test table.
		CREATE FUNCTION %[1]s.lease_log_row() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
		BEGIN
			INSERT INTO %[1]s.lease_log (owner, token, acquired_at, expires_at)
			VALUES (NEW.owner, NEW.token, NEW.acquired_at, NEW.expires_at);
			RETURN NEW;
		END $$;
		CREATE TRIGGER lease_log AFTER INSERT OR UPDATE ON %[1]s.lease
			FOR EACH ROW EXECUTE FUNCTION %[1]s.lease_log_row();`, s))
	if err != nil {
		t.Fatal(err)
	}

	const (
		contenders = 50
		ttl        = time.Second
		runFor     = 6 * time.Second
		name       = "leader"
	)
	type grant struct {
		owner string
		token int64
	}
	var (
		mu      sync.Mutex
		grants  []grant
		crashes int
	)
	deadline := time.Now().Add(runFor)
	var wg sync.WaitGroup
	errc := make(chan error, contenders)
	for i := range contenders {
		conn := pgtest.Conn(t, db.URL)
		client, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: db.Schema})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			incarnation := 0
			owner := fmt.Sprintf("c%02d.%d", i, incarnation)
			var last int64
			for time.Now().Before(deadline) {
				token, ok, err := client.LeaseAcquire(ctx, name, owner, ttl)
				if err != nil {
					errc <- err
					return
				}
				if !ok {
					time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond) // time under test: retry while the lease lives
					continue
				}
				if token <= last {
					errc <- fmt.Errorf("%s got token %d after %d", owner, token, last)
					return
				}
				last = token
				mu.Lock()
				grants = append(grants, grant{owner, token})
				mu.Unlock()
				// Hold for less than the TTL, renewing once half-way (the
				// behaviour under test is time: TTLs, holds and expiries).
				time.Sleep(time.Duration(rng.IntN(250)) * time.Millisecond)
				if rng.IntN(2) == 0 {
					if ok, err := client.LeaseRenew(ctx, name, owner, ttl); err != nil || !ok {
						errc <- fmt.Errorf("%s could not renew its live lease: %v %v", owner, ok, err)
						return
					}
					time.Sleep(time.Duration(rng.IntN(250)) * time.Millisecond) // time under test: the renewed hold
				}
				if rng.IntN(4) == 0 {
					// Crash: never release; come back as a new process.
					mu.Lock()
					crashes++
					mu.Unlock()
					incarnation++
					owner = fmt.Sprintf("c%02d.%d", i, incarnation)
					last = 0
					continue
				}
				if ok, err := client.LeaseRelease(ctx, name, owner); err != nil || !ok {
					errc <- fmt.Errorf("%s could not release its live lease: %v %v", owner, ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}

	// Tenures from the database's own record.
	rows, err := db.Pool.Query(ctx, fmt.Sprintf(
		`SELECT seq, coalesce(owner, ''), token, acquired_at, expires_at FROM %s.lease_log ORDER BY seq`, s))
	if err != nil {
		t.Fatal(err)
	}
	type tenure struct {
		owner      string
		start, end time.Time
		released   bool
	}
	tenures := map[int64]*tenure{}
	var maxToken int64
	for rows.Next() {
		var seq, token int64
		var owner string
		var acq, exp time.Time
		if err := rows.Scan(&seq, &owner, &token, &acq, &exp); err != nil {
			t.Fatal(err)
		}
		tn := tenures[token]
		if tn == nil {
			if owner == "" {
				t.Fatalf("token %d first appears released", token)
			}
			tn = &tenure{owner: owner, start: acq}
			tenures[token] = tn
		}
		switch {
		case owner == "":
			tn.released = true
		case owner != tn.owner:
			t.Fatalf("token %d held by %s and by %s", token, tn.owner, owner)
		case !acq.Equal(tn.start):
			t.Fatalf("token %d: acquired_at moved from %v to %v", token, tn.start, acq)
		}
		tn.end = exp // row versions of one lease are written in lock order
		maxToken = max(maxToken, token)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	takeovers := 0
	for tok := int64(1); tok <= maxToken; tok++ {
		cur := tenures[tok]
		if cur == nil {
			t.Fatalf("token %d was never granted: tokens must be consecutive", tok)
		}
		if tok == 1 {
			continue
		}
		prev := tenures[tok-1]
		if cur.start.Before(prev.end) {
			t.Fatalf("token %d (%s) started at %v, before token %d (%s) ended at %v: two live owners",
				tok, cur.owner, cur.start, tok-1, prev.owner, prev.end)
		}
		if !prev.released {
			takeovers++
		}
	}

	// What the contenders were told matches the database's record.
	seen := map[int64]string{}
	for _, g := range grants {
		if o, dup := seen[g.token]; dup {
			t.Fatalf("token %d granted to %s and %s", g.token, o, g.owner)
		}
		seen[g.token] = g.owner
		if tn := tenures[g.token]; tn == nil || tn.owner != g.owner {
			t.Fatalf("contender %s was granted token %d, the database says %+v", g.owner, g.token, tn)
		}
	}
	if int64(len(grants)) != maxToken {
		t.Fatalf("%d grants reported, database issued %d tokens", len(grants), maxToken)
	}
	if crashes == 0 || takeovers == 0 {
		t.Fatalf("no crash/takeover happened (crashes %d, takeovers %d): the test proved nothing about expiry", crashes, takeovers)
	}
	t.Logf("%d tenures, %d crashes, %d takeovers after expiry", maxToken, crashes, takeovers)
}
