package pgsweep_test

// The security model (docs/security.md, DESIGN "Roles and privileges"), tried
// as a hostile database user would: login roles granted each pgsweep role,
// a role with no grant at all, and a hostile role that owns tables,
// triggers, operators and functions of its own while a superuser runs
// maintenance. security_cron_test.go does the same through a real pg_cron job.
//
// Every test makes its own install (pgtest.New) and its own login roles,
// named sec_<label>_<random>, dropped when the test ends (pgtest drops the
// install's four roles).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// secDB is a test's install plus the login roles it made. SQL given to its
// methods may name the schema as @S, its roles as @S_owner, @S_admin,
// @S_worker, @S_monitor and a login role made by login(label) as @label
// (all quoted identifiers); @@S is the schema name as a string literal.
type secDB struct {
	t     *testing.T
	db    *pgtest.DB
	tag   string
	names map[string]string
	roles map[string]string // label -> role name
}

func secRandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newSecDB(t *testing.T) *secDB {
	t.Helper()
	db := pgtest.New(t, 4)
	sd := &secDB{t: t, db: db, tag: secRandHex(3), names: map[string]string{}, roles: map[string]string{}}
	sd.names["@S"] = db.Q()
	sd.names["@@S"] = "'" + db.Schema + "'"
	sd.names["@@S_owner"] = db.Schema + "_owner" // inside a literal
	for _, k := range []string{"owner", "admin", "worker", "monitor"} {
		sd.names["@S_"+k] = pgx.Identifier{db.Schema + "_" + k}.Sanitize()
	}
	// Maintenance without waiting: retention is due at every pass and never pauses.
	sd.exec(`SELECT @S.setting_set('retention_check_interval', '0'); SELECT @S.setting_set('retention_duty_cycle', '100')`)
	return sd
}

// sql expands the @ names of q.
func (sd *secDB) sql(q string) string {
	keys := make([]string, 0, len(sd.names))
	for k := range sd.names {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	var pairs []string
	for _, k := range keys {
		pairs = append(pairs, k, sd.names[k])
	}
	return strings.NewReplacer(pairs...).Replace(q)
}

// exec runs q as the superuser the tests connect as.
func (sd *secDB) exec(q string, args ...any) {
	sd.t.Helper()
	if _, err := sd.db.Pool.Exec(context.Background(), sd.sql(q), args...); err != nil {
		sd.t.Fatalf("%s: %v", sd.sql(q), err)
	}
}

// value runs q as the superuser and scans its one value.
func secValue[T any](sd *secDB, q string, args ...any) T {
	sd.t.Helper()
	var v T
	if err := sd.db.Pool.QueryRow(context.Background(), sd.sql(q), args...).Scan(&v); err != nil {
		sd.t.Fatalf("%s: %v", sd.sql(q), err)
	}
	return v
}

// login creates a LOGIN role for label, granted the pgsweep roles named by
// kind ("admin", "worker", "monitor") and any other role by name; it is
// dropped (with everything it owns) when the test ends.
func (sd *secDB) login(label string, grants ...string) string {
	sd.t.Helper()
	role := "sec_" + label + "_" + sd.tag
	id := pgx.Identifier{role}.Sanitize()
	sd.exec("CREATE ROLE " + id + " LOGIN PASSWORD 'sec-" + sd.tag + "'")
	sd.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := sd.db.Pool.Exec(ctx, "DROP OWNED BY "+id+"; DROP ROLE "+id); err != nil {
			sd.t.Errorf("drop role %s: %v", role, err)
		}
	})
	sd.roles[label] = role
	sd.names["@"+label] = id
	for _, g := range grants {
		switch g {
		case "admin", "worker", "monitor":
			sd.exec("GRANT @S_" + g + " TO " + id)
		default:
			sd.exec("GRANT " + pgx.Identifier{g}.Sanitize() + " TO " + id)
		}
	}
	return role
}

// urlAs is the test database's URL with the login role of label as user.
func (sd *secDB) urlAs(label string) string {
	sd.t.Helper()
	u, err := url.Parse(sd.db.URL)
	if err != nil {
		sd.t.Fatal(err)
	}
	u.User = url.UserPassword(sd.roles[label], "sec-"+sd.tag)
	return u.String()
}

// connAs connects as the login role of label.
func (sd *secDB) connAs(label string) *pgx.Conn {
	sd.t.Helper()
	return pgtest.Conn(sd.t, sd.urlAs(label))
}

// sqlstate is err's SQLSTATE, "" for nil, "?" and the error for anything else.
func sqlstate(err error) string {
	if err == nil {
		return ""
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return "?" + err.Error()
}

// try runs q on conn (rows are read to the end) and returns its error.
func (sd *secDB) try(conn *pgx.Conn, q string, args ...any) error {
	rows, err := conn.Query(context.Background(), sd.sql(q), args...)
	if err != nil {
		return err
	}
	for rows.Next() {
	}
	rows.Close()
	return rows.Err()
}

// expect runs q on conn and fails unless it ends with SQLSTATE code ("" for success).
func (sd *secDB) expect(conn *pgx.Conn, who, code, q string, args ...any) {
	sd.t.Helper()
	err := sd.try(conn, q, args...)
	if got := sqlstate(err); got != code {
		want := "success"
		if code != "" {
			want = "SQLSTATE " + code
		}
		sd.t.Errorf("%s: %s: want %s, got %v", who, sd.sql(q), want, err)
	}
}

// tables lists the schema's tables, views and sequences (quoted, qualified).
func (sd *secDB) relations(kinds string) []string {
	sd.t.Helper()
	rows, err := sd.db.Pool.Query(context.Background(), `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = ANY ($2) ORDER BY 1`,
		sd.db.Schema, strings.Split(kinds, ""))
	if err != nil {
		sd.t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		sd.t.Fatal(err)
	}
	return names
}

// TestSecurityRoleMatrix: a login role granted S_worker, S_monitor,
// S_admin or nothing can do exactly its job; everything else is 42501.
func TestSecurityRoleMatrix(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	ctx := context.Background()
	sd.exec(`SELECT @S.queue_create('jobs'); SELECT @S.send('jobs', '{"card": "4111-secret"}')`)
	sd.login("worker", "worker")
	sd.login("monitor", "monitor")
	sd.login("admin", "admin")
	sd.login("nobody")
	worker, monitor, admin, nobody := sd.connAs("worker"), sd.connAs("monitor"), sd.connAs("admin"), sd.connAs("nobody")
	tables := sd.relations("rp")
	if len(tables) < 10 {
		t.Fatalf("expected pgsweep's tables, got %v", tables)
	}

	// worker: the verbs, with the claim's token; no table, no admin verb, no p_now overload.
	sd.expect(worker, "worker", "", `SELECT @S.send('jobs', '{"n": 2}')`)
	var id int64
	var token string
	if err := worker.QueryRow(ctx, sd.sql(`SELECT id, token::text FROM @S.claim('jobs', 'w1', 1, '30 seconds')`)).Scan(&id, &token); err != nil {
		t.Fatalf("worker claims: %v", err)
	}
	var stale int
	if err := worker.QueryRow(ctx, sd.sql(`SELECT count(*) FROM @S.complete('jobs', gen_random_uuid(), ARRAY[$1::bigint])`), id).Scan(&stale); err != nil || stale != 0 {
		t.Errorf("worker completes with another token: %d rows, %v (want 0, nil)", stale, err)
	}
	sd.expect(worker, "worker", "", `SELECT @S.renew('jobs', $1::uuid, ARRAY[$2::bigint], '30 seconds')`, token, id)
	var done []int64
	if err := worker.QueryRow(ctx, sd.sql(`SELECT array_agg(c) FROM @S.complete('jobs', $1::uuid, ARRAY[$2::bigint]) c`), token, id).Scan(&done); err != nil || !slices.Equal(done, []int64{id}) {
		t.Errorf("worker completes with its token: %v, %v", done, err)
	}
	sd.expect(worker, "worker", "", `SELECT @S.lease_acquire('leader', 'w1', '10 seconds')`)
	sd.expect(worker, "worker", "", `SELECT @S.lease_release('leader', 'w1')`)
	for _, tbl := range tables {
		sd.expect(worker, "worker", "42501", "SELECT * FROM "+tbl+" LIMIT 1")
	}
	sd.expect(worker, "worker", "42501", `UPDATE @S.message SET owner = 'w1', token = gen_random_uuid()`)
	sd.expect(worker, "worker", "42501", `DELETE FROM @S.message`)
	sd.expect(worker, "worker", "42501", `INSERT INTO @S.message_processed SELECT * FROM @S.message_processed`)
	sd.expect(worker, "worker", "42501", `SELECT * FROM @S.claim('jobs', 'w1', 1, '30 seconds', now() + interval '1 day')`)
	sd.expect(worker, "worker", "42501", `SELECT @S.complete('jobs', gen_random_uuid(), ARRAY[1::bigint], now())`)
	sd.expect(worker, "worker", "42501", `SELECT @S.lease_acquire('leader', 'w1', '10 seconds', now() + interval '1 day')`)
	sd.expect(worker, "worker", "42501", `SELECT @S.queue_create('evil')`)
	sd.expect(worker, "worker", "42501", `SELECT @S.setting_set('dead_letter_retention', '1 second')`)
	sd.expect(worker, "worker", "42501", `CREATE TABLE public.sec_mine (at timestamptz)`) // PG15: public is not writable either
	sd.expect(worker, "worker", "42501", `SELECT @S.retention_register('steal', '@S.message'::regclass, 'created_at', '0 seconds')`)
	sd.expect(worker, "worker", "42501", `SELECT @S.retention_register_proved('@S.message'::regclass, 'steal', '@S.message'::regclass, 'created_at', '0 seconds', NULL, NULL, 1000, 'exclusive', '1 minute')`)
	sd.expect(worker, "worker", "42501", `SELECT @S._retention_policy_put('steal', '@S.message'::regclass, 'created_at', '0 seconds', NULL, NULL, 1000, 'exclusive', '1 minute', current_user::regrole, false)`)
	sd.expect(worker, "worker", "42501", `CALL @S.maintain()`)
	sd.expect(worker, "worker", "42501", `SELECT * FROM @S.queue_stats`)
	sd.expect(worker, "worker", "42501", `CREATE FUNCTION @S.evil() RETURNS int LANGUAGE sql AS 'SELECT 1'`)

	// monitor: counts, never payloads.
	var pending int64
	if err := monitor.QueryRow(ctx, sd.sql(`SELECT pending FROM @S.queue_stats WHERE queue = 'jobs'`)).Scan(&pending); err != nil || pending != 1 {
		t.Errorf("monitor reads queue_stats: pending %d, %v (want 1)", pending, err)
	}
	for _, v := range []string{"leases", "retention_policies", "retention_passes", "maintenance_passes", "maintenance_runs", "settings"} {
		sd.expect(monitor, "monitor", "", "SELECT * FROM @S."+v)
	}
	for _, tbl := range tables {
		sd.expect(monitor, "monitor", "42501", "SELECT * FROM "+tbl+" LIMIT 1")
	}
	sd.expect(monitor, "monitor", "42501", `SELECT * FROM @S.claim('jobs', 'm', 1, '30 seconds')`)
	sd.expect(monitor, "monitor", "42501", `SELECT @S.send('jobs', '{}')`)
	sd.expect(monitor, "monitor", "42501", `SELECT @S.queue_create('evil')`)

	// admin: queues, settings, its own retention policies, maintenance; no table, no verb, no payload.
	sd.expect(admin, "admin", "", `SELECT @S.queue_create('orders')`)
	sd.expect(admin, "admin", "", `SELECT @S.setting_set('history_max_rows', '5000')`)
	sd.expect(admin, "admin", "", `SELECT * FROM @S.queue_stats`)
	sd.expect(admin, "admin", "", `CALL @S.maintain('sec-admin', '10 seconds')`)
	if e := secValue[string](sd, `SELECT coalesce(string_agg(coalesce(error, '-'), '; '), 'no pass') FROM @S.maintenance_passes WHERE owner = 'sec-admin'`); e != "-" {
		t.Errorf("admin's maintenance pass: error %q (want one pass without error)", e)
	}
	sd.expect(admin, "admin", "", `SELECT * FROM @S.queue_recover('orders', 10)`)
	sd.expect(admin, "admin", "", `SELECT @S.retention_due()`)
	for _, tbl := range tables {
		sd.expect(admin, "admin", "42501", "SELECT * FROM "+tbl+" LIMIT 1")
		sd.expect(admin, "admin", "42501", "DELETE FROM "+tbl)
	}
	sd.expect(admin, "admin", "42501", `SELECT * FROM @S.claim('jobs', 'a', 1, '30 seconds')`)
	sd.expect(admin, "admin", "42501", `SELECT @S.send('jobs', '{}')`)
	sd.expect(admin, "admin", "42501", `SELECT * FROM @S.claim('jobs', 'a', 1, '30 seconds', now())`)
	sd.expect(admin, "admin", "42501", `CALL @S.retention_run('x', NULL, '1 second', now() + interval '1 year', NULL)`)

	// nobody (and PUBLIC): not even the schema.
	sd.expect(nobody, "no grant", "42501", `SELECT @S.version()`)
	sd.expect(nobody, "no grant", "42501", `SELECT * FROM @S.queue_stats`)
	sd.expect(nobody, "no grant", "42501", `SELECT * FROM @S.claim('jobs', 'x', 1, '30 seconds')`)
	sd.expect(nobody, "no grant", "42501", `SELECT @S.send('jobs', '{}')`)
	if n := secValue[int64](sd, `SELECT count(*) FROM pg_namespace n, aclexplode(coalesce(n.nspacl, acldefault('n', n.nspowner))) a
		WHERE n.nspname = @@S AND a.grantee = 0`); n != 0 {
		t.Errorf("PUBLIC holds %d privileges on the schema", n)
	}
}

// TestSecurityCatalog: S_owner owns everything and is no superuser; PUBLIC
// holds nothing; every function pins search_path with pg_temp last; the
// queue and lease verbs run as S_owner; the p_now overloads are S_owner's.
func TestSecurityCatalog(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	owner := sd.db.Schema + "_owner"
	if super, login := secValue[bool](sd, `SELECT rolsuper FROM pg_roles WHERE rolname = $1`, owner), secValue[bool](sd, `SELECT rolcanlogin FROM pg_roles WHERE rolname = $1`, owner); super || login {
		t.Errorf("%s: superuser %v, login %v (want neither)", owner, super, login)
	}
	checks := []struct{ what, query string }{
		{"relations not owned by S_owner", `SELECT string_agg(relname, ', ') FROM pg_class WHERE relnamespace = @@S::regnamespace
			AND relkind IN ('r', 'p', 'v', 'm', 'S') AND relowner <> (@@S || '_owner')::regrole`},
		{"routines not owned by S_owner", `SELECT string_agg(oid::regprocedure::text, ', ') FROM pg_proc WHERE pronamespace = @@S::regnamespace
			AND proowner <> (@@S || '_owner')::regrole`},
		{"schema not owned by S_owner", `SELECT string_agg(nspname, ', ') FROM pg_namespace WHERE oid = @@S::regnamespace AND nspowner <> (@@S || '_owner')::regrole`},
		{"PUBLIC privileges on relations", `SELECT string_agg(c.relname, ', ') FROM pg_class c, aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
			WHERE c.relnamespace = @@S::regnamespace AND a.grantee = 0`},
		{"PUBLIC privileges on routines", `SELECT string_agg(p.oid::regprocedure::text, ', ') FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
			WHERE p.pronamespace = @@S::regnamespace AND a.grantee = 0`},
		{"privileges of worker, monitor or admin on tables or sequences", `SELECT string_agg(c.relname || ':' || a.privilege_type || ':' || a.grantee::regrole::text, ', ')
			FROM pg_class c, aclexplode(c.relacl) a WHERE c.relnamespace = @@S::regnamespace AND c.relkind IN ('r', 'p', 'S')
			AND a.grantee IN ((@@S || '_admin')::regrole, (@@S || '_worker')::regrole, (@@S || '_monitor')::regrole)`},
		{"functions whose search_path is not pinned with pg_temp last", `SELECT string_agg(p.oid::regprocedure::text, ', ') FROM pg_proc p
			WHERE p.pronamespace = @@S::regnamespace AND p.prokind = 'f'
			AND NOT (p.proname = 'retention_register' AND p.proargtypes[1] = 'text'::regtype) -- resolves on the caller's path, calls only qualified names
			AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c ~ '^search_path=.*pg_temp$')`},
		{"queue and lease verbs that are not SECURITY DEFINER", `SELECT string_agg(oid::regprocedure::text, ', ') FROM pg_proc
			WHERE pronamespace = @@S::regnamespace AND NOT prosecdef AND proname IN ('send', 'send_batch', 'claim', 'renew', 'complete',
			'fail', 'release', 'lease_acquire', 'lease_renew', 'lease_release', 'queue_create', 'queue_configure')`},
		{"p_now overloads that a role other than S_owner may execute", `SELECT string_agg(p.oid::regprocedure::text, ', ')
			FROM pg_proc p, aclexplode(p.proacl) a WHERE p.pronamespace = @@S::regnamespace AND 'p_now' = ANY (p.proargnames)
			AND a.grantee <> p.proowner AND EXISTS (SELECT 1 FROM pg_proc q WHERE q.pronamespace = p.pronamespace
			AND q.proname = p.proname AND NOT 'p_now' = ANY (coalesce(q.proargnames, '{}')))`},
		{"procedures that could be SECURITY DEFINER or pin nothing and call unqualified", `SELECT string_agg(oid::regprocedure::text, ', ')
			FROM pg_proc WHERE pronamespace = @@S::regnamespace AND prokind = 'p' AND (prosecdef OR proconfig IS NOT NULL)`},
		{"columns that could hold SQL", `SELECT string_agg(c.relname || '.' || a.attname, ', ') FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
			WHERE c.relnamespace = @@S::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
			AND a.attname ~* '(sql|statement|command|query|code)'`},
	}
	for _, c := range checks {
		if got := secValue[*string](sd, c.query); got != nil {
			t.Errorf("%s: %s", c.what, *got)
		}
	}
}

// hostile sets up the hostile role of the escalation tests: a login role
// granted S_admin (it may register policies for its own tables) that owns
// schema @hx (USAGE for PUBLIC, as public would be) holding
//   - @hx.log, where everything hostile records who ran it (INSERT for PUBLIC);
//   - @hx.pwn(what), which logs and tries ALTER ROLE <hostile> SUPERUSER: it
//     succeeds only if a superuser runs it;
//   - an operator for every pg_catalog operator whose operand types are
//     among the types maintenance works with (the same name and types), plus
//     operators that pg_catalog lacks and that would be a better match than
//     its own (interval / integer, the one pg_cron ran in issue 10), each
//     calling @hx.pwn;
//   - a function or procedure with the name and argument types of every
//     routine of the install and of every pg_catalog function the procedures
//     call, each calling @hx.pwn.
//
// A session whose search_path puts @hx first resolves every name and
// operator that is not schema-qualified to these. It also makes a victim
// login role (no pgsweep role) owning @vs.precious with old rows.
func (sd *secDB) hostile() {
	t := sd.t
	sd.login("hostile", "admin")
	sd.login("victim")
	hx, vs := "sec_hx_"+sd.tag, "sec_vs_"+sd.tag
	sd.names["@hx"], sd.names["@@hx"] = pgx.Identifier{hx}.Sanitize(), "'"+hx+"'"
	sd.names["@vs"] = pgx.Identifier{vs}.Sanitize()
	sd.exec(`CREATE SCHEMA @hx AUTHORIZATION @hostile; CREATE SCHEMA @vs AUTHORIZATION @victim`)
	t.Cleanup(func() {
		_, _ = sd.db.Pool.Exec(context.Background(), sd.sql(`DROP SCHEMA IF EXISTS @hx CASCADE; DROP SCHEMA IF EXISTS @vs CASCADE`))
	})
	victim := sd.connAs("victim")
	ctx := context.Background()
	if _, err := victim.Exec(ctx, sd.sql(`GRANT USAGE ON SCHEMA @vs TO PUBLIC;
		CREATE TABLE @vs.precious (id int PRIMARY KEY, at timestamptz NOT NULL);
		INSERT INTO @vs.precious SELECT i, now() - interval '10 days' FROM generate_series(1, 50) i`)); err != nil {
		t.Fatalf("victim's table: %v", err)
	}
	h := sd.connAs("hostile")
	if _, err := h.Exec(ctx, sd.sql(secHostileSQL)); err != nil {
		t.Fatalf("hostile objects: %v", err)
	}
	ops := secValue[int64](sd, `SELECT count(*) FROM pg_operator WHERE oprnamespace = @@hx::regnamespace`)
	fns := secValue[int64](sd, `SELECT count(*) FROM pg_proc p WHERE p.pronamespace = @@hx::regnamespace
		AND p.proname IN (SELECT q.proname FROM pg_proc q WHERE q.pronamespace = @@S::regnamespace)`)
	all := secValue[int64](sd, `SELECT count(*) FROM pg_proc WHERE pronamespace = @@S::regnamespace`)
	if ops < 300 || fns < all {
		t.Fatalf("the hostile schema holds %d operators and %d of the install's %d routine names: the generator broke", ops, fns, all)
	}
	t.Logf("hostile schema %s: %d operators, %d shadows of the install's %d routines", hx, ops, fns, all)
}

// secHostileSQL runs as the hostile role (see hostile).
const secHostileSQL = `
GRANT USAGE ON SCHEMA @hx TO PUBLIC;
CREATE TABLE @hx.log (at timestamptz NOT NULL DEFAULT clock_timestamp(), who text, sess text, what text);
GRANT INSERT, SELECT ON @hx.log TO PUBLIC;
CREATE FUNCTION @hx.pwn(p_what text) RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog AS $f$
BEGIN
    INSERT INTO @hx.log (who, sess, what) VALUES (current_user, session_user, p_what);
    BEGIN
        EXECUTE 'ALTER ROLE @hostile SUPERUSER';
    EXCEPTION WHEN OTHERS THEN NULL;
    END;
EXCEPTION WHEN OTHERS THEN NULL;
END $f$;

DO $g$
DECLARE
    v_types regtype[] := ARRAY['boolean', 'smallint', 'integer', 'bigint', 'numeric', 'double precision', 'real', 'text',
        'character varying', 'name', 'interval', 'timestamp with time zone', 'timestamp without time zone', 'date', 'jsonb',
        'json', 'uuid', 'oid', 'regclass', 'regrole', 'tid', '"char"', 'text[]', 'bigint[]', 'jsonb[]']::regtype[];
    r record;
    v_fn text;
    v_n int := 0;
BEGIN
    FOR r IN
        SELECT o.oid::text AS id, o.oprname AS op, o.oprleft::regtype AS l, o.oprright::regtype AS r, o.oprresult::regtype AS res, true AS real
          FROM pg_catalog.pg_operator o
         WHERE o.oprnamespace = 'pg_catalog'::regnamespace AND o.oprcode <> 0
           AND (o.oprleft = 0 OR o.oprleft = ANY (v_types)) AND o.oprright = ANY (v_types)
        UNION ALL
        SELECT 'x' || x.n, x.op, x.l::regtype, x.r::regtype, x.res::regtype, false
          FROM (VALUES (1, '/', 'interval', 'integer', 'interval'), (2, '*', 'interval', 'integer', 'interval'),
                       (3, '*', 'integer', 'interval', 'interval'), (4, '+', 'timestamp with time zone', 'integer', 'timestamp with time zone'),
                       (5, '-', 'timestamp with time zone', 'integer', 'timestamp with time zone'), (6, '||', 'text', 'integer', 'text'),
                       (7, '||', 'integer', 'text', 'text'), (8, '||', 'text', 'bigint', 'text'), (9, '||', 'jsonb', 'text', 'jsonb'),
                       (10, '-', 'interval', 'integer', 'interval'), (11, '>', 'interval', 'integer', 'boolean'),
                       (12, '=', 'text', 'integer', 'boolean'), (13, '<', 'timestamp with time zone', 'timestamp without time zone', 'boolean'),
                       (14, '>=', 'timestamp with time zone', 'timestamp without time zone', 'boolean')) x(n, op, l, r, res)
    LOOP
        v_fn := 'op_' || r.id;
        BEGIN
            IF r.l = 0 THEN
                EXECUTE format('CREATE FUNCTION @hx.%I(%s) RETURNS %s LANGUAGE plpgsql AS %L', v_fn, r.r, r.res,
                    format('BEGIN PERFORM @hx.pwn(%L); RETURN OPERATOR(pg_catalog.%s) $1; END', 'operator ' || r.op || ' ' || r.r, r.op));
                EXECUTE format('CREATE OPERATOR @hx.%s (RIGHTARG = %s, FUNCTION = @hx.%I)', r.op, r.r, v_fn);
            ELSE
                EXECUTE format('CREATE FUNCTION @hx.%I(%s, %s) RETURNS %s LANGUAGE plpgsql AS %L', v_fn, r.l, r.r, r.res,
                    format('BEGIN PERFORM @hx.pwn(%L); %s END', 'operator ' || r.l || ' ' || r.op || ' ' || r.r,
                           CASE WHEN r.real THEN format('RETURN $1 OPERATOR(pg_catalog.%s) $2;', r.op) ELSE 'RETURN NULL;' END));
                EXECUTE format('CREATE OPERATOR @hx.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = @hx.%I)', r.op, r.l, r.r, v_fn);
            END IF;
            v_n := v_n + 1;
        EXCEPTION WHEN OTHERS THEN
            RAISE WARNING 'hostile operator % (%, %): %', r.op, r.l, r.r, SQLERRM;
        END;
    END LOOP;

    -- Shadows: every routine of the install, every pg_catalog function the procedures call.
    FOR r IN
        SELECT p.proname AS name, p.prokind AS kind, pg_catalog.pg_get_function_arguments(p.oid) AS args,
               pg_catalog.pg_get_function_result(p.oid) AS res,
               p.proretset OR p.prorettype = 'void'::regtype OR p.prorettype = 'record'::regtype
                 OR coalesce('o' = ANY (p.proargmodes) OR 'b' = ANY (p.proargmodes) OR 't' = ANY (p.proargmodes), false) AS bare
          FROM pg_catalog.pg_proc p
         WHERE p.pronamespace = @@S::regnamespace
            OR (p.pronamespace = 'pg_catalog'::regnamespace AND p.prokind = 'f'
                AND p.proname IN (SELECT (regexp_matches(q.prosrc, 'pg_catalog\.([a-z_0-9]+)\s*\(', 'g'))[1]
                                    FROM pg_catalog.pg_proc q WHERE q.pronamespace = @@S::regnamespace AND q.prokind = 'p')
                AND NOT EXISTS (SELECT 1 FROM unnest(p.proargtypes::oid[]) a WHERE a IN ('"any"'::regtype, 'internal'::regtype))
                AND p.prorettype <> 'internal'::regtype)
    LOOP
        BEGIN
            IF r.kind = 'p' THEN
                EXECUTE format('CREATE PROCEDURE @hx.%I(%s) LANGUAGE plpgsql AS %L', r.name, r.args,
                    format('BEGIN PERFORM @hx.pwn(%L); END', 'procedure ' || r.name));
            ELSE
                EXECUTE format('CREATE FUNCTION @hx.%I(%s) RETURNS %s LANGUAGE plpgsql AS %L', r.name, r.args, r.res,
                    format('BEGIN PERFORM @hx.pwn(%L); %s END', 'function ' || r.name,
                           CASE WHEN r.bare THEN 'RETURN;' ELSE 'RETURN NULL;' END));
            END IF;
        EXCEPTION WHEN duplicate_function THEN NULL;
        END;
    END LOOP;
    RAISE NOTICE 'hostile operators: %', v_n;
END
$g$;
`

// TestHostileOperatorsAndShadows is issue 10's second escalation: maintain
// and retention_run are procedures (they cannot pin search_path), and they
// used operators such as interval / integer that pg_catalog has no exact
// match for, so an operator in public ran as pg_cron's superuser. Here the
// maintenance session runs as a superuser with the hostile schema FIRST on
// its search_path (before pg_catalog, as `SET search_path = public,
// pg_catalog, S` would put public), holding every operator and shadow of
// hostile: the operators and functions are in effect in that session (a
// rolled-back control shows it), and a full maintenance pass (recovery and
// retention, batches deleted), retention_run and its p_now overload run
// none of them.
func TestHostileOperatorsAndShadows(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	ctx := context.Background()
	sd.hostile()
	sd.tenant()
	sd.exec(`SELECT @S.queue_create('jobs'); SELECT @S.send('jobs', '{}') FROM generate_series(1, 5)`)

	su := pgtest.Conn(t, sd.db.URL)
	if _, err := su.Exec(ctx, sd.sql(`SET search_path = @hx, pg_catalog, @S`)); err != nil {
		t.Fatal(err)
	}
	// Control: in this session an unqualified operator or name is the hostile one.
	control := func() (logged int64, super bool) {
		tx, err := su.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		for _, q := range []string{`SELECT interval '1 minute' / 2`, `SELECT 'a'::text = 'b'::text`, `SELECT _maintain_parts()`} {
			if _, err := tx.Exec(ctx, q); err != nil {
				t.Fatalf("control %s: %v", q, err)
			}
		}
		if err := tx.QueryRow(ctx, sd.sql(`SELECT pg_catalog.count(*) FROM @hx.log`)).Scan(&logged); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, `SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) $1`, sd.roles["hostile"]).Scan(&super); err != nil {
			t.Fatal(err)
		}
		return logged, super
	}
	if logged, super := control(); logged < 3 || !super {
		t.Fatalf("control: the hostile objects are not in effect in the maintenance session (%d log rows, superuser %v)", logged, super)
	}

	for _, q := range []string{
		`CALL @S.maintain('sec-su', '30 seconds')`,
		`CALL @S.retention_run('tenant')`,
		`CALL @S.retention_run('tenant', 'sec-su', '10 seconds', NULL, NULL)`,
	} {
		sd.exec(`INSERT INTO @ts.events SELECT i, now() - interval '3 days' FROM generate_series(1, 600) i`)
		if _, err := su.Exec(ctx, sd.sql(q)); err != nil {
			t.Fatalf("%s as superuser with the hostile schema first: %v", q, err)
		}
	}
	sd.assertNothingHostileRan()
	if n := secValue[int64](sd, `SELECT count(*) FROM @ts.events`); n != 0 {
		t.Errorf("the tenant's old rows: %d left (want 0: maintenance deleted them)", n)
	}
	if e := secValue[string](sd, `SELECT coalesce(string_agg(coalesce(error, '-'), '; '), 'no pass') FROM @S.maintenance_passes WHERE owner = 'sec-su'`); e != "-" {
		t.Errorf("the superuser's maintenance pass: %q (want one pass without error)", e)
	}
}

// assertNothingHostileRan: no hostile operator, function or procedure ran
// as anyone but the hostile role itself, no way out of a trigger worked, the
// hostile role is no superuser, and the victim's rows are all there.
func (sd *secDB) assertNothingHostileRan() {
	sd.t.Helper()
	if got := secValue[*string](sd, `SELECT string_agg(DISTINCT what || ' as ' || who, '; ') FROM @hx.log
		WHERE (what LIKE 'operator %' OR what LIKE 'function %' OR what LIKE 'procedure %' OR what LIKE 'ESCAPED%') AND who <> $1`,
		sd.roles["hostile"]); got != nil {
		sd.t.Errorf("hostile code ran during maintenance: %s", *got)
	}
	if secValue[bool](sd, `SELECT rolsuper FROM pg_roles WHERE rolname = $1`, sd.roles["hostile"]) {
		sd.t.Errorf("the hostile role %s became a superuser", sd.roles["hostile"])
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @vs.precious`); n != 50 {
		sd.t.Errorf("the victim's table holds %d rows (want all 50)", n)
	}
}

// tenant makes a benign login role granted S_admin that owns @ts.events
// (3000 rows three days old) and its policy "tenant" (older than a day,
// batches of 500), so that maintenance has batches to delete.
func (sd *secDB) tenant() {
	sd.t.Helper()
	sd.login("tenant", "admin")
	ts := "sec_ts_" + sd.tag
	sd.names["@ts"] = pgx.Identifier{ts}.Sanitize()
	sd.exec(`CREATE SCHEMA @ts AUTHORIZATION @tenant`)
	sd.t.Cleanup(func() { _, _ = sd.db.Pool.Exec(context.Background(), sd.sql(`DROP SCHEMA IF EXISTS @ts CASCADE`)) })
	if _, err := sd.connAs("tenant").Exec(context.Background(), sd.sql(`CREATE TABLE @ts.events (id int, at timestamptz NOT NULL);
		CREATE INDEX ON @ts.events (at);
		INSERT INTO @ts.events SELECT i, now() - interval '3 days' FROM generate_series(1, 3000) i;
		SELECT @S.retention_register('tenant', '@ts.events', 'at', '1 day', p_batch_size => 500, p_interval => '1 second')`)); err != nil {
		sd.t.Fatalf("tenant's policy: %v", err)
	}
}

// secTriggerSQL (run as the hostile role) makes one table per attempt in
// @hx, each with 3 rows ten days old and one new row, a BEFORE DELETE
// trigger, and a policy registered by the hostile role (older than a day).
// Each trigger runs as the policy's owner inside maintenance run by a
// superuser, and tries to keep something of it:
//
//	escape    RESET ROLE, SET ROLE <session user>, SET SESSION AUTHORIZATION,
//	          set_config('role'), ALTER ROLE <hostile> SUPERUSER: each must fail
//	forge     register 0-second policies as the victim (on its table) and as
//	          the session user (on a table whose trigger calls @hx.pwn): by
//	          the internal _retention_policy_put (not executable) and by
//	          retention_register_proved with a proof that is not the caller's
//	path      SET search_path = @hx, pg_catalog: the caller's next unqualified
//	          call (_retention_step_done, in _retention_step) would be @hx's
//	tz        SET TimeZone: later policies' cutoffs would move
//	tempview  a temporary view named pg_stat_activity in the caller's session
//	prepare   a prepared statement in the caller's session (it outlives a rollback)
//	prepfail  the same, then an error (55P03: the step defers the unit)
const secTriggerSQL = `
CREATE TABLE @hx.super_bait (id int, at timestamptz NOT NULL);
INSERT INTO @hx.super_bait VALUES (1, now() - interval '10 days');
CREATE FUNCTION @hx.trg_pwn() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN PERFORM @hx.pwn('function trg_pwn'); RETURN OLD; END $f$;
CREATE TRIGGER pwn BEFORE DELETE ON @hx.super_bait FOR EACH ROW EXECUTE FUNCTION @hx.trg_pwn();

CREATE FUNCTION @hx.trg() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
    v text;
BEGIN
    INSERT INTO @hx.log (who, sess, what) VALUES (current_user, session_user, 'trigger ' || TG_TABLE_NAME);
    CASE TG_TABLE_NAME
    WHEN 'escape' THEN
        FOREACH v IN ARRAY ARRAY['RESET ROLE', 'SET ROLE NONE', format('SET ROLE %I', session_user),
                                 format('SET LOCAL ROLE %I', session_user), format('SET SESSION AUTHORIZATION %I', session_user),
                                 'RESET SESSION AUTHORIZATION', format('SELECT pg_catalog.set_config(''role'', %L, false)', session_user),
                                 format('SELECT pg_catalog.set_config(''session_authorization'', %L, false)', session_user),
                                 'ALTER ROLE @hostile SUPERUSER'] LOOP
            BEGIN
                EXECUTE v;
                INSERT INTO @hx.log (who, sess, what) VALUES (current_user, session_user, 'ESCAPED: ' || v);
            EXCEPTION WHEN OTHERS THEN
                INSERT INTO @hx.log (who, sess, what) VALUES (current_user, session_user, 'refused ' || SQLSTATE || ': ' || v);
            END;
        END LOOP;
    WHEN 'forge' THEN
        BEGIN
            PERFORM @S._retention_policy_put('forged_victim', (SELECT c.oid FROM pg_catalog.pg_class c
                WHERE c.relname = 'precious' AND c.relnamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = '` + "@@vs" + `'))::regclass,
                'at', '0 seconds', NULL, NULL, 1000, 'exclusive', '1 second', (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = '` + "@@victim" + `')::regrole, false);
            INSERT INTO @hx.log (who, sess, what) VALUES (current_user, session_user, 'FORGED by _retention_policy_put');
        EXCEPTION WHEN OTHERS THEN
            INSERT INTO @hx.log (who, sess, what) VALUES (current_user, session_user, 'refused ' || SQLSTATE || ': _retention_policy_put');
        END;
        BEGIN
            PERFORM @S.retention_register_proved(
                (SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname = 'precious' AND c.relnamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = '` + "@@vs" + `'))::regclass,
                'forged_victim', (SELECT c.oid FROM pg_catalog.pg_class c
                WHERE c.relname = 'precious' AND c.relnamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = '` + "@@vs" + `'))::regclass,
                'at', '0 seconds', NULL, NULL, 1000, 'exclusive', '1 second');
            INSERT INTO @hx.log (who, sess, what) VALUES (current_user, session_user, 'FORGED by retention_register_proved');
        EXCEPTION WHEN OTHERS THEN
            INSERT INTO @hx.log (who, sess, what) VALUES (current_user, session_user, 'refused ' || SQLSTATE || ': retention_register_proved without a proof');
        END;
        -- the one way left: register as itself (a table it may clean); the
        -- session check of _retention_as_owner refuses even that
        PERFORM @S.retention_register('forged_super', '@hx.super_bait'::regclass, 'at', '0 seconds');
    WHEN 'path' THEN
        SET search_path = @hx, pg_catalog;
    WHEN 'tz' THEN
        PERFORM pg_catalog.set_config('TimeZone', 'Pacific/Kiritimati', false);
    WHEN 'tempview' THEN
        CREATE OR REPLACE TEMPORARY VIEW pg_stat_activity AS SELECT 'hostile'::text AS hostile;
    WHEN 'prepare' THEN
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_prepared_statements WHERE name = 'sec_hostile') THEN
            EXECUTE 'PREPARE sec_hostile AS SELECT 1';
        END IF;
    WHEN 'prepfail' THEN
        EXECUTE 'PREPARE sec_hostile_fail AS SELECT 1';
        RAISE EXCEPTION 'hostile lock failure' USING ERRCODE = 'lock_not_available';
    END CASE;
    RETURN OLD;
END $f$;

DO $d$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['escape', 'forge', 'path', 'tz', 'tempview', 'prepare', 'prepfail'] LOOP
        EXECUTE format('CREATE TABLE @hx.%I (id int, at timestamptz NOT NULL)', t);
        EXECUTE format('INSERT INTO @hx.%I SELECT i, now() - CASE WHEN i = 4 THEN interval ''1 minute'' ELSE interval ''10 days'' END FROM generate_series(1, 4) i', t);
        EXECUTE format('CREATE TRIGGER hostile BEFORE DELETE ON @hx.%I FOR EACH ROW EXECUTE FUNCTION @hx.trg()', t);
        PERFORM @S.retention_register(t, format('@hx.%I', t)::regclass, 'at', '1 day', p_interval => '1 second');
    END LOOP;
END
$d$;
`

// TestHostileTriggerDuringMaintenance is issue 10's third escalation and
// what a trigger of a policy's table can try while a superuser runs
// maintenance (by CALL here, by pg_cron in security_cron_test.go): a role
// with no right on the victim's table cannot register it (42501), and the
// victim's rows survive the pass; every statement on a policy's table runs
// as the policy's owner (the trigger sees it as current_user, the superuser
// as session_user) and cannot leave that role (each attempt refused); a
// trigger that tries to keep anything in the maintenance session (a forged
// policy, search_path, a setting, a temporary view, a prepared statement)
// gets its batch rolled back and a 42501 recorded on its policy's pass,
// and nothing of it stays.
func TestHostileTriggerDuringMaintenance(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	ctx := context.Background()
	sd.hostile()
	sd.names["@@vs"] = "sec_vs_" + sd.tag
	sd.names["@@victim"] = sd.roles["victim"]
	h := sd.connAs("hostile")
	// No right on the victim's table: refused, by name and by oid.
	sd.expect(h, "hostile", "42501", `SELECT @S.retention_register('steal', '@vs.precious', 'at', '0 seconds')`)
	sd.expect(h, "hostile", "42501", `SELECT @S.retention_register('steal', (SELECT oid FROM pg_class WHERE relname = 'precious'
		AND relnamespace = '@vs'::regnamespace)::regclass, 'at', '0 seconds')`)
	if _, err := h.Exec(ctx, sd.sql(secTriggerSQL)); err != nil {
		t.Fatalf("hostile triggers: %v", err)
	}

	su := pgtest.Conn(t, sd.db.URL)
	var before string
	if err := su.QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := su.Exec(ctx, sd.sql(`CALL @S.maintain('sec-su', '30 seconds')`)); err != nil {
		t.Fatalf("maintenance as superuser: %v", err)
	}
	sd.assertTriggersContained(su, before, secValue[string](sd, `SELECT session_user::text`))
	// The next pass: still nothing forged to run, nothing kept.
	if _, err := su.Exec(ctx, sd.sql(`CALL @S.maintain('sec-su', '30 seconds')`)); err != nil {
		t.Fatalf("second maintenance pass: %v", err)
	}
	sd.assertNothingHostileRan()
}

// assertTriggersContained checks what TestHostileTriggerDuringMaintenance
// (and the pg_cron test) expect after a maintenance pass in session su (nil:
// a session that is gone) run by session user super.
func (sd *secDB) assertTriggersContained(su *pgx.Conn, path, super string) {
	t := sd.t
	t.Helper()
	ctx := context.Background()
	sd.assertNothingHostileRan()
	// escape: ran as the policy's owner, every way out refused, its rows deleted.
	if got := secValue[string](sd, `SELECT coalesce(string_agg(DISTINCT who || '/' || sess, ', '), 'never') FROM @hx.log WHERE what = 'trigger escape'`); got != sd.roles["hostile"]+"/"+super {
		t.Errorf("the escape trigger ran as (current_user/session_user) %s; want %s/%s", got, sd.roles["hostile"], super)
	}
	if n := secValue[int64](sd, `SELECT count(DISTINCT what) FROM @hx.log WHERE what LIKE 'refused 42501: %'`); n != 9 {
		t.Errorf("%d of the 9 ways out were refused with 42501: %v", n, secValue[*string](sd, `SELECT string_agg(DISTINCT what, '; ') FROM @hx.log`))
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @hx.escape`); n != 1 {
		t.Errorf("the escape policy left %d rows (want the 1 new one)", n)
	}
	// The others: refused, batch rolled back, error recorded on the policy's pass.
	for _, p := range []string{"forge", "path", "tz", "tempview", "prepare"} {
		errText := secValue[*string](sd, `SELECT string_agg(error, '; ') FROM @S.retention_passes WHERE policy = $1`, p)
		if errText == nil || !strings.Contains(*errText, "changed the maintenance session") {
			t.Errorf("policy %s: recorded error %s (want: a statement run as its owner changed the maintenance session)", p, secStr(errText))
		}
		if n := secValue[int64](sd, `SELECT count(*) FROM @hx.`+p); n != 4 {
			t.Errorf("policy %s: %d rows left (want 4: the batch rolled back)", p, n)
		}
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @S.retention_policy WHERE name LIKE 'forged%'`); n != 0 {
		t.Errorf("%d forged policies were kept", n)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @hx.super_bait`); n != 1 {
		t.Errorf("the forged superuser policy's table lost rows (%d left)", n)
	}
	if su == nil {
		return
	}
	var gotPath, tz string
	var prepared int64
	var hasPid bool
	if err := su.QueryRow(ctx, `SELECT pg_catalog.current_setting('search_path'), pg_catalog.current_setting('TimeZone'),
		(SELECT pg_catalog.count(*) FROM pg_catalog.pg_prepared_statements WHERE name::pg_catalog.text OPERATOR(pg_catalog.~~) 'sec_hostile%'),
		EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid OPERATOR(pg_catalog.=) 'pg_stat_activity'::pg_catalog.regclass
		        AND attname OPERATOR(pg_catalog.=) 'pid')`).Scan(&gotPath, &tz, &prepared, &hasPid); err != nil {
		t.Fatal(err)
	}
	if gotPath != path || tz == "Pacific/Kiritimati" || prepared != 0 || !hasPid {
		t.Errorf("the maintenance session kept hostile state: search_path %q (was %q), TimeZone %s, %d hostile prepared statements, pg_stat_activity is the catalog's: %v",
			gotPath, path, tz, prepared, hasPid)
	}
}

// TestSecurityRLSAndTrigger: retention of a table with row-level security
// and a DELETE trigger, run by a superuser. The trigger runs as the
// policy's owner; rows that RLS hides from the owner stay, both when the
// owner is not the table's owner (RLS applies) and when the owner owns a
// table with FORCE ROW LEVEL SECURITY.
func TestSecurityRLSAndTrigger(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	ctx := context.Background()
	sd.login("tabowner")
	sd.login("cleaner", "admin")
	sd.login("forced", "admin")
	rs, fs := "sec_rs_"+sd.tag, "sec_fs_"+sd.tag
	sd.names["@rs"], sd.names["@fs"] = pgx.Identifier{rs}.Sanitize(), pgx.Identifier{fs}.Sanitize()
	sd.exec(`CREATE SCHEMA @rs AUTHORIZATION @tabowner; CREATE SCHEMA @fs AUTHORIZATION @forced`)
	t.Cleanup(func() {
		_, _ = sd.db.Pool.Exec(context.Background(), sd.sql(`DROP SCHEMA @rs CASCADE; DROP SCHEMA @fs CASCADE`))
	})
	const table = `CREATE TABLE %[1]s.events (id int PRIMARY KEY, at timestamptz NOT NULL, visible boolean NOT NULL);
		CREATE INDEX ON %[1]s.events (at);
		CREATE TABLE %[1]s.log (who text, sess text, id int);
		GRANT INSERT ON %[1]s.log TO PUBLIC;
		CREATE FUNCTION %[1]s.trg() RETURNS trigger LANGUAGE plpgsql AS $f$
		BEGIN INSERT INTO %[1]s.log VALUES (current_user, session_user, OLD.id); RETURN OLD; END $f$;
		CREATE TRIGGER logged BEFORE DELETE ON %[1]s.events FOR EACH ROW EXECUTE FUNCTION %[1]s.trg();
		ALTER TABLE %[1]s.events ENABLE ROW LEVEL SECURITY;
		INSERT INTO %[1]s.events SELECT i, now() - CASE WHEN i > 100 THEN interval '1 minute' ELSE interval '10 days' END, i %% 2 = 0
		  FROM generate_series(1, 110) i;`
	// The cleaner registers a table of tabowner's, which shows it only visible rows.
	if _, err := sd.connAs("tabowner").Exec(ctx, sd.sql(fmt.Sprintf(table, "@rs")+`
		GRANT USAGE ON SCHEMA @rs TO @cleaner;
		GRANT SELECT, DELETE ON @rs.events TO @cleaner;
		CREATE POLICY cleaner_sees ON @rs.events TO @cleaner USING (visible)`)); err != nil {
		t.Fatal(err)
	}
	if _, err := sd.connAs("cleaner").Exec(ctx, sd.sql(`SELECT @S.retention_register('rls', '@rs.events', 'at', '1 day', p_batch_size => 20)`)); err != nil {
		t.Fatal(err)
	}
	// forced owns its table; FORCE ROW LEVEL SECURITY hides the same rows from it.
	if _, err := sd.connAs("forced").Exec(ctx, sd.sql(fmt.Sprintf(table, "@fs")+`
		ALTER TABLE @fs.events FORCE ROW LEVEL SECURITY;
		CREATE POLICY owner_sees ON @fs.events USING (visible);
		SELECT @S.retention_register('forced', '@fs.events', 'at', '1 day', p_batch_size => 20)`)); err != nil {
		t.Fatal(err)
	}

	if _, err := pgtest.Conn(t, sd.db.URL).Exec(ctx, sd.sql(`CALL @S.maintain('sec-su', '30 seconds')`)); err != nil {
		t.Fatal(err)
	}
	super := secValue[string](sd, `SELECT session_user::text`)
	for _, c := range []struct{ schema, owner string }{{"@rs", "cleaner"}, {"@fs", "forced"}} {
		var oldVisible, oldHidden, recent int64
		if err := sd.db.Pool.QueryRow(ctx, sd.sql(`SELECT count(*) FILTER (WHERE at < now() - interval '1 day' AND visible),
			count(*) FILTER (WHERE at < now() - interval '1 day' AND NOT visible), count(*) FILTER (WHERE at > now() - interval '1 day')
			FROM `+c.schema+`.events`)).Scan(&oldVisible, &oldHidden, &recent); err != nil {
			t.Fatal(err)
		}
		if oldVisible != 0 || oldHidden != 50 || recent != 10 {
			t.Errorf("%s: old visible %d (want 0), old hidden %d (want 50: RLS hides them from the owner), recent %d (want 10)",
				c.schema, oldVisible, oldHidden, recent)
		}
		if got := secValue[string](sd, `SELECT coalesce(string_agg(DISTINCT who || '/' || sess, ', '), 'never') || ' ' || count(*) FROM `+c.schema+`.log`); got != sd.roles[c.owner]+"/"+super+" 50" {
			t.Errorf("%s: the DELETE trigger ran as (current_user/session_user count) %s, want %s/%s 50", c.schema, got, sd.roles[c.owner], super)
		}
	}
}

// TestSecurityRunnerCannotActAsOwner: a runner role (S_admin) that is not a
// member of a policy's owner cannot run that policy: maintenance records a
// clear 42501 for it (which GRANT is missing) and runs the other policies;
// after the DBA's GRANT <owner> TO <runner> (docs/operations.md) it runs it.
func TestSecurityRunnerCannotActAsOwner(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	ctx := context.Background()
	sd.login("runner", "admin")
	sd.login("billing", "admin")
	rn, bs := "sec_rn_"+sd.tag, "sec_bs_"+sd.tag
	sd.names["@rn"], sd.names["@bs"] = pgx.Identifier{rn}.Sanitize(), pgx.Identifier{bs}.Sanitize()
	sd.exec(`CREATE SCHEMA @rn AUTHORIZATION @runner; CREATE SCHEMA @bs AUTHORIZATION @billing`)
	t.Cleanup(func() {
		_, _ = sd.db.Pool.Exec(context.Background(), sd.sql(`DROP SCHEMA @rn CASCADE; DROP SCHEMA @bs CASCADE`))
	})
	const table = `CREATE TABLE %[1]s.events (id int, at timestamptz NOT NULL);
		INSERT INTO %[1]s.events SELECT i, now() - interval '10 days' FROM generate_series(1, 40) i;
		SELECT @S.retention_register(%[2]s, '%[1]s.events', 'at', '1 day', p_interval => '1 second')`
	runner := sd.connAs("runner")
	if _, err := runner.Exec(ctx, sd.sql(fmt.Sprintf(table, "@rn", "'own'"))); err != nil {
		t.Fatal(err)
	}
	if _, err := sd.connAs("billing").Exec(ctx, sd.sql(fmt.Sprintf(table, "@bs", "'billing'"))); err != nil {
		t.Fatal(err)
	}
	if _, err := runner.Exec(ctx, sd.sql(`CALL @S.maintain('sec-runner', '30 seconds')`)); err != nil {
		t.Fatalf("maintenance by the runner: %v", err)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @rn.events`); n != 0 {
		t.Errorf("the runner's own policy left %d rows", n)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @bs.events`); n != 40 {
		t.Errorf("billing's table: %d rows (want 40: the runner cannot act as billing)", n)
	}
	want := fmt.Sprintf("retention policy billing: %s cannot act as the policy's owner %s (SQLSTATE 42501)", sd.roles["runner"], sd.roles["billing"])
	if got := secValue[*string](sd, `SELECT error FROM @S.retention_passes WHERE policy = 'billing' AND outcome = 'error' ORDER BY id DESC LIMIT 1`); got == nil || *got != want {
		t.Errorf("billing's pass: error %s, want %q", secStr(got), want)
	}
	if got := secValue[*string](sd, `SELECT error FROM @S.maintenance_passes WHERE owner = 'sec-runner'`); got == nil || !strings.Contains(*got, want) {
		t.Errorf("the maintenance pass: error %s, want it to contain %q", secStr(got), want)
	}
	sd.exec(`GRANT @billing TO @runner`)
	time.Sleep(1100 * time.Millisecond) // time under test: the policy's run_interval passes, it is due again
	if _, err := runner.Exec(ctx, sd.sql(`CALL @S.maintain('sec-runner', '30 seconds')`)); err != nil {
		t.Fatal(err)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @bs.events`); n != 0 {
		t.Errorf("after GRANT billing TO runner: billing's table holds %d rows (want 0)", n)
	}
}

// secCall is "SELECT fn(args...)" padded with NULLs to the routine's
// argument count: internal signatures grow optional arguments.
func (sd *secDB) secCall(fn string, args ...string) string {
	sd.t.Helper()
	n := secValue[int16](sd, `SELECT max(pronargs) FROM pg_proc WHERE pronamespace = @@S::regnamespace AND proname = $1`, fn)
	for len(args) < int(n) {
		args = append(args, "NULL")
	}
	return "SELECT @S." + fn + "(" + strings.Join(args, ", ") + ")"
}

// TestSecurityForging: an admin cannot forge a policy for a role it cannot
// act as, nor re-point one by writing the policy tables, nor run a
// statement as another owner through the internal steps.
func TestSecurityForging(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	ctx := context.Background()
	sd.login("admin", "admin")
	sd.login("victim")
	as, vs := "sec_as_"+sd.tag, "sec_vs_"+sd.tag
	sd.names["@as"], sd.names["@vs"], sd.names["@@vs"] = pgx.Identifier{as}.Sanitize(), pgx.Identifier{vs}.Sanitize(), vs
	sd.exec(`CREATE SCHEMA @as AUTHORIZATION @admin; CREATE SCHEMA @vs AUTHORIZATION @victim; GRANT USAGE ON SCHEMA @vs TO PUBLIC`)
	t.Cleanup(func() {
		_, _ = sd.db.Pool.Exec(context.Background(), sd.sql(`DROP SCHEMA @as CASCADE; DROP SCHEMA @vs CASCADE`))
	})
	if _, err := sd.connAs("victim").Exec(ctx, sd.sql(`CREATE TABLE @vs.precious (id int, at timestamptz NOT NULL);
		INSERT INTO @vs.precious SELECT i, now() - interval '10 days' FROM generate_series(1, 30) i`)); err != nil {
		t.Fatal(err)
	}
	admin := sd.connAs("admin")
	if _, err := admin.Exec(ctx, sd.sql(`CREATE TABLE @as.mine (id int, at timestamptz NOT NULL);
		SELECT @S.retention_register('mine', '@as.mine', 'at', '1 day')`)); err != nil {
		t.Fatal(err)
	}
	victim := "'" + sd.roles["victim"] + "'::regrole"
	for _, q := range []string{
		sd.secCall("_retention_policy_put", "'forged'", "'@vs.precious'::regclass", "'at'", "'0 seconds'", "NULL", "NULL", "1000", "'exclusive'", "'1 second'", victim, "false"),
		sd.secCall("_retention_policy_put", "'forged'", "'@vs.precious'::regclass", "'at'", "'0 seconds'", "NULL", "NULL", "1000", "'exclusive'", "'1 second'", victim, "true"),
		sd.secCall("_retention_policy_put", "'forged'", "'@vs.precious'::regclass", "'at'", "'0 seconds'", "NULL", "NULL", "1000", "'exclusive'", "'1 second'", "'@@S_owner'::regrole", "true"),
		// a proof that is not a temporary table this caller created: the victim's table, pgsweep's
		sd.secCall("retention_register_proved", "'@vs.precious'::regclass", "'forged'", "'@vs.precious'::regclass", "'at'", "'0 seconds'", "NULL", "NULL", "1000", "'exclusive'", "'1 second'"),
		sd.secCall("retention_register_proved", "'@S.message'::regclass", "'forged'", "'@vs.precious'::regclass", "'at'", "'0 seconds'", "NULL", "NULL", "1000", "'exclusive'", "'1 second'"),
		`UPDATE @S.retention_policy SET owner = ` + victim + `, table_schema = '@@vs', table_name = 'precious', older_than = '0 seconds'`,
		`INSERT INTO @S.retention_policy (name, table_schema, table_name, time_column, time_type, older_than, batch_size, mode, run_interval, owner)
			VALUES ('forged', '@@vs', 'precious', 'at', 'timestamptz', '0 seconds', 1000, 'exclusive', '1 second', ` + victim + `)`,
		`DELETE FROM @S.retention_unit`,
		`UPDATE @S.retention_sweep SET cutoff = now() + interval '100 years'`,
		// The internal steps (0.34: _retention_as_owner is gone; its work is
		// retention_step's, which claims only a pass of this session).
		sd.secCall("_retention_step_claim", "0"),
		// Built-in execution only for built-in policies.
		sd.secCall("_retention_builtin_exec", "'mine'", "'delete'", "'keyset'", "'-infinity'::timestamptz", "'infinity'::timestamptz", "now() + interval '100 years'"),
	} {
		sd.expect(admin, "admin", "42501", q)
	}
	if _, err := pgtest.Conn(t, sd.db.URL).Exec(ctx, sd.sql(`CALL @S.maintain('sec-su', '30 seconds')`)); err != nil {
		t.Fatal(err)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @vs.precious`); n != 30 {
		t.Errorf("the victim's table holds %d rows after maintenance (want 30)", n)
	}
	if got := secValue[string](sd, `SELECT string_agg(name || ':' || owner::text, ', ' ORDER BY name) FROM @S.retention_policy WHERE table_schema <> @@S`); got != "mine:"+sd.roles["admin"] {
		t.Errorf("policies: %s (want only mine:%s)", got, sd.roles["admin"])
	}
}

// TestHostileForgesPolicyOutsideMaintenance: code that runs as the hostile
// role inside another role's session -- a SECURITY DEFINER trigger function
// of a table that the victim's application writes to -- tries to register a
// policy as the victim (or the session user). It cannot: the owner comes
// from a temporary table only the calling role can have created
// (retention_register.sql), and the internal _retention_policy_put is not
// executable; so the victim's rows survive the next maintenance pass. (An
// earlier _retention_register trusted pg_has_role(session_user, ...): this
// test reproduced that forgery.)
func TestHostileForgesPolicyOutsideMaintenance(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	ctx := context.Background()
	sd.hostile()
	h := sd.connAs("hostile")
	if _, err := h.Exec(ctx, sd.sql(`
		CREATE TABLE @hx.inbox (id int);
		GRANT INSERT ON @hx.inbox TO @victim;
		CREATE FUNCTION @hx.inbox_trg() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $f$
		BEGIN
			BEGIN
				PERFORM @S._retention_policy_put('forged_outside', (SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
					WHERE n.nspname = `+"'sec_vs_"+sd.tag+"'"+` AND c.relname = 'precious')::regclass, 'at', '0 seconds', NULL, NULL, 1000,
					'exclusive', '1 second', session_user::regrole, false);
			EXCEPTION WHEN OTHERS THEN NULL;
			END;
			BEGIN
				-- a temporary table of the session made by someone else does not prove the caller either
				PERFORM @S._retention_register('forged_outside', (SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
					WHERE n.nspname = `+"'sec_vs_"+sd.tag+"'"+` AND c.relname = 'precious')::regclass, 'at', '0 seconds', NULL, NULL, 1000,
					'exclusive', '1 second', (SELECT c.oid FROM pg_class c WHERE c.relnamespace = pg_my_temp_schema() LIMIT 1)::regclass);
			EXCEPTION WHEN OTHERS THEN NULL;
			END;
			RETURN NEW;
		END $f$;
		CREATE TRIGGER forge AFTER INSERT ON @hx.inbox FOR EACH ROW EXECUTE FUNCTION @hx.inbox_trg()`)); err != nil {
		t.Fatal(err)
	}
	// The victim's application writes a row to a table it was given; the
	// trigger runs as the hostile role (SECURITY DEFINER: PostgreSQL's own
	// model says it cannot act as the victim).
	if _, err := sd.connAs("victim").Exec(ctx, sd.sql(`INSERT INTO @hx.inbox VALUES (1)`)); err != nil {
		t.Fatal(err)
	}
	if _, err := pgtest.Conn(t, sd.db.URL).Exec(ctx, sd.sql(`CALL @S.maintain('sec-su', '30 seconds')`)); err != nil {
		t.Fatal(err)
	}
	owner := secValue[*string](sd, `SELECT max(owner::text) FROM @S.retention_policy WHERE name = 'forged_outside'`)
	left := secValue[int64](sd, `SELECT count(*) FROM @vs.precious`)
	if owner != nil {
		t.Errorf("a SECURITY DEFINER function of %s, run in %s's session, registered policy forged_outside as %s; "+
			"maintenance then left %d of the victim's rows", sd.roles["hostile"], sd.roles["victim"], *owner, left)
	}
	sd.assertNothingHostileRan()
}

func secStr(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// secDocBlock is one SQL block of docs/operations.md's "Roles and grants":
// as is the role it says it runs connected as ("" for the DBA).
type secDocBlock struct{ as, sql string }

// docBlocks reads the SQL blocks of docs/operations.md's section "Roles and
// grants" and renames what they name for this test: the roles of the
// default install become this install's, pgsweep. becomes @S., and the
// login roles the section makes (orders_app, pgsweep_runner, pgsweep_cron,
// grafana, billing, deployer) become sec_doc_<name>_<tag>, dropped when the
// test ends.
func (sd *secDB) docBlocks() []secDocBlock {
	t := sd.t
	t.Helper()
	b, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Roles and grants\n")
	if start < 0 {
		t.Fatal(`docs/operations.md has no section "## Roles and grants"`)
	}
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	docRoles := []string{"orders_app", "pgsweep_runner", "pgsweep_cron", "grafana", "billing", "deployer"}
	for _, r := range docRoles {
		role := "sec_doc_" + strings.TrimPrefix(r, "pgsweep_") + "_" + sd.tag
		if _, ok := sd.roles[r]; !ok {
			sd.roles[r] = role
			sd.names["@"+r] = pgx.Identifier{role}.Sanitize()
			id := pgx.Identifier{role}.Sanitize()
			t.Cleanup(func() {
				_, _ = sd.db.Pool.Exec(context.Background(), `DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '`+role+`') THEN
					EXECUTE 'DROP OWNED BY `+strings.ReplaceAll(id, "'", "''")+`'; EXECUTE 'DROP ROLE `+strings.ReplaceAll(id, "'", "''")+`'; END IF; END $$`)
			})
		}
	}
	rename := regexp.MustCompile(`\b(` + strings.Join(docRoles, "|") + `)\b`)
	installRoles := regexp.MustCompile(`\bpgsweep_(owner|admin|worker|monitor)\b`)
	schema := regexp.MustCompile(`\bpgsweep\.`)
	var blocks []secDocBlock
	for _, part := range strings.Split(section, "```sql\n")[1:] {
		code := part[:strings.Index(part, "```")]
		code = rename.ReplaceAllStringFunc(code, func(r string) string { return pgx.Identifier{sd.roles[r]}.Sanitize() })
		code = installRoles.ReplaceAllString(code, sd.db.Schema+"_$1")
		code = schema.ReplaceAllString(code, "@S.")
		blk := secDocBlock{sql: code}
		if m := regexp.MustCompile(`(?m)^-- connected as (\S+)`).FindStringSubmatch(code); m != nil {
			blk.as = strings.Trim(m[1], `"`)
		}
		blocks = append(blocks, blk)
	}
	if len(blocks) < 5 {
		t.Fatalf("docs/operations.md, Roles and grants: %d SQL blocks, want at least 5", len(blocks))
	}
	return blocks
}

// runDocBlocks runs the blocks for which keep is true, as the DBA (the
// test's superuser) or as the role a block says.
func (sd *secDB) runDocBlocks(blocks []secDocBlock, keep func(secDocBlock) bool) {
	sd.t.Helper()
	for _, b := range blocks {
		if !keep(b) {
			continue
		}
		if b.as == "" {
			sd.exec(b.sql)
			continue
		}
		label := ""
		for l, r := range sd.roles {
			if r == b.as {
				label = l
			}
		}
		if _, err := sd.connAsPassword(label, "change-me").Exec(context.Background(), sd.sql(b.sql)); err != nil {
			sd.t.Fatalf("as %s: %s: %v", b.as, b.sql, err)
		}
	}
}

// connAsPassword connects as the role of label with the given password.
func (sd *secDB) connAsPassword(label, password string) *pgx.Conn {
	sd.t.Helper()
	u, err := url.Parse(sd.db.URL)
	if err != nil {
		sd.t.Fatal(err)
	}
	u.User = url.UserPassword(sd.roles[label], password)
	return pgtest.Conn(sd.t, u.String())
}

// docBilling makes the role billing of the docs: a login role granted
// S_admin that registered policy "billing" for its table @bs.events (40
// rows ten days old).
func (sd *secDB) docBilling() {
	sd.t.Helper()
	sd.docBlocks() // names billing
	role := sd.roles["billing"]
	sd.exec("CREATE ROLE @billing LOGIN PASSWORD 'change-me'; GRANT @S_admin TO @billing")
	bs := "sec_bs_" + sd.tag
	sd.names["@bs"] = pgx.Identifier{bs}.Sanitize()
	sd.exec(`CREATE SCHEMA @bs AUTHORIZATION @billing`)
	sd.t.Cleanup(func() { _, _ = sd.db.Pool.Exec(context.Background(), sd.sql(`DROP SCHEMA IF EXISTS @bs CASCADE`)) })
	if _, err := sd.connAsPassword("billing", "change-me").Exec(context.Background(), sd.sql(`
		CREATE TABLE @bs.events (id int, at timestamptz NOT NULL);
		INSERT INTO @bs.events SELECT i, now() - interval '10 days' FROM generate_series(1, 40) i;
		SELECT @S.retention_register('billing', '@bs.events', 'at', '1 day', p_interval => '1 second')`)); err != nil {
		sd.t.Fatalf("%s's policy: %v", role, err)
	}
}

// TestGrantsOperationsDoc runs the GRANTs docs/operations.md gives a DBA
// for an application, a maintenance runner and a dashboard, then checks
// that each role can do its job, and no more (the pg_cron block:
// TestGrantsOperationsDocCron; the migrating role: TestGrantsMigratingRole).
func TestGrantsOperationsDoc(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	ctx := context.Background()
	sd.docBilling()
	blocks := sd.docBlocks()
	sd.runDocBlocks(blocks, func(b secDocBlock) bool {
		return !strings.Contains(b.sql, "cron") && !strings.Contains(b.sql, sd.roles["deployer"])
	})
	sd.exec(`SELECT @S.queue_create('orders')`)

	// The application: send, claim, complete with the token; nothing else.
	app := sd.connAsPassword("orders_app", "change-me")
	sd.expect(app, "orders_app", "", `SELECT @S.send('orders', '{"order": 1}')`)
	var id int64
	var token string
	if err := app.QueryRow(ctx, sd.sql(`SELECT id, token::text FROM @S.claim('orders', 'app-1', 10, '30 seconds')`)).Scan(&id, &token); err != nil {
		t.Fatalf("orders_app claims: %v", err)
	}
	sd.expect(app, "orders_app", "", `SELECT @S.complete('orders', $1::uuid, ARRAY[$2::bigint])`, token, id)
	sd.expect(app, "orders_app", "42501", `SELECT * FROM @S.message`)
	sd.expect(app, "orders_app", "42501", `SELECT @S.queue_create('other')`)

	// The runner: maintenance runs every policy, billing's included.
	runner := sd.connAsPassword("pgsweep_runner", "change-me")
	sd.expect(runner, "pgsweep_runner", "", `CALL @S.maintain('doc-runner', '30 seconds')`)
	if n := secValue[int64](sd, `SELECT count(*) FROM @bs.events`); n != 0 {
		t.Errorf("the runner left %d of billing's old rows", n)
	}
	if e := secValue[*string](sd, `SELECT string_agg(error, '; ') FROM @S.maintenance_passes WHERE owner = 'doc-runner'`); e != nil {
		t.Errorf("the runner's pass recorded an error: %s", *e)
	}
	sd.expect(runner, "pgsweep_runner", "", `SELECT * FROM @S.retention_policies`)
	sd.expect(runner, "pgsweep_runner", "42501", `SELECT * FROM @S.message`)

	// The dashboard: counts, never payloads.
	dash := sd.connAsPassword("grafana", "change-me")
	for _, v := range []string{"queue_stats", "leases", "retention_policies", "retention_passes", "maintenance_passes", "maintenance_runs", "settings"} {
		sd.expect(dash, "grafana", "", `SELECT * FROM @S.`+v)
	}
	sd.expect(dash, "grafana", "42501", `SELECT * FROM @S.message_processed`)
	sd.expect(dash, "grafana", "42501", `CALL @S.maintain()`)
}

// TestGrantsMigratingRole: where the migrating role may not create roles, a
// superuser creates them first as docs/operations.md says, and that role
// (no superuser, no CREATEROLE, CREATE on the database) migrates a fresh
// install that owns nothing but its schema's objects through pgsweep_owner.
func TestGrantsMigratingRole(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t) // for the names and the roles' cleanup; the install under test is another schema
	ctx := context.Background()
	blocks := sd.docBlocks()
	schema := "t_secdoc_migrate_" + sd.tag
	var pre []secDocBlock
	for _, b := range blocks {
		if strings.Contains(b.sql, sd.roles["deployer"]) {
			b.sql = strings.ReplaceAll(b.sql, sd.db.Schema+"_", schema+"_")
			pre = append(pre, b)
		}
	}
	if len(pre) != 1 {
		t.Fatalf("docs/operations.md: %d blocks for the migrating role, want 1", len(pre))
	}
	sd.exec("CREATE ROLE @deployer LOGIN PASSWORD 'change-me'")
	// Cleanups run last first: the install goes, then the four roles the
	// DBA made (an uninstall keeps roles it did not create).
	t.Cleanup(func() {
		for _, r := range pgsweep.RoleNames(schema) {
			id := pgx.Identifier{r}.Sanitize()
			_, _ = sd.db.Pool.Exec(context.Background(), `DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '`+r+`') THEN
				EXECUTE 'DROP OWNED BY `+id+`'; EXECUTE 'DROP ROLE `+id+`'; END IF; END $$`)
		}
	})
	t.Cleanup(func() { pgtest.DropSchema(t, sd.db.URL, schema) })
	sd.runDocBlocks(pre, func(secDocBlock) bool { return true })
	sd.exec("GRANT CREATE ON DATABASE " + pgx.Identifier{secValue[string](sd, "SELECT current_database()")}.Sanitize() + " TO @deployer")
	t.Cleanup(func() {
		_, _ = sd.db.Pool.Exec(context.Background(), sd.sql("REVOKE CREATE ON DATABASE "+
			pgx.Identifier{secValue[string](sd, "SELECT current_database()")}.Sanitize()+" FROM @deployer"))
	})
	conn := sd.connAsPassword("deployer", "change-me")
	if _, err := pgsweep.Migrate(ctx, conn, schema); err != nil {
		t.Fatalf("migrate as %s with the roles created beforehand: %v", sd.roles["deployer"], err)
	}
	owner := secValue[string](sd, `SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = $1`, schema)
	if owner != schema+"_owner" {
		t.Errorf("the schema belongs to %s, want %s_owner", owner, schema)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM pg_roles WHERE rolname = ANY ($1)`, pgsweep.RoleNames(schema)); n != 4 {
		t.Errorf("%d of the four roles exist", n)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM `+pgx.Identifier{schema, "installed_role"}.Sanitize()); n != 0 {
		t.Errorf("the install recorded %d roles as its own (want 0: the DBA made them; an uninstall keeps them)", n)
	}
}
