package pgtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
)

// The leadership tests (runner's integration tests, the Citus tier's) make
// maintenance runners contend for the parts and check, from the history,
// that no part ever had two holders at once; the takeover tests kill the
// session of a runner named victim in the middle of recovery and check how
// a runner named heir takes over.

// Contention is what a test of maintenance leadership (runners contending
// for the parts) needs to have happened before it proves anything: for each
// part, recovery and retention, at least Runs finished runs, by at least
// Owners owners, and at least Busy passes that found the part busy.
type Contention struct{ Runs, Owners, Busy int64 }

var contendedParts = []string{"recovery", "retention"}

// contention counts part's runs, owners and busy passes in the install of
// the quoted schema s.
func contention(t testing.TB, db pgsweep.DBTX, s, part string) Contention {
	t.Helper()
	return Contention{
		Runs:   queryInt(t, db, "SELECT pg_catalog.count(*) FROM "+s+".maintain_run WHERE part = $1 AND status = 'done'", part),
		Owners: queryInt(t, db, "SELECT pg_catalog.count(DISTINCT owner) FROM "+s+".maintain_run WHERE part = $1", part),
		Busy:   queryInt(t, db, "SELECT pg_catalog.count(*) FROM "+s+".maintain_pass WHERE parts ->> $1 = 'busy'", part),
	}
}

func (c Contention) reached(want Contention) bool {
	return c.Runs >= want.Runs && c.Owners >= want.Owners && c.Busy >= want.Busy
}

// Contended is a condition for Eventually: every part of the install of the
// quoted schema s has reached want.
func Contended(t testing.TB, db pgsweep.DBTX, s string, want Contention) func() error {
	return Until("enough contended runs", func() bool {
		for _, part := range contendedParts {
			if !contention(t, db, s, part).reached(want) {
				return false
			}
		}
		return true
	})
}

// CheckContended logs what each part saw and fails t unless it reached want.
func CheckContended(t testing.TB, db pgsweep.DBTX, s string, want Contention) {
	t.Helper()
	for _, part := range contendedParts {
		c := contention(t, db, s, part)
		t.Logf("%s: %d runs by %d owners, %d busy skips", part, c.Runs, c.Owners, c.Busy)
		if !c.reached(want) {
			t.Fatalf("%s: %d runs, %d owners, %d busy skips: not enough contention to prove anything", part, c.Runs, c.Owners, c.Busy)
		}
	}
}

// Overlaps counts the pairs of rows of one part in table (maintain_run, or
// the stand-ins' activity log) of the install of the quoted schema s whose
// times overlap: two holders of one part at once.
func Overlaps(t testing.TB, db pgsweep.DBTX, s, table string) int64 {
	t.Helper()
	return queryInt(t, db, fmt.Sprintf(`SELECT pg_catalog.count(*) FROM %[1]s.%[2]s a JOIN %[1]s.%[2]s b
	ON a.part = b.part AND a.id < b.id
	AND tstzrange(a.started_at, a.finished_at, '[)') && tstzrange(b.started_at, b.finished_at, '[)')`, s, table))
}

// RecoveryLease returns the fencing token and the expiry of owner's lease
// on recovery (maintain:recovery) in the install of the quoted schema s.
func RecoveryLease(t testing.TB, db pgsweep.DBTX, s, owner string) (token int64, expires time.Time) {
	t.Helper()
	if err := db.QueryRow(context.Background(), "SELECT token, expires_at FROM "+s+".lease WHERE name = 'maintain:recovery' AND owner = $1", owner).
		Scan(&token, &expires); err != nil {
		t.Fatal(err)
	}
	return token, expires
}

// Terminate ends the backend pid and returns the database's clock right
// after.
func Terminate(t testing.TB, db pgsweep.DBTX, pid int32) (killed time.Time) {
	t.Helper()
	var ok bool
	if err := db.QueryRow(context.Background(), "SELECT pg_terminate_backend($1::int), clock_timestamp()", pid).Scan(&ok, &killed); err != nil || !ok {
		t.Fatalf("terminate the victim's backend %d: %v %v", pid, ok, err)
	}
	return killed
}

// CheckTakeover fails t unless heir took recovery over from victim, whose
// session was killed at killed while it held the lease (victimToken, until
// expires), as the leases promise: heir's first recovery run started only
// once that lease had expired, with the next fencing token; heir found
// recovery busy at least once after the kill; victim's run is marked
// abandoned.
func CheckTakeover(t testing.TB, db pgsweep.DBTX, s string, victimToken int64, killed, expires time.Time) {
	t.Helper()
	var heirStart time.Time
	var heirToken int64
	if err := db.QueryRow(context.Background(), "SELECT started_at, token FROM "+s+
		".maintain_run WHERE owner = 'heir' AND part = 'recovery' ORDER BY id LIMIT 1").Scan(&heirStart, &heirToken); err != nil {
		t.Fatal(err)
	}
	if heirStart.Before(expires) {
		t.Fatalf("the heir started recovery at %v, before the victim's lease expired at %v", heirStart, expires)
	}
	if heirToken != victimToken+1 {
		t.Fatalf("heir token %d, want %d", heirToken, victimToken+1)
	}
	if n := queryInt(t, db, "SELECT pg_catalog.count(*) FROM "+s+".maintain_pass WHERE owner = 'heir' AND parts ->> 'recovery' = 'busy' AND started_at > $1", killed); n == 0 {
		t.Fatal("the heir never found recovery busy between the kill and the TTL: the test proved nothing")
	}
	if n := queryInt(t, db, "SELECT pg_catalog.count(*) FROM "+s+".maintain_run WHERE owner = 'victim' AND part = 'recovery' AND status = 'abandoned'"); n != 1 {
		t.Fatal("the victim's run was not marked abandoned")
	}
}

// queryInt runs a query that returns one integer, or ends the test.
func queryInt(t testing.TB, db pgsweep.DBTX, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
