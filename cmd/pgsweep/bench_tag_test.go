package main

import (
	"os"
	"testing"
)

// needBench skips a test of `pgsweep bench` in a binary built without
// -tags bench (the production build), and fails it in CI: make test runs
// this package's tests with the tag.
func needBench(t *testing.T) {
	t.Helper()
	if _, ok := commands["bench"]; ok {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("pgsweep bench is not built in: CI runs cmd/pgsweep's tests with -tags bench")
	}
	t.Skip("pgsweep bench is built only with -tags bench (make test passes it)")
}
