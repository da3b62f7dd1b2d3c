package main

import (
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// The demo is a user's first contact: it must converge and pass its own
// verification on a small run.
func TestDemoConvergesAndVerifies(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	out, errOut, code := runCLI(t, "demo", "--database-url", url, "--schema", schema,
		"--messages", "600", "--cap-rows", "5000", "--timeout", "90s")
	if code != 0 || !strings.Contains(out, "all checks passed") || strings.Contains(out, "FAIL") {
		t.Fatalf("demo: exit %d\n%s\n%s", code, out, errOut)
	}
}

func TestDemoNeedsADatabase(t *testing.T) {
	t.Setenv("PGSWEEP_DATABASE_URL", "")
	_, errOut, code := runCLI(t, "demo")
	if code != 2 || !strings.Contains(errOut, "make demo") {
		t.Fatalf("exit %d, %q", code, errOut)
	}
}
