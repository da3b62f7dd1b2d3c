package main

import (
	"context"
	"io"

	"github.com/pgsweep/pgsweep/internal/demo"
)

// runDemo is `pgsweep demo` (package internal/demo). It takes its database
// from --database-url only: unlike the other commands it never reads
// PGSWEEP_DATABASE_URL, so that it cannot land on the runner's database.
func runDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("demo")
	var o demo.Options
	o.RegisterFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return scratchErr(demo.Run(ctx, o, out))
}
