package pgtest

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// signatureQueries describe everything a migration creates in a schema, one
// sorted line per object, so that two installs can be compared as text.
var signatureQueries = []string{
	// columns
	`SELECT format('column %s.%s %s notnull=%s default=%s', c.relname, a.attname,
	        format_type(a.atttypid, a.atttypmod), a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), ''))
	   FROM pg_attribute a
	   JOIN pg_class c ON c.oid = a.attrelid
	   LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	  WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0 AND NOT a.attisdropped`,
	// relations by kind
	`SELECT format('relation %s kind=%s', relname, relkind) FROM pg_class WHERE relnamespace = $1::regnamespace`,
	// constraints
	`SELECT format('constraint %s %s', conname, pg_get_constraintdef(oid)) FROM pg_constraint WHERE connamespace = $1::regnamespace`,
	// indexes
	`SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
	  WHERE c.relnamespace = $1::regnamespace`,
	// functions and procedures
	`SELECT format('function %s(%s) returns %s kind=%s volatility=%s config=%s body=%s', p.proname,
	        pg_get_function_identity_arguments(p.oid), coalesce(pg_get_function_result(p.oid), ''),
	        p.prokind, p.provolatile, p.proconfig, md5(replace(p.prosrc, $1, 'SCHEMA')))
	   FROM pg_proc p WHERE p.pronamespace = $1::regnamespace`,
	// views
	`SELECT format('view %s %s', c.relname, md5(replace(pg_get_viewdef(c.oid), $1, 'SCHEMA'))) FROM pg_class c
	  WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('v', 'm')`,
	// triggers
	`SELECT 'trigger ' || pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
	  WHERE c.relnamespace = $1::regnamespace AND NOT t.tgisinternal`,
	// types
	`SELECT format('type %s %s', typname, typtype) FROM pg_type WHERE typnamespace = $1::regnamespace AND typtype IN ('e', 'c', 'd')`,
}

// Signature describes every object in schema as sorted text, with the schema
// name replaced by SCHEMA so that installs into different schemas compare equal.
func Signature(ctx context.Context, conn *pgx.Conn, schema string) (string, error) {
	var lines []string
	for _, q := range signatureQueries {
		rows, err := conn.Query(ctx, q, schema)
		if err != nil {
			return "", fmt.Errorf("signature of %s: %w", schema, err)
		}
		ls, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return "", fmt.Errorf("signature of %s: %w", schema, err)
		}
		lines = append(lines, ls...)
	}
	out := strings.Join(sortStrings(lines), "\n")
	return strings.ReplaceAll(out, schema, "SCHEMA"), nil
}

func sortStrings(s []string) []string {
	slices.Sort(s)
	return s
}
