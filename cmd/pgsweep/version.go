package main

import (
	"context"
	"fmt"
	"io"

	"github.com/pgsweep/pgsweep"
)

// runVersion is `pgsweep version`: the binary's release version and schema
// version and, when a database is given (--database-url or
// PGSWEEP_DATABASE_URL), the version installed in --schema and how it
// compares. It changes nothing and exits 0 whatever it finds (migrate
// --check is the command whose exit status says it).
func runVersion(ctx context.Context, args []string, out io.Writer) error {
	fs, db := newDBFlagSet("version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := db.validate(); err != nil {
		return err
	}
	fmt.Fprintf(out, "pgsweep %s (schema version %d)\n", pgsweep.Version, pgsweep.LatestVersion())
	if db.connString() == "" {
		return nil
	}
	conn, err := db.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	v, err := pgsweep.DatabaseVersion(ctx, conn, db.schema)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "database %s, schema %s: %s\n", describeTarget(conn.Config()), db.schema, describeVersion(v))
	return nil
}

// describeVersion says where an install stands against this binary.
func describeVersion(v pgsweep.InstalledVersion) string {
	switch v.Status() {
	case pgsweep.Current:
		return fmt.Sprintf("%s, current", v.Version())
	case pgsweep.Behind:
		return fmt.Sprintf("%s, behind this binary by %d migration(s) (pgsweep migrate upgrades it to %s)", v.Version(), v.Pending(), pgsweep.Version)
	case pgsweep.Ahead:
		return fmt.Sprintf("%s, ahead: newer than this binary (%s); upgrade the pgsweep binary", v.Version(), pgsweep.Version)
	default:
		return fmt.Sprintf("not installed (pgsweep migrate installs %s)", pgsweep.Version)
	}
}
