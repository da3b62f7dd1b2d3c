//go:build citus

package citustest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// The pgTAP files of the Citus tier: those that pass on a distributed
// install. The others (docs/operations.md, "Scaling out with Citus",
// lists each with its reason) are run and reported, not required: they are
// written for one server -- fixtures that write pgsweep's tables as a
// superuser and then call the verbs (which run as the owner: Citus cannot
// use one distributed transaction's rows under two roles), helper functions
// in pg_temp over distributed tables, a verb called per row of a query on a
// distributed table -- or they reach what does not work on Citus yet (an
// inbox send with a key; fail).
var pgtapCitus = []string{"lease.sql", "maintain_parts.sql", "settings_validation.sql"}

var pgtapOthers = []string{"backoff_jitter.sql", "bad_input.sql", "claim_cursor.sql", "claim_ids.sql", "claim_plan.sql",
	"claim_token.sql", "dead_letters.sql", "lanes.sql", "maintain_work.sql", "parked.sql", "queue_claim.sql",
	"queue_errors.sql", "queue_lease_default.sql", "queue_ops.sql", "queue_setup.sql", "release.sql",
	"retention_backlog.sql", "retention_register.sql", "retention_run.sql"}

// The pgTAP suite's lease, maintenance and settings files pass on the
// coordinator after citus_distribute(), run as the install's owner role in
// Citus's sequential mode (pgtap/run.sh's files use schema pgsweep: the
// package's shared install, Shared).
func TestCitusPgTAP(t *testing.T) {
	if _, err := exec.LookPath("pg_prove"); err != nil {
		t.Fatal("pg_prove not found (Debian: apt-get install libtap-parser-sourcehandler-pgtap-perl)")
	}
	// The shared install is schema pgsweep, distributed, its owner may log
	// in; every pgTAP file runs in a transaction it rolls back.
	in := Shared(t)
	if in.Schema != "pgsweep" {
		t.Fatalf("the pgTAP files name schema pgsweep; the shared install is %s", in.Schema)
	}
	c := in.Cluster
	if _, err := pgtest.Conn(t, c.URL).Exec(context.Background(), "CREATE EXTENSION IF NOT EXISTS pgtap"); err != nil {
		t.Fatalf("pgtap on the cluster: %v", err)
	}

	u, err := url.Parse(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	root, err := pgtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	prove := func(file string) (string, error) {
		cmd := exec.Command("pg_prove", "--ext", ".sql", filepath.Join(root, "sql", "tests", file))
		cmd.Env = append(os.Environ(), "PGHOST="+u.Hostname(), "PGPORT="+u.Port(), "PGDATABASE="+strings.TrimPrefix(u.Path, "/"),
			"PGUSER=pgsweep_owner", "PGSSLMODE=disable", "PGOPTIONS=-c citus.multi_shard_modify_mode=sequential")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, f := range pgtapCitus {
		out, err := prove(f)
		if err != nil || !strings.Contains(out, "Result: PASS") {
			t.Errorf("pgTAP %s on Citus: %v\n%s", f, err, out)
		}
	}
	crashing := len(in.CrashingUpdates(t)) > 0
	var report []string
	for _, f := range pgtapOthers {
		if crashing && callsFail(root, f) {
			report = append(report, fmt.Sprintf("%s: not run (calls fail, which crashes Citus 13.2.2 today)", f))
			continue
		}
		out, err := prove(f)
		first := ""
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "ERROR:") {
				first = strings.TrimSpace(line[strings.Index(line, "ERROR:"):])
				break
			}
		}
		if err == nil && strings.Contains(out, "Result: PASS") {
			report = append(report, f+": passes (add it to pgtapCitus)")
		} else {
			report = append(report, fmt.Sprintf("%s: fails: %s", f, first))
		}
	}
	t.Logf("the other pgTAP files on Citus:\n\t%s", strings.Join(report, "\n\t"))
}

func callsFail(root, file string) bool {
	b, err := os.ReadFile(filepath.Join(root, "sql", "tests", file))
	return err == nil && (strings.Contains(string(b), ".fail(") || strings.Contains(string(b), ".fail_details("))
}
