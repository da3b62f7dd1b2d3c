package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/shadowtest"
)

// DecoysEnv, set to 1, makes every test that asks for the test database
// run with the shadow suite's decoys (internal/shadowtest) in its public
// schema: functions, operators and types named like pg_catalog's, created
// by a hostile role (DecoyRole), that count every call. A test fails when
// the counter moved while it ran: some statement, pgsweep's or the test's
// own, resolved a name through its search_path. Concurrent tests share
// the counter, so a hit fails every test running at that moment; the
// server log's WARNINGs name the decoy and the caller.
const DecoysEnv = "PGSWEEP_TEST_DECOYS"

// DecoyRole is the hostile role of DecoysEnv: it owns the decoys in the
// test database's public schema and its own schema, and the counter.
const DecoyRole = "pgsweep_test_decoy"

var (
	decoyOnce sync.Once
	decoyVal  *shadowtest.Decoys
	decoyErr  error
	watched   sync.Map // testing.TB -> struct{}: the tests whose counter is checked
)

// watchDecoys installs the decoys once per process (when DecoysEnv is 1)
// and checks, when t ends, that none of them ran meanwhile.
func watchDecoys(t testing.TB, url string) {
	if os.Getenv(DecoysEnv) != "1" {
		return
	}
	if _, seen := watched.LoadOrStore(t, struct{}{}); seen {
		return
	}
	t.Helper()
	decoyOnce.Do(func() { decoyVal, decoyErr = installDecoys(url) })
	if decoyErr != nil {
		t.Fatalf("%s=1: %v", DecoysEnv, decoyErr)
	}
	before, err := decoyHits(url)
	if err != nil {
		t.Fatalf("%s=1: %v", DecoysEnv, err)
	}
	t.Cleanup(func() {
		watched.Delete(t)
		after, err := decoyHits(url)
		if err != nil {
			t.Errorf("%s=1: %v", DecoysEnv, err)
			return
		}
		if after != before {
			t.Errorf("%s=1: %d decoy call(s) while this test (or one running at the same time) ran: a statement "+
				"resolved a function, operator or type through its search_path; the server log's WARNINGs "+
				"(shadow decoy … called by …) name them", DecoysEnv, after-before)
		}
	})
}

// decoyConfig is a superuser connection to the test database whose own
// statements cannot reach a decoy.
func decoyConfig(url string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pgsweep.PinSearchPath(cfg)
	return cfg, nil
}

func decoyHits(url string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := decoyConfig(url)
	if err != nil {
		return 0, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	return decoyVal.Hits(ctx, conn)
}

// installDecoys creates the decoys in the test database unless another
// process did (test packages run in parallel on one database).
func installDecoys(url string) (*shadowtest.Decoys, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg, err := decoyConfig(url)
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	const lockKey = int64(0x7067737764656379) // "pgswdecy"
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_advisory_lock($1::pg_catalog.int8)", lockKey); err != nil {
		return nil, err
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_catalog.pg_advisory_unlock($1::pg_catalog.int8)", lockKey)
	}()
	opts := shadowtest.Options{Role: DecoyRole, Schemas: []string{"public", DecoyRole}}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regnamespace($1::pg_catalog.text) IS NOT NULL",
		pgx.Identifier{DecoyRole + "_audit"}.Sanitize()).Scan(&exists); err != nil {
		return nil, err
	}
	if exists {
		return &shadowtest.Decoys{Role: DecoyRole, Audit: DecoyRole + "_audit", Schemas: opts.Schemas}, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if opts.Names, err = shadowtest.Names(root); err != nil {
		return nil, err
	}
	d, err := shadowtest.Install(ctx, conn, opts)
	if err != nil {
		return nil, fmt.Errorf("install the decoys: %w", err)
	}
	return d, nil
}
