package main

import (
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// The demo's own run is tested in internal/demo; here its CLI side.

// Without --database-url the demo stops with a usage error that points to
// `make demo`, even when PGSWEEP_DATABASE_URL names a working database: the
// demo never reads it.
func TestDemoNeedsADatabase(t *testing.T) {
	for _, env := range []string{"", pgtest.URL(t)} {
		t.Setenv("PGSWEEP_DATABASE_URL", env)
		_, errOut, code := runCLI(t, "demo")
		if code != 2 || !strings.Contains(errOut, "make demo") || !strings.Contains(errOut, "does not read $PGSWEEP_DATABASE_URL") {
			t.Fatalf("PGSWEEP_DATABASE_URL=%q: exit %d, %q", env, code, errOut)
		}
	}
}
