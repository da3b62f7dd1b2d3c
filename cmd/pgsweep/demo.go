package main

import (
	"context"
	"errors"
	"io"

	"github.com/pgsweep/pgsweep/cmd/pgsweep/internal/demo"
	"github.com/pgsweep/pgsweep/internal/scratch"
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

// scratchErr makes the usage errors of the bench and demo packages the CLI's
// (exit status 2), keeping their text.
func scratchErr(err error) error {
	if err != nil && errors.Is(err, scratch.ErrUsage) {
		return usageError{err}
	}
	return err
}

type usageError struct{ error }

// Unwrap returns the package's error and errUsage, so that errors.Is finds both.
func (u usageError) Unwrap() []error { return []error{u.error, errUsage} }
