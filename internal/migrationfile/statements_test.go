package migrationfile

import (
	"reflect"
	"testing"
)

func texts(t *testing.T, sql string) []string {
	t.Helper()
	sts, err := Split(sql)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range sts {
		out = append(out, s.Text)
	}
	return out
}

// Semicolons inside comments, strings, identifiers and dollar quotes do not
// end a statement; the comments before a statement are not part of it.
func TestSplitQuoting(t *testing.T) {
	sql := `-- header; not a statement
/* block; /* nested; */ still comment; */
CREATE OR REPLACE FUNCTION f(p int) RETURNS text LANGUAGE plpgsql AS $fn$
BEGIN
    -- a comment; inside the body
    RETURN 'a;b' || E'c\';d' || "x;y" || $$ inner; $q$ not the end $$;
END
$fn$;

SELECT $1, a$b, 'it''s; fine';
CREATE VIEW v AS SELECT 1 AS ";"`
	want := []string{
		"CREATE OR REPLACE FUNCTION f(p int) RETURNS text LANGUAGE plpgsql AS $fn$\nBEGIN\n    -- a comment; inside the body\n    RETURN 'a;b' || E'c\\';d' || \"x;y\" || $$ inner; $q$ not the end $$;\nEND\n$fn$;",
		"SELECT $1, a$b, 'it''s; fine';",
		`CREATE VIEW v AS SELECT 1 AS ";"`,
	}
	if got := texts(t, sql); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestSplitUnterminated(t *testing.T) {
	for _, sql := range []string{"SELECT 'x;", "SELECT $$ x;", "/* x; ", `SELECT "x;`, "{{ .schema "} {
		if _, err := Split(sql); err == nil {
			t.Errorf("Split(%q): no error", sql)
		}
	}
}

// A tern action between statements is a statement of its own; one inside a
// statement is part of its text.
func TestSplitTemplates(t *testing.T) {
	sts, err := Split("{{ $s := .schema | default \"pgsweep\" -}}\n-- doc\nCREATE FUNCTION {{ $s }}.f() RETURNS int LANGUAGE sql AS 'SELECT 1';\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 2 || !sts[0].Template || sts[1].Template || sts[1].Key != "function f()" {
		t.Fatalf("got %+v", sts)
	}
}

// A routine is identified by its argument types, as PostgreSQL does:
// names, defaults and a function's OUT arguments left out, aliases folded.
func TestStatementKeys(t *testing.T) {
	cases := map[string]string{
		"CREATE OR REPLACE FUNCTION claim(p_queue text, p_batch int DEFAULT 10, p_now timestamptz = NULL) RETURNS int AS $$ SELECT 1 $$ LANGUAGE sql;": "function claim(text, integer, timestamp with time zone)",
		"create function Pgsweep.Stats(IN p_queue text, OUT o_n bigint, OUT o_at timestamp with time zone) AS $$ $$ LANGUAGE sql;":                     "function stats(text)",
		"CREATE PROCEDURE run(p_name text, INOUT p_done bool) AS $$ $$ LANGUAGE plpgsql;":                                                              "procedure run(text, boolean)",
		"CREATE OR REPLACE FUNCTION f(numeric(10, 2), double precision, VARIADIC p_ids int8[]) RETURNS int AS 'SELECT 1' LANGUAGE sql;":                "function f(numeric(10,2), double precision, bigint[])",
		"CREATE OR REPLACE VIEW {{ .schema }}.queue_stats AS SELECT 1;":                                                                                "view queue_stats",
		"CREATE TABLE t (a int);": "",
	}
	for sql, want := range cases {
		sts, err := Split(sql)
		if err != nil {
			t.Fatal(err)
		}
		if len(sts) != 1 || sts[0].Key != want {
			t.Errorf("%s\n  key %q, want %q", sql, sts[0].Key, want)
		}
	}
}

func TestStatementDrops(t *testing.T) {
	cases := map[string][]string{
		"DROP FUNCTION IF EXISTS claim(text, int), claim(p_q text) CASCADE;": {"function claim(text, integer)", "function claim(text)"},
		"DROP FUNCTION _setting_rows;":                                       {"function _setting_rows(*)"},
		"drop view if exists leases, settings;":                              {"view leases", "view settings"},
		"DROP PROCEDURE run(text, boolean);":                                 {"procedure run(text, boolean)"},
		"DROP TABLE x;":                                                      nil,
	}
	for sql, want := range cases {
		sts, err := Split(sql)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(sts[0].Drops, want) {
			t.Errorf("%s\n  drops %q, want %q", sql, sts[0].Drops, want)
		}
	}
}
