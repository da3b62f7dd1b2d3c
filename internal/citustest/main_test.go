//go:build citus

package citustest

import (
	"fmt"
	"os"
	"testing"
)

// TestMain uninstalls the shared install (Shared) after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := CloseShared(); err != nil {
		fmt.Fprintf(os.Stderr, "citustest: uninstall the shared install: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
