package pgtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// SchemaState describes schema for before/after comparisons: "absent" when
// it does not exist; else its comment, the rows of each of its tables and
// its catalog (Signature), one fact a line.
func SchemaState(t testing.TB, conn *pgx.Conn, schema string) string {
	t.Helper()
	ctx := context.Background()
	var comment *string
	err := conn.QueryRow(ctx, "SELECT pg_catalog.obj_description(oid, 'pg_namespace') FROM pg_catalog.pg_namespace WHERE nspname = $1",
		schema).Scan(&comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return "absent"
	}
	if err != nil {
		t.Fatal(err)
	}
	c := "<none>"
	if comment != nil {
		c = *comment
	}
	lines := []string{"comment=" + c}
	rows, err := conn.Query(ctx, "SELECT relname::text FROM pg_catalog.pg_class WHERE relnamespace = $1::regnamespace AND relkind IN ('r', 'p') ORDER BY 1",
		pgx.Identifier{schema}.Sanitize())
	tables, err := collectStrings(rows, err)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("rows %s %d", table, n))
	}
	sig, err := Signature(ctx, conn, schema)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(append(lines, sig), "\n")
}
