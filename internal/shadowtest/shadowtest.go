// Package shadowtest installs the decoys of the shadow suite
// (internal/securitytest/security_shadow_test.go, and every Go test under
// PGSWEEP_TEST_DECOYS=1, see internal/pgtest): the functions, operators and
// types a hostile role with CREATE on public can create, named like those
// of pg_catalog that pgsweep's SQL and Go use. Each decoy counts its call in
// a sequence (nextval survives the rollback of the statement that called
// it), records current_user in a table, and raises unless its caller is the
// hostile role itself: a decoy that ran as anyone else means a statement
// resolved a name through the caller's search_path.
package shadowtest

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// HandNames are pg_catalog functions pgsweep's statements call, or might
// call, without the pg_catalog. prefix the extraction looks for: the ones the
// issue names (pg_advisory_lock …), and the everyday ones of Go statements.
var HandNames = []string{
	"pg_advisory_lock", "pg_advisory_unlock", "pg_advisory_xact_lock", "pg_try_advisory_lock",
	"pg_try_advisory_xact_lock", "pg_advisory_unlock_all", "set_config", "current_setting", "now",
	"clock_timestamp", "statement_timestamp", "transaction_timestamp", "count", "sum", "max", "min",
	"avg", "array_agg", "string_agg", "bool_or", "bool_and", "jsonb_agg", "jsonb_object_agg",
	"to_regclass", "to_regprocedure", "to_regrole", "to_regnamespace", "has_schema_privilege",
	"has_table_privilege", "has_function_privilege", "pg_has_role", "current_database",
	"pg_backend_pid", "pg_terminate_backend", "pg_cancel_backend", "unnest", "generate_series",
	"octet_length", "length", "left", "right", "md5", "lower", "upper", "replace", "substr",
	"position", "strpos", "repeat", "rpad", "lpad", "format", "concat", "concat_ws", "nextval",
	"currval", "setval", "gen_random_uuid", "jsonb_build_object", "jsonb_build_array", "to_jsonb",
	"to_json", "jsonb_set", "jsonb_typeof", "jsonb_array_length", "jsonb_each", "jsonb_each_text",
	"jsonb_array_elements", "jsonb_array_elements_text", "jsonb_extract_path_text", "date_trunc",
	"date_part", "extract", "make_interval", "age", "to_char", "to_timestamp", "pg_sleep",
	"obj_description", "pg_get_expr", "format_type", "pg_table_is_visible", "pg_get_userbyid",
	"pg_notify", "pg_current_xact_id", "txid_current", "random", "setseed", "greatest", "least",
	"array_length", "cardinality", "array_position", "array_remove", "array_append", "array_cat",
	"abs", "round", "floor", "ceil", "mod", "power", "sqrt", "ln", "exp", "div", "trunc",
	"regexp_replace", "regexp_match", "split_part", "btrim", "trim", "pg_postmaster_start_time",
	"pg_partition_tree", "pg_partition_root", "pg_relation_size", "pg_total_relation_size",
	"pg_column_size", "quote_ident", "quote_literal", "quote_nullable", "pg_size_pretty",
}

// Operators are the operator names that get decoys: a twin of each
// pg_catalog binary operator of the name, and PairTypes overloads.
var Operators = []string{"=", "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", "||", "@>", "<@", "->", "->>", "#>", "#>>", "?", "~~", "!~~", "%"}

// PairTypes are the argument pairs each operator gets a decoy for, beside
// its twins: the ones pg_catalog has no exact operator for, which a decoy
// wins even behind pg_catalog on the search_path.
var PairTypes = [][2]string{
	{"oid", "integer"}, {"real", "integer"}, {"interval", "integer"}, {"integer", "oid"},
	{"text", "integer"}, {"timestamp with time zone", "integer"}, {"bigint", "numeric"},
	{"jsonb", "integer"}, {"name", "text"}, {"regclass", "integer"}, {"oid", "bigint"},
	{"interval", "double precision"}, {"interval", "numeric"}, {"double precision", "integer"},
	{"numeric", "integer"}, {"text", "unknown"}, {"regnamespace", "integer"}, {"regrole", "integer"},
	{"smallint", "bigint"}, {"integer", "numeric"}, {"timestamp with time zone", "double precision"},
	{"text", "name"}, {"character varying", "text"}, {"uuid", "text"}, {"jsonb", "text"},
}

// FunctionArgs are the argument lists every decoy function name gets, beside
// its twins: float8 and numeric win type resolution over an integer
// overload for an untyped parameter or a literal; text over most others.
var FunctionArgs = []string{
	"double precision", "numeric", "text", "integer", "bigint",
	"double precision, double precision", "numeric, numeric", "text, text", "bigint, double precision",
	"integer, integer", "text, integer", "double precision, text", "text, text, text",
	"text, text, double precision", "numeric, numeric, numeric",
}

// Types are the pg_catalog type names (not keywords: a keyword such as
// integer or interval is always pg_catalog's) that get a decoy domain: a
// cast to the bare name, with the decoy's schema before pg_catalog on the
// search_path, runs the domain's CHECK.
var Types = []string{
	"text", "int2", "int4", "int8", "float4", "float8", "jsonb", "json", "timestamptz", "timestamp",
	"regclass", "regnamespace", "regrole", "regproc", "regprocedure", "regtype", "name", "oid",
	"uuid", "bytea", "bool", "date", "varchar", "bpchar", "xid8", "tid",
}

// Decoys is an installation of decoys in one database.
type Decoys struct {
	Role    string   // the hostile role that owns them
	Audit   string   // its schema holding the counter (sequence hits) and the log (table hit)
	Schemas []string // the schemas holding decoy functions and operators
	// TypeSchemas hold the decoy types.
	TypeSchemas []string
	// Functions, Operators and Types count the decoys created.
	Functions, Operators, Types int
	// Skipped counts signatures PostgreSQL refused (a twin of a function
	// whose argument or result type PL/pgSQL cannot take, say).
	Skipped int
}

// Options of Install.
type Options struct {
	// Role is the hostile role: created NOLOGIN when missing, granted
	// CREATE on public and on the database.
	Role string
	// Schemas receive decoys; the role creates those missing (public
	// exists). The role's own schema is a good one: "$user" of a default
	// search_path, for a session of that role.
	Schemas []string
	// Names are the function names that get decoys (Names' result); only
	// those pg_catalog has are used.
	Names []string
	// TypeSchemas receive the decoy domains (Types); the role creates
	// those missing. They matter only where such a schema comes before
	// pg_catalog on the search_path; a schema of their own lets a test put
	// them there or not.
	TypeSchemas []string
}

// Install creates the decoys in conn's database, as opts.Role (SET ROLE:
// nothing but CREATE on public and on the database is needed), and returns
// what it made. conn must be a superuser's; its role and search_path are
// restored.
func Install(ctx context.Context, conn *pgx.Conn, opts Options) (*Decoys, error) {
	d := &Decoys{Role: opts.Role, Audit: opts.Role + "_audit", Schemas: opts.Schemas, TypeSchemas: opts.TypeSchemas}
	role := ident(opts.Role)
	audit := ident(d.Audit)
	setup := fmt.Sprintf(`
DO $r$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) %[3]s) THEN
    CREATE ROLE %[1]s NOLOGIN;
  END IF;
END $r$;
GRANT CREATE ON SCHEMA public TO %[1]s;
DO $g$ BEGIN EXECUTE pg_catalog.format('GRANT CREATE ON DATABASE %%I TO %%I', pg_catalog.current_database(), %[3]s); END $g$;
SET LOCAL search_path = pg_catalog, pg_temp;
SET LOCAL ROLE %[1]s;
CREATE SCHEMA %[2]s;
GRANT USAGE ON SCHEMA %[2]s TO PUBLIC;
CREATE SEQUENCE %[2]s.hits;
GRANT USAGE, SELECT, UPDATE ON SEQUENCE %[2]s.hits TO PUBLIC;
CREATE TABLE %[2]s.hit (what text NOT NULL, who name NOT NULL, at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp());
GRANT INSERT ON %[2]s.hit TO PUBLIC;
CREATE FUNCTION %[2]s.hit(p_what text) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$
BEGIN
    PERFORM pg_catalog.nextval('%[4]s.hits'::pg_catalog.regclass);
    INSERT INTO %[2]s.hit (what, who) VALUES (p_what, current_user);
    RAISE WARNING 'shadow decoy %% called by %%', p_what, current_user;
    IF current_user OPERATOR(pg_catalog.<>) %[3]s::pg_catalog.name THEN
        RAISE EXCEPTION 'shadow decoy %% ran as %%: a statement resolved a name through its search_path', p_what, current_user
            USING ERRCODE = 'P0001';
    END IF;
END $f$;
CREATE FUNCTION %[2]s.hit_check(p_what text) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$
BEGIN PERFORM %[2]s.hit(p_what); RETURN true; END $f$;
`, role, audit, lit(opts.Role), strings.ReplaceAll(audit, "'", "''"))
	for _, s := range append(append([]string{}, opts.Schemas...), opts.TypeSchemas...) {
		if s != "public" {
			setup += "CREATE SCHEMA IF NOT EXISTS " + ident(s) + ";\n"
		}
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, setup); err != nil {
		return nil, fmt.Errorf("decoys: set up %s: %w", d.Audit, err)
	}

	// try runs stmt in a savepoint, in one round trip when it succeeds; a
	// statement PostgreSQL refuses is skipped.
	try := func(stmt string) (bool, error) {
		if _, err := tx.Exec(ctx, "SAVEPOINT decoy; "+stmt+"; RELEASE SAVEPOINT decoy"); err != nil {
			if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT decoy"); rerr != nil {
				return false, fmt.Errorf("%w (after %v)", rerr, err)
			}
			d.Skipped++
			return false, nil
		}
		return true, nil
	}
	body := func(what, ret string) string {
		r := "RETURN NULL;"
		if ret == "void" || strings.HasPrefix(ret, "SETOF ") || strings.HasPrefix(ret, "TABLE(") {
			r = "RETURN;"
		}
		return fmt.Sprintf("LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $d$ BEGIN PERFORM %s.hit(%s); %s END $d$",
			audit, lit(what), r)
	}

	// Functions: a twin of every pg_catalog overload, and FunctionArgs.
	rows, err := tx.Query(ctx, `
SELECT p.proname::pg_catalog.text,
       coalesce((SELECT pg_catalog.string_agg(CASE WHEN p.provariadic OPERATOR(pg_catalog.<>) 0
                                                    AND a.n OPERATOR(pg_catalog.=) pg_catalog.array_length(p.proargtypes::pg_catalog.oid[], 1)
                                               THEN 'VARIADIC ' ELSE '' END
                                          OPERATOR(pg_catalog.||) pg_catalog.format_type(a.t, NULL), ', ' ORDER BY a.n)
                   FROM pg_catalog.unnest(p.proargtypes::pg_catalog.oid[]) WITH ORDINALITY a(t, n)), ''),
       CASE WHEN p.proretset THEN 'SETOF ' ELSE '' END OPERATOR(pg_catalog.||) pg_catalog.format_type(p.prorettype, NULL)
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
   AND p.proname OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.name[])
   AND p.prokind OPERATOR(pg_catalog.=) ANY ('{f,a,w}'::pg_catalog."char"[])
 ORDER BY 1, 2`, opts.Names)
	if err != nil {
		return nil, fmt.Errorf("decoys: list functions: %w", err)
	}
	type sig struct{ name, args, ret string }
	var sigs []sig
	retOf := map[string]string{}
	for rows.Next() {
		var s sig
		if err := rows.Scan(&s.name, &s.args, &s.ret); err != nil {
			return nil, err
		}
		sigs = append(sigs, s)
		if _, ok := retOf[s.name]; !ok && !strings.Contains(s.ret, "any") && s.ret != "record" && s.ret != "SETOF record" {
			retOf[s.name] = s.ret
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, s := range sigs {
		names[s.name] = true
	}
	for n := range names {
		ret, ok := retOf[n]
		if !ok {
			ret = "text"
		}
		for _, a := range FunctionArgs {
			sigs = append(sigs, sig{n, a, ret})
		}
	}
	for _, schema := range opts.Schemas {
		for _, s := range sigs {
			what := fmt.Sprintf("function %s.%s(%s)", schema, s.name, s.args)
			ok, err := try(fmt.Sprintf("CREATE FUNCTION %s.%s(%s) RETURNS %s %s", ident(schema), ident(s.name), s.args, s.ret, body(what, s.ret)))
			if err != nil {
				return nil, fmt.Errorf("decoys: %s: %w", what, err)
			}
			if ok {
				d.Functions++
			}
		}
	}

	// Operators: a twin of every pg_catalog binary operator of the names,
	// and PairTypes.
	rows, err = tx.Query(ctx, `
SELECT o.oprname::pg_catalog.text, pg_catalog.format_type(o.oprleft, NULL), pg_catalog.format_type(o.oprright, NULL),
       pg_catalog.format_type(o.oprresult, NULL)
  FROM pg_catalog.pg_operator o
 WHERE o.oprnamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
   AND o.oprkind OPERATOR(pg_catalog.=) 'b' AND o.oprname OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.name[])
 ORDER BY 1, 2, 3`, Operators)
	if err != nil {
		return nil, fmt.Errorf("decoys: list operators: %w", err)
	}
	type op struct{ name, left, right, ret string }
	var ops []op
	for rows.Next() {
		var o op
		if err := rows.Scan(&o.name, &o.left, &o.right, &o.ret); err != nil {
			return nil, err
		}
		ops = append(ops, o)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, name := range Operators {
		for _, p := range PairTypes {
			ops = append(ops, op{name, p[0], p[1], pairResult(name, p[0])})
		}
	}
	n := 0
	for _, schema := range opts.Schemas {
		for _, o := range ops {
			n++
			what := fmt.Sprintf("operator %s.%s(%s, %s)", schema, o.name, o.left, o.right)
			fn := fmt.Sprintf("%s.shadow_op_%d", ident(schema), n)
			ok, err := try(fmt.Sprintf("CREATE FUNCTION %s(%s, %s) RETURNS %s %s; CREATE OPERATOR %s.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = %s)",
				fn, o.left, o.right, o.ret, body(what, o.ret), ident(schema), o.name, o.left, o.right, fn))
			if err != nil {
				return nil, fmt.Errorf("decoys: %s: %w", what, err)
			}
			if ok {
				d.Operators++
			}
		}
	}

	// Types: a domain of each name, whose CHECK is a hit.
	{
		for _, schema := range opts.TypeSchemas {
			for _, t := range Types {
				what := fmt.Sprintf("type %s.%s", schema, t)
				ok, err := try(fmt.Sprintf("CREATE DOMAIN %s.%s AS pg_catalog.%s CHECK (%s.hit_check(%s))", ident(schema), ident(t), ident(t), audit, lit(what)))
				if err != nil {
					return nil, fmt.Errorf("decoys: %s: %w", what, err)
				}
				if ok {
					d.Types++
				}
			}
		}
	}
	if _, err := tx.Exec(ctx, "RESET ROLE"); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("decoys: commit: %w", err)
	}
	return d, nil
}

// pairResult is the result type of a PairTypes decoy of operator name:
// what the real operator of the name would give, so that the statement
// around it still parses and runs the decoy.
func pairResult(name, left string) string {
	switch name {
	case "=", "<>", "<", "<=", ">", ">=", "@>", "<@", "?", "~~", "!~~":
		return "boolean"
	case "->", "#>":
		return "jsonb"
	case "->>", "#>>", "||":
		return "text"
	}
	if left == "unknown" {
		return "text"
	}
	return left
}

// Hits returns the decoys' counter: how many times any decoy ran (the
// calls that raised included).
func (d *Decoys) Hits(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int64, error) {
	var v int64
	var called bool
	if err := db.QueryRow(ctx, "SELECT last_value, is_called FROM "+ident(d.Audit)+".hits").Scan(&v, &called); err != nil {
		return 0, fmt.Errorf("decoys: read the counter: %w", err)
	}
	if !called {
		return 0, nil
	}
	return v, nil
}

// Log returns the recorded calls that were not rolled back (the hostile
// role's own, or one inside a statement that caught the error), oldest first.
func (d *Decoys) Log(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]string, error) {
	rows, err := db.Query(ctx, "SELECT what OPERATOR(pg_catalog.||) ' as ' OPERATOR(pg_catalog.||) who::pg_catalog.text FROM "+ident(d.Audit)+".hit ORDER BY at")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Names returns the function names pgsweep uses, for Options.Names: every
// pg_catalog.NAME( of sql/functions/*.sql and migrations/*.sql under root,
// every NAME( inside a string literal of the non-test Go files of the
// packages that send SQL (Install keeps those pg_catalog has), and
// HandNames.
func Names(root string) ([]string, error) {
	set := map[string]bool{}
	for _, n := range HandNames {
		set[n] = true
	}
	qualified := regexp.MustCompile(`pg_catalog\.(\w+)\s*\(`)
	call := regexp.MustCompile(`(?i)\b([a-z_][a-z0-9_]*)\s*\(`)
	var sqlFiles []string
	for _, g := range []string{"sql/functions/*.sql", "migrations/*.sql"} {
		m, err := filepath.Glob(filepath.Join(root, g))
		if err != nil {
			return nil, err
		}
		sqlFiles = append(sqlFiles, m...)
	}
	if len(sqlFiles) == 0 {
		return nil, fmt.Errorf("decoys: no SQL files under %s", root)
	}
	for _, f := range sqlFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range qualified.FindAllStringSubmatch(string(b), -1) {
			set[strings.ToLower(m[1])] = true
		}
	}
	var goFiles []string
	for _, dir := range []string{".", "runner", "relay", "relay/nats", "relay/amqp", "cmd/pgsweep", "internal/bench", "internal/scratch", "cmd/pgsweep/internal/demo", "internal/pgtest"} {
		m, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			return nil, err
		}
		for _, f := range m {
			if !strings.HasSuffix(f, "_test.go") {
				goFiles = append(goFiles, f)
			}
		}
	}
	fset := token.NewFileSet()
	for _, f := range goFiles {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			return nil, err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if bl, ok := n.(*ast.BasicLit); ok && bl.Kind == token.STRING {
				s, err := strconv.Unquote(bl.Value)
				if err == nil {
					for _, m := range call.FindAllStringSubmatch(s, -1) {
						set[strings.ToLower(m[1])] = true
					}
				}
			}
			return true
		})
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

func ident(s string) string { return pgx.Identifier{s}.Sanitize() }

func lit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
