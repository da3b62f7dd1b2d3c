package pgsweep_test

// The runner's passes with partitions, against a hostile table owner
// (issue 23; docs/security.md, "The runner's DETACH ... CONCURRENTLY").
//
// TestHookSuiteRunnerPasses: a hostile role owns two partitioned tables,
// registered for retention by itself, that carry every hook that runs
// code -- row and statement triggers, a rule, a row-level security policy
// with FORCE ROW LEVEL SECURITY, a domain CHECK on a column, a CHECK
// constraint, an index expression, a column DEFAULT, a generated column --
// on the parents and on every leaf. One table has no DEFAULT partition (the
// runner detaches its expired leaves concurrently), the other has one (the
// pass detaches and sweeps); one expired leaf belongs to another role.
// Every hook calls hook_rec, which records current_user and tries four
// privileged actions (read pgsweep's message table, update the retention
// policy table, ALTER ROLE ... SUPERUSER, SET ROLE to the superuser),
// recording which succeeded. Real runner passes (runner.Runner.RunOnce)
// run as a superuser and as a runner role granted the policy owner's role
// (docs/operations.md): every record's current_user is the owner of the
// table the hook is on, no privileged action succeeded, and exactly the
// expected leaves were detached and dropped.
//
// TestHookDecoyOperatorsRunnerDetach: decoy operators and functions for
// the inexact comparisons the runner's detach used to send (oid = integer,
// real >= integer, ...) count their calls; the runner's detach on a
// connection whose search_path puts them first calls none.

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"github.com/pgsweep/pgsweep/runner"
)

// hookSetupSQL is run by the hostile role: its schema @hk, the recorder, the
// hooks, the two tables and their data. @@super is the superuser's name.
const hookSetupSQL = `
GRANT USAGE ON SCHEMA @hk TO PUBLIC;
CREATE TABLE @hk.hook_log (id bigserial, hook text, usr name, sess name, actions text[]);
GRANT INSERT ON @hk.hook_log TO PUBLIC;
GRANT USAGE ON SEQUENCE @hk.hook_log_id_seq TO PUBLIC;
-- hook_rec: who runs it, and which privileged action it could take (each
-- is tried in a block that is rolled back, whatever happens).
CREATE FUNCTION @hk.hook_rec(p_hook text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $f$
DECLARE ok text[] := '{}';
BEGIN
    BEGIN PERFORM 1 FROM @S.message LIMIT 1; ok := ok || 'read message'::text; RAISE EXCEPTION 'undo';
    EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN UPDATE @S.retention_policy SET batch_size = batch_size; ok := ok || 'update retention_policy'::text; RAISE EXCEPTION 'undo';
    EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN EXECUTE 'ALTER ROLE @hostile SUPERUSER'; ok := ok || 'alter role superuser'::text; RAISE EXCEPTION 'undo';
    EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN PERFORM pg_catalog.set_config('role', @@super, true); ok := ok || 'set role superuser'::text; RAISE EXCEPTION 'undo';
    EXCEPTION WHEN OTHERS THEN NULL; END;
    INSERT INTO @hk.hook_log (hook, usr, sess, actions) VALUES (p_hook, current_user, session_user, ok);
    RETURN true;
END $f$;
CREATE FUNCTION @hk.hook_trg() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    PERFORM @hk.hook_rec(pg_catalog.format('%s trigger %s on %s', TG_LEVEL, TG_OP, TG_TABLE_NAME));
    RETURN CASE WHEN TG_LEVEL = 'STATEMENT' THEN NULL WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
END $f$;
CREATE FUNCTION @hk.hook_imm(p int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN PERFORM @hk.hook_rec('index expression'); RETURN p; END $f$;
CREATE FUNCTION @hk.hook_gen(p int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $f$
BEGIN PERFORM @hk.hook_rec('generated column'); RETURN p; END $f$;
CREATE FUNCTION @hk.hook_def() RETURNS int LANGUAGE plpgsql AS $f$
BEGIN PERFORM @hk.hook_rec('column default'); RETURN 1; END $f$;
CREATE DOMAIN @hk.dom AS int CHECK (@hk.hook_rec('domain check'));
CREATE TABLE @hk.rule_sink (ok boolean);

-- hooks: on a parent and, for every leaf, those that fire on the leaf itself
CREATE FUNCTION @hk.hook_table(p_table regclass) RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
    EXECUTE pg_catalog.format('CREATE TRIGGER hook_row BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW EXECUTE FUNCTION @hk.hook_trg()', p_table);
    EXECUTE pg_catalog.format('CREATE TRIGGER hook_stmt AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION @hk.hook_trg()', p_table);
    EXECUTE pg_catalog.format('CREATE RULE hook_rule AS ON DELETE TO %s DO ALSO INSERT INTO @hk.rule_sink VALUES (@hk.hook_rec(%L))',
                              p_table, 'rule on ' || p_table::text);
    EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', p_table);
    EXECUTE pg_catalog.format('CREATE POLICY hook_rls ON %s USING (@hk.hook_rec(%L))', p_table, 'rls on ' || p_table::text);
END $f$;
-- p_no_rule: leaves that get no rule of their own (none, today).
CREATE FUNCTION @hk.hook_leaves(p_parent regclass, p_no_rule text[]) RETURNS void LANGUAGE plpgsql AS $f$
DECLARE l regclass;
BEGIN
    FOR l IN SELECT t.relid FROM pg_catalog.pg_partition_tree(p_parent) t WHERE t.isleaf LOOP
        -- the row trigger is the parent's (cloned); the rest is per table
        EXECUTE pg_catalog.format('CREATE TRIGGER hook_stmt AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s FOR EACH STATEMENT EXECUTE FUNCTION @hk.hook_trg()', l);
        CONTINUE WHEN (SELECT c.relname::text FROM pg_catalog.pg_class c WHERE c.oid = l) = ANY (p_no_rule);
        EXECUTE pg_catalog.format('CREATE RULE hook_rule AS ON DELETE TO %s DO ALSO INSERT INTO @hk.rule_sink VALUES (@hk.hook_rec(%L))',
                                  l, 'rule on ' || l::text);
    END LOOP;
    FOR l IN SELECT t.relid FROM pg_catalog.pg_partition_tree(p_parent) t WHERE t.isleaf LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', l);
        EXECUTE pg_catalog.format('CREATE POLICY hook_rls ON %s USING (@hk.hook_rec(%L))', l, 'rls on ' || l::text);
    END LOOP;
END $f$;

-- ev: no DEFAULT partition; the runner detaches its expired leaves
CREATE TABLE @hk.ev (
    id int NOT NULL DEFAULT @hk.hook_def(),
    at timestamptz NOT NULL,
    d @hk.dom NOT NULL DEFAULT 1,
    g int GENERATED ALWAYS AS (@hk.hook_gen(id)) STORED, -- reads another column
    CONSTRAINT hook_check CHECK (@hk.hook_rec('check constraint'))
) PARTITION BY RANGE (at);
CREATE INDEX ev_hook_idx ON @hk.ev ((@hk.hook_imm(id)));
CREATE TABLE @hk.ev_d10 PARTITION OF @hk.ev FOR VALUES FROM (now() - interval '10 days') TO (now() - interval '9 days');
CREATE TABLE @hk.ev_d9 PARTITION OF @hk.ev FOR VALUES FROM (now() - interval '9 days') TO (now() - interval '8 days');
CREATE TABLE @hk.ev_d8 PARTITION OF @hk.ev FOR VALUES FROM (now() - interval '8 days') TO (now() - interval '7 days 1 hour');
CREATE TABLE @hk.ev_cut PARTITION OF @hk.ev FOR VALUES FROM (now() - interval '7 days 1 hour') TO (now() + interval '1 day');
SELECT @hk.hook_table('@hk.ev'); SELECT @hk.hook_leaves('@hk.ev', '{ev_d9}'); -- ev_d9 is the other role's: its rule would write as that role
INSERT INTO @hk.ev (at) SELECT now() - interval '10 days' + g * interval '5 minutes' FROM generate_series(1, 10) g;
INSERT INTO @hk.ev (at) SELECT now() - interval '9 days' + g * interval '5 minutes' FROM generate_series(1, 10) g;
INSERT INTO @hk.ev (at) SELECT now() - interval '8 days' + g * interval '5 minutes' FROM generate_series(1, 10) g;
INSERT INTO @hk.ev (at) SELECT now() - interval '7 days 30 minutes' + g * interval '1 minute' FROM generate_series(1, 10) g;
INSERT INTO @hk.ev (at) SELECT now() - g * interval '1 hour' FROM generate_series(1, 10) g;
ANALYZE @hk.ev_d10; ANALYZE @hk.ev_d8;

-- lg: a DEFAULT partition (PostgreSQL refuses CONCURRENTLY): the pass does it
CREATE TABLE @hk.lg (
    id int NOT NULL DEFAULT @hk.hook_def(),
    at timestamptz NOT NULL,
    d @hk.dom NOT NULL DEFAULT 1,
    g int GENERATED ALWAYS AS (@hk.hook_gen(id)) STORED, -- reads another column
    CONSTRAINT hook_check CHECK (@hk.hook_rec('check constraint'))
) PARTITION BY RANGE (at);
CREATE INDEX lg_hook_idx ON @hk.lg ((@hk.hook_imm(id)));
CREATE TABLE @hk.lg_d10 PARTITION OF @hk.lg FOR VALUES FROM (now() - interval '10 days') TO (now() - interval '9 days');
CREATE TABLE @hk.lg_cut PARTITION OF @hk.lg FOR VALUES FROM (now() - interval '9 days') TO (now() + interval '1 day');
CREATE TABLE @hk.lg_def PARTITION OF @hk.lg DEFAULT;
SELECT @hk.hook_table('@hk.lg'); SELECT @hk.hook_leaves('@hk.lg', '{}');
INSERT INTO @hk.lg (at) SELECT now() - interval '10 days' + g * interval '5 minutes' FROM generate_series(1, 10) g;
INSERT INTO @hk.lg (at) SELECT now() - interval '8 days' + g * interval '5 minutes' FROM generate_series(1, 10) g;
INSERT INTO @hk.lg (at) SELECT now() - g * interval '1 hour' FROM generate_series(1, 10) g;
INSERT INTO @hk.lg (at) SELECT now() - interval '30 days' + g * interval '1 minute' FROM generate_series(1, 10) g;
INSERT INTO @hk.lg (at) SELECT now() + interval '30 days' + g * interval '1 minute' FROM generate_series(1, 10) g;

SELECT @S.retention_register('hk_ev', '@hk.ev', 'at', '7 days');
SELECT @S.retention_register('hk_lg', '@hk.lg', 'at', '7 days');
`

// hookOtherSQL is run by the other role, owner of ev_d9: a trigger of its own.
const hookOtherSQL = `
CREATE FUNCTION @hk.other_trg() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN PERFORM @hk.hook_rec('other''s row trigger ' || TG_OP); RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END; END $f$;
CREATE TRIGGER other_row BEFORE UPDATE OR DELETE ON @hk.ev_d9 FOR EACH ROW EXECUTE FUNCTION @hk.other_trg();
`

func TestHookSuiteRunnerPasses(t *testing.T) {
	for _, as := range []string{"superuser", "runner role"} {
		t.Run(strings.ReplaceAll(as, " ", "_"), func(t *testing.T) {
			t.Parallel()
			hookSuite(t, as == "superuser")
		})
	}
}

func hookSuite(t *testing.T, super bool) {
	sd := newSecDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sd.login("hostile", "admin")
	other := sd.login("other")
	// The hostile role may act as the other (it made the leaf and gave it
	// away): the leaf is one the pass may drop, and one the runner could
	// DETACH as the hostile role -- and must not.
	sd.exec(`GRANT @other TO @hostile`)
	hk := "sec_hk_" + sd.tag
	sd.names["@hk"] = pgx.Identifier{hk}.Sanitize()
	sd.names["@@hk"] = "'" + hk + "'"
	sd.names["@@super"] = "'" + secValue[string](sd, `SELECT session_user::text`) + "'"
	sd.exec(`CREATE SCHEMA @hk AUTHORIZATION @hostile`)
	t.Cleanup(func() { _, _ = sd.db.Pool.Exec(context.Background(), sd.sql(`DROP SCHEMA IF EXISTS @hk CASCADE`)) })
	h := sd.connAs("hostile")
	if _, err := h.Exec(ctx, sd.sql(hookSetupSQL)); err != nil {
		t.Fatalf("the hostile tables: %v", err)
	}
	sd.exec(`ALTER TABLE @hk.ev_d9 OWNER TO @other; GRANT CREATE ON SCHEMA @hk TO @other`)
	if _, err := sd.connAs("other").Exec(ctx, sd.sql(hookOtherSQL)); err != nil {
		t.Fatalf("the other role's trigger: %v", err)
	}
	// The hooks ran while the tables were filled, as the hostile role:
	// every kind of them, so the recorder works.
	kinds := secValue[[]string](sd, `SELECT array_agg(DISTINCT split_part(hook, ' on ', 1) ORDER BY split_part(hook, ' on ', 1)) FROM @hk.hook_log`)
	for _, k := range []string{"check constraint", "column default", "domain check", "generated column", "index expression",
		"ROW trigger INSERT", "STATEMENT trigger INSERT", "rls"} {
		if !strings.Contains(strings.Join(kinds, "|"), k) {
			t.Errorf("the hook %q did not run while the tables were filled (%v)", k, kinds)
		}
	}
	// A control: the recorder sees a superuser, and every privileged
	// action succeed for it (rolled back).
	sd.exec(`SELECT @hk.hook_rec('control')`)
	if got := secValue[string](sd, `SELECT usr || ' ' || array_to_string(actions, ',') FROM @hk.hook_log WHERE hook = 'control'`); got != strings.Trim(sd.names["@@super"], "'")+" read message,update retention_policy,alter role superuser,set role superuser" {
		t.Fatalf("control as the superuser: %s", got)
	}
	sd.exec(`TRUNCATE @hk.hook_log`)

	// As whom the DDL on the hostile tables ran (DETACH, RENAME, DROP): an
	// event trigger, the superuser's (event triggers are), records it. It
	// fires for every session of the database: it looks at this test's
	// schema only, resolves no name through the session's search_path and
	// never fails a command.
	sd.names["@ddl"] = pgx.Identifier{"sec_ddl_" + sd.tag}.Sanitize()
	sd.names["@drop"] = pgx.Identifier{"sec_drop_" + sd.tag}.Sanitize()
	sd.exec(`CREATE TABLE @hk.ddl_log (tag text, object text, usr name);
		GRANT INSERT ON @hk.ddl_log TO PUBLIC;
		CREATE FUNCTION @hk.ddl_rec() RETURNS event_trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$
		BEGIN
		    IF TG_EVENT = 'sql_drop' THEN
		        INSERT INTO @hk.ddl_log SELECT TG_TAG, d.object_identity, current_user FROM pg_catalog.pg_event_trigger_dropped_objects() d
		         WHERE d.schema_name = @@hk AND d.object_type = 'table';
		    ELSE
		        INSERT INTO @hk.ddl_log SELECT TG_TAG, d.object_identity, current_user FROM pg_catalog.pg_event_trigger_ddl_commands() d
		         WHERE d.schema_name = @@hk;
		    END IF;
		EXCEPTION WHEN OTHERS THEN NULL;
		END $f$;
		CREATE EVENT TRIGGER @ddl ON ddl_command_end WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION @hk.ddl_rec();
		CREATE EVENT TRIGGER @drop ON sql_drop WHEN TAG IN ('DROP TABLE') EXECUTE FUNCTION @hk.ddl_rec()`)
	t.Cleanup(func() {
		_, _ = sd.db.Pool.Exec(context.Background(), sd.sql(`DROP EVENT TRIGGER IF EXISTS @ddl; DROP EVENT TRIGGER IF EXISTS @drop`))
	})

	oid := func(name string) uint32 {
		return secValue[uint32](sd, `SELECT oid FROM pg_class WHERE relnamespace = @@hk::regnamespace AND relname = $1`, name)
	}
	leaves := map[string]uint32{}
	for _, n := range []string{"ev_d10", "ev_d9", "ev_d8", "ev_cut", "lg_d10", "lg_cut", "lg_def"} {
		leaves[n] = oid(n)
	}

	url := sd.db.URL
	if !super {
		sd.login("runner", "admin", sd.roles["hostile"]) // docs/operations.md: the runner may act as each policy owner
		url = sd.urlAs("runner")
	}
	logs := &pgtest.SyncBuffer{}
	conn, err := runner.ConnectURL(url, "hook suite")
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(conn, runner.Options{Schema: sd.db.Schema, Owner: "hook-runner",
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(n int) {
		t.Helper()
		p, _, err := r.RunOnce(ctx)
		if err != nil {
			t.Fatalf("pass %d: %v", n, err)
		}
		t.Logf("pass %d: %+v", n, *p)
		// The policies are due again at once (their interval is a minute).
		sd.exec(`UPDATE @S.retention_pass SET started_at = started_at - interval '1 hour'`)
	}
	pass(1)
	// The runner detached the hostile role's two expired leaves of ev,
	// renamed them as its own, and claimed nothing of the other role's leaf
	// (skipped, with the reason logged) nor of lg (a DEFAULT partition).
	for _, n := range []string{"ev_d10", "ev_d8"} {
		if got := secValue[string](sd, `SELECT coalesce((SELECT relname::text FROM pg_class WHERE oid = $1), 'gone')`, leaves[n]); got != fmt.Sprintf("pgsweep_detached_c%d", leaves[n]) {
			t.Errorf("after the first pass %s is %s, want detached by the runner (pgsweep_detached_c%d)", n, got, leaves[n])
		}
	}
	if !strings.Contains(logs.String(), "partition left to the pass") || !strings.Contains(logs.String(), "ev_d9 is owned by "+other) {
		t.Errorf("the runner did not log the other role's leaf as skipped:\n%s", logs.String())
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @S.retention_unit WHERE owner IS NOT NULL AND leaf = ANY ($1)`,
		[]uint32{leaves["ev_d9"], leaves["lg_d10"], leaves["lg_def"], leaves["lg_cut"], leaves["ev_cut"]}); n != 0 {
		t.Errorf("the runner claimed %d leaves it must not (the other role's, or of a parent with a DEFAULT partition)", n)
	}
	pass(2)
	pass(3)

	// Exactly the expected leaves are gone: the hostile role's expired ones
	// (ev's by the runner, lg's by the pass); the cut-through leaves, the
	// DEFAULT partition and the young rows are kept.
	for _, n := range []string{"ev_d10", "ev_d8", "lg_d10"} {
		if secValue[bool](sd, `SELECT EXISTS (SELECT 1 FROM pg_class WHERE oid = $1)`, leaves[n]) {
			t.Errorf("the expired leaf %s (or its detached table) is still there: %s; depended on by %v", n,
				secValue[string](sd, `SELECT relname::text FROM pg_class WHERE oid = $1`, leaves[n]),
				secValue[[]string](sd, `SELECT coalesce(array_agg(pg_describe_object(classid, objid, objsubid) || ' ' || deptype::text), '{}') FROM pg_depend WHERE refobjid = $1 AND deptype = 'n'`, leaves[n]))
		}
	}
	for _, n := range []string{"ev_cut", "lg_cut", "lg_def"} {
		if !secValue[bool](sd, `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = $1)`, leaves[n]) {
			t.Errorf("the leaf %s was removed", n)
		}
	}
	conc := secValue[[]int64](sd, `SELECT ARRAY[count(*), coalesce(sum(rows_deleted), 0)] FROM @S.retention_passes
		WHERE strategy = 'detach_concurrently' AND policy = 'hk_ev'`)
	if conc[0] != 2 || conc[1] != 20 {
		t.Errorf("the runner's concurrent detaches: %d leaves, %d rows; want ev_d10 and ev_d8, 20 rows (the estimate after ANALYZE)", conc[0], conc[1])
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @S.retention_passes WHERE strategy = 'detach_concurrently' AND policy = 'hk_lg'`); n != 0 {
		t.Errorf("%d concurrent detaches of lg, which has a DEFAULT partition", n)
	}
	// The other role's leaf: never the runner's (the pass decides about it).
	if got := secValue[string](sd, `SELECT coalesce((SELECT relname::text FROM pg_class WHERE oid = $1), 'gone')`, leaves["ev_d9"]); strings.HasPrefix(got, "pgsweep_detached_c") {
		t.Errorf("the other role's leaf was detached by the runner (%s)", got)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @hk.ev WHERE at < now() - interval '7 days' AND tableoid <> $1`, leaves["ev_d9"]); n != 0 {
		t.Errorf("ev: %d expired rows left outside the other role's leaf", n)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @hk.lg WHERE at < now() - interval '7 days'`); n != 0 {
		t.Errorf("lg: %d expired rows left", n)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @hk.ev WHERE at > now() - interval '7 days'`); n != 10 {
		t.Errorf("ev: %d young rows, want 10", n)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @hk.lg WHERE at > now() - interval '7 days'`); n != 20 {
		t.Errorf("lg: %d young rows, want 20", n)
	}

	// Every hook that ran during the passes ran as the owner of its table
	// (the other role's trigger as the other role), and could do nothing
	// privileged. Hooks did run: the pass swept rows of ev_cut and lg_def
	// (row level security, triggers, rules).
	type rec struct {
		hook, usr, sess string
		actions         []string
	}
	rows, err := sd.db.Pool.Query(ctx, sd.sql(`SELECT hook, usr::text, sess::text, actions FROM @hk.hook_log ORDER BY id`))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rec, error) {
		var x rec
		return x, r.Scan(&x.hook, &x.usr, &x.sess, &x.actions)
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, x := range recs {
		want := sd.roles["hostile"]
		// ev_d9 is the other role's: the pass sweeps it as its owner (the
		// policy's owner is a member of it), so every hook on it -- the
		// hostile role's cloned triggers and policy too -- runs as the other.
		if strings.HasPrefix(x.hook, "other's") || strings.HasSuffix(x.hook, "ev_d9") {
			want = other
		}
		if x.usr != want || len(x.actions) > 0 {
			t.Errorf("hook %q ran as %s (session %s) and could %v; want %s and nothing", x.hook, x.usr, x.sess, x.actions, want)
		}
		seen[strings.SplitN(x.hook, " on ", 2)[0]] = true
	}
	for _, k := range []string{"rls", "ROW trigger DELETE", "STATEMENT trigger DELETE", "rule"} {
		if !seen[k] {
			t.Errorf("no %q hook ran during the passes (%d records): the suite would not see one run as the wrong role", k, len(recs))
		}
	}
	// The DDL on the hostile tables -- the runner's DETACH ... CONCURRENTLY,
	// RENAME and DROP of ev_d10 and ev_d8 among it -- ran as their owner.
	ddl := secValue[[]string](sd, `SELECT coalesce(array_agg(tag || ' ' || object || ' as ' || usr ORDER BY tag, object), '{}') FROM @hk.ddl_log`)
	runnerDDL := 0
	for _, x := range ddl {
		if !strings.HasSuffix(x, " as "+sd.roles["hostile"]) {
			t.Errorf("DDL on the hostile tables ran as another role: %s", x)
		}
		for _, n := range []string{"ev_d10", "ev_d8"} {
			if strings.Contains(x, fmt.Sprintf("pgsweep_detached_c%d", leaves[n])) && strings.HasPrefix(x, "DROP TABLE") {
				runnerDDL++
			}
		}
	}
	if runnerDDL != 2 || len(ddl) < 6 {
		t.Errorf("the event trigger saw %d of the runner's 2 drops, %d statements in all: %v", runnerDDL, len(ddl), ddl)
	}
	if secValue[bool](sd, `SELECT rolsuper FROM pg_roles WHERE rolname = $1`, sd.roles["hostile"]) {
		t.Error("the hostile role is a superuser")
	}
	t.Logf("%d hook records, kinds %v", len(recs), seen)
}

// decoySQL makes decoys in @dz (standing for public: its own schema, so
// that tests running meanwhile are not affected) for the comparisons
// pg_catalog has no exact operator for, and for the functions the runner's
// statements call; each call counts in @dz.calls.
const decoySQL = `
GRANT USAGE ON SCHEMA @dz TO PUBLIC;
CREATE SEQUENCE @dz.calls;
GRANT USAGE, UPDATE ON SEQUENCE @dz.calls TO PUBLIC;
DO $d$
DECLARE
    t record;
    op text;
    n int := 0;
BEGIN
    FOR t IN SELECT * FROM (VALUES ('oid', 'integer'), ('oid', 'bigint'), ('real', 'integer'), ('real', 'bigint'),
                                   ('bigint', 'integer'), ('integer', 'bigint'), ('name', 'text'), ('text', 'name'),
                                   ('regclass', 'integer'), ('interval', 'integer'), ('double precision', 'integer'),
                                   ('numeric', 'integer'), ('timestamptz', 'text')) v(l, r) LOOP
        n := n + 1;
        EXECUTE format('CREATE FUNCTION @dz.decoy_%s(%s, %s) RETURNS boolean LANGUAGE sql AS $f$ SELECT pg_catalog.nextval(%L) IS NOT NULL $f$',
                       n, t.l, t.r, '@dz.calls');
        FOREACH op IN ARRAY ARRAY['=', '<>', '<', '>', '<=', '>='] LOOP
            EXECUTE format('CREATE OPERATOR @dz.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = @dz.decoy_%s)', op, t.l, t.r, n);
        END LOOP;
    END LOOP;
END $d$;
CREATE FUNCTION @dz.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $f$ SELECT pg_catalog.nextval('@dz.calls')::text $f$;
CREATE FUNCTION @dz.current_setting(text) RETURNS text LANGUAGE sql AS $f$ SELECT pg_catalog.nextval('@dz.calls')::text $f$;
CREATE FUNCTION @dz.pg_get_userbyid(oid) RETURNS name LANGUAGE sql AS $f$ SELECT pg_catalog.nextval('@dz.calls')::text::name $f$;
CREATE FUNCTION @dz.quote_ident(text) RETURNS text LANGUAGE sql AS $f$ SELECT pg_catalog.nextval('@dz.calls')::text $f$;
`

func TestHookDecoyOperatorsRunnerDetach(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sd.login("hostile")
	dz := "sec_dz_" + sd.tag
	sd.names["@dz"] = pgx.Identifier{dz}.Sanitize()
	sd.exec(`CREATE SCHEMA @dz AUTHORIZATION @hostile`)
	t.Cleanup(func() { _, _ = sd.db.Pool.Exec(context.Background(), sd.sql(`DROP SCHEMA IF EXISTS @dz CASCADE`)) })
	if _, err := sd.connAs("hostile").Exec(ctx, sd.sql(decoySQL)); err != nil {
		t.Fatalf("decoys: %v", err)
	}
	sd.exec(`CREATE TABLE @S.ev (at timestamptz NOT NULL) PARTITION BY RANGE (at);
		CREATE TABLE @S.ev_old1 PARTITION OF @S.ev FOR VALUES FROM (now() - interval '10 days') TO (now() - interval '9 days');
		CREATE TABLE @S.ev_old2 PARTITION OF @S.ev FOR VALUES FROM (now() - interval '9 days') TO (now() - interval '8 days');
		CREATE TABLE @S.ev_new PARTITION OF @S.ev FOR VALUES FROM (now() - interval '8 days') TO (now() + interval '1 day');
		INSERT INTO @S.ev SELECT now() - interval '10 days' + g * interval '1 hour' FROM generate_series(1, 200) g;
		ANALYZE @S.ev_old1; ANALYZE @S.ev_old2;
		SELECT @S.retention_register('ev', '@S.ev', 'at', '7 days')`)

	// The runner's connection, its search_path the decoys' first.
	cfg, err := pgx.ParseConfig(sd.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = dz + ", pg_catalog, public"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	calls := func() int64 {
		return secValue[int64](sd, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM @dz.calls`)
	}
	// Control: the decoys are in effect on this connection -- the count
	// text retention_detach_claim handed out until 0.34 calls them.
	var n *int64
	if err := conn.QueryRow(ctx, `SELECT CASE WHEN c.reltuples >= 0 THEN c.reltuples::bigint END FROM pg_catalog.pg_class c WHERE c.oid = 1259`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	control := calls()
	if control == 0 {
		t.Fatal("control: the old count text called no decoy; the decoys are not in effect")
	}
	c, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: sd.db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.RetentionDetachConcurrently(ctx, "decoy-runner", nil)
	if err != nil || len(d.Errors) > 0 || d.Detached != 2 || d.Rows != 47 {
		t.Fatalf("detach: %+v %v, want 2 leaves detached, 47 rows (23 + 24)", d, err)
	}
	d, err = c.RetentionDetachConcurrently(ctx, "decoy-runner", nil)
	if err != nil || len(d.Errors) > 0 || d.Dropped != 2 {
		t.Fatalf("the next call: %+v %v, want the 2 detached tables dropped", d, err)
	}
	if got := calls(); got != control {
		t.Errorf("the runner's detach called the decoys %d times", got-control)
	}
	// The connection's own settings are back.
	var path, role string
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('search_path'), pg_catalog.current_setting('role')`).Scan(&path, &role); err != nil {
		t.Fatal(err)
	}
	if path != dz+", pg_catalog, public" || role != "none" {
		t.Errorf("after the detach: search_path %q, role %q; want the connection's own", path, role)
	}
	if n := pgtestLeaves(t, sd); n != 1 {
		t.Errorf("%d leaves left, want ev_new", n)
	}
}

func pgtestLeaves(t *testing.T, sd *secDB) int64 {
	t.Helper()
	return secValue[int64](sd, `SELECT count(*) FROM pg_partition_tree('@S.ev') WHERE isleaf`)
}
