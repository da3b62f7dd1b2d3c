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
	// ownership, privileges and storage options of relations
	`SELECT format('relation-acl %s owner=%s acl=%s options=%s', c.relname, pg_get_userbyid(c.relowner),
	        (SELECT array_agg(a ORDER BY a::text) FROM unnest(c.relacl) a), c.reloptions)
	   FROM pg_class c WHERE c.relnamespace = $1::regnamespace`,
	// ownership, privileges and security of routines
	`SELECT format('function-acl %s(%s) owner=%s secdef=%s leakproof=%s strict=%s parallel=%s acl=%s', p.proname,
	        pg_get_function_identity_arguments(p.oid), pg_get_userbyid(p.proowner), p.prosecdef, p.proleakproof,
	        p.proisstrict, p.proparallel, (SELECT array_agg(a ORDER BY a::text) FROM unnest(p.proacl) a))
	   FROM pg_proc p WHERE p.pronamespace = $1::regnamespace`,
	// the schema itself
	`SELECT format('schema owner=%s acl=%s', pg_get_userbyid(n.nspowner),
	        (SELECT array_agg(a ORDER BY a::text) FROM unnest(n.nspacl) a))
	   FROM pg_namespace n WHERE n.oid = $1::regnamespace`,
	// column privileges
	`SELECT format('column-acl %s.%s %s', c.relname, a.attname, (SELECT array_agg(x ORDER BY x::text) FROM unnest(a.attacl) x))
	   FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
	  WHERE c.relnamespace = $1::regnamespace AND a.attacl IS NOT NULL`,
	// default privileges set for the schema
	`SELECT format('default-acl %s %s %s', pg_get_userbyid(d.defaclrole), d.defaclobjtype,
	        (SELECT array_agg(a ORDER BY a::text) FROM unnest(d.defaclacl) a))
	   FROM pg_default_acl d WHERE d.defaclnamespace = $1::regnamespace`,
}

// dataQueries describe the rows a migration writes (settings and the like),
// run only when their table exists; the cron job is read from pg_cron's
// table when pg_cron is installed in the database. The query's "FROM TABLE"
// is replaced by the table's qualified name.
var dataQueries = []struct{ table, query string }{
	{"setting", `SELECT format('setting %s kind=%s default=%s min=%s max=%s infinite=%s', name, kind, default_value,
	        min_value, max_value, infinite_ok) FROM TABLE`},
	{"maintain_state", `SELECT format('maintain_state %s', part) FROM TABLE`},
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
	for _, d := range dataQueries {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{schema, d.table}.Sanitize()).Scan(&exists); err != nil {
			return "", fmt.Errorf("signature of %s: %w", schema, err)
		}
		if !exists {
			continue
		}
		rows, err := conn.Query(ctx, strings.Replace(d.query, "FROM TABLE", "FROM "+pgx.Identifier{schema, d.table}.Sanitize(), 1))
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
