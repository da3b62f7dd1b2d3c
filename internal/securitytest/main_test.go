package pgsweep_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// TestMain runs the suite from the repository root: its tests read
// docs/*.md, migrations/ and the Go sources by paths relative to it.
func TestMain(m *testing.M) {
	root, err := pgtest.RepoRoot()
	if err == nil {
		err = os.Chdir(root)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "securitytest:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
