package pgsweep_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// hookFixture is a hostile role's schema (@hk): hk.try records current_user
// and tries privileged actions, recording each that succeeds; arm puts a
// call to it in every hook a table can run code from.
const hookFixture = `
CREATE TABLE @hk.log (who text, hook text, what text);
GRANT INSERT ON @hk.log TO PUBLIC;
CREATE FUNCTION @hk.try(p_hook text) RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO @hk.log VALUES (current_user, p_hook, 'ran');
    BEGIN
        PERFORM count(*) FROM @S.message;
        INSERT INTO @hk.log VALUES (current_user, p_hook, 'SUCCEEDED: read the messages');
    EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN
        UPDATE @S.retention_policy SET owner = 'postgres'::regrole;
        INSERT INTO @hk.log VALUES (current_user, p_hook, 'SUCCEEDED: re-pointed retention_policy');
    EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN
        EXECUTE format('ALTER ROLE %I SUPERUSER', session_user);
        INSERT INTO @hk.log VALUES (current_user, p_hook, 'SUCCEEDED: ALTER ROLE SUPERUSER');
    EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN
        PERFORM set_config('role', 'none', true);
        INSERT INTO @hk.log VALUES (current_user, p_hook, 'SUCCEEDED: RESET ROLE');
    EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN
        PERFORM @S.retention_register_proved('@hk.log'::regclass, 'hk_evil', '@hk.log'::regclass, 'at', '0 seconds',
                                             NULL, NULL, 1000, 'exclusive', '1 minute');
        INSERT INTO @hk.log VALUES (current_user, p_hook, 'SUCCEEDED: registered a policy with a forged proof');
    EXCEPTION WHEN OTHERS THEN NULL; END;
    BEGIN
        PERFORM @S.lease_renew('maintain:retention', 'x', '1 hour');
        INSERT INTO @hk.log VALUES (current_user, p_hook, 'SUCCEEDED: renewed a pgsweep lease');
    EXCEPTION WHEN OTHERS THEN NULL; END;
    RETURN true;
END $f$;
CREATE FUNCTION @hk.trg() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN PERFORM @hk.try(TG_NAME); RETURN CASE WHEN TG_LEVEL = 'ROW' THEN OLD END; END $f$;
CREATE FUNCTION @hk.hook_imm(p_v int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $f$ BEGIN PERFORM @hk.try('index'); RETURN p_v; END $f$;
CREATE FUNCTION @hk.hook_int(p_hook text) RETURNS int LANGUAGE plpgsql AS $f$ BEGIN PERFORM @hk.try(p_hook); RETURN 1; END $f$;
CREATE DOMAIN @hk.kind AS text CHECK (@hk.try('domain'));
CREATE FUNCTION @hk.arm(p_table text, p_rows boolean) RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
    IF p_rows THEN
        EXECUTE format('CREATE TRIGGER b_row BEFORE DELETE ON %s FOR EACH ROW EXECUTE FUNCTION @hk.trg()', p_table);
        EXECUTE format('CREATE TRIGGER a_row AFTER DELETE ON %s FOR EACH ROW EXECUTE FUNCTION @hk.trg()', p_table);
    END IF;
    EXECUTE format('CREATE TRIGGER b_stmt BEFORE DELETE ON %s FOR EACH STATEMENT EXECUTE FUNCTION @hk.trg()', p_table);
    EXECUTE format('CREATE TRIGGER a_stmt AFTER DELETE ON %s FOR EACH STATEMENT EXECUTE FUNCTION @hk.trg()', p_table);
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', p_table);
    EXECUTE format('CREATE POLICY hook ON %s USING (@hk.try(''rls''))', p_table);
END $f$;
CREATE TABLE @hk.plain (id int NOT NULL, at timestamptz NOT NULL, kind @hk.kind,
    c int CHECK (@hk.try('check') IS NOT NULL), d int DEFAULT @hk.hook_int('default'),
    g int GENERATED ALWAYS AS (@hk.hook_imm(id)) STORED);
CREATE INDEX ON @hk.plain (@hk.hook_imm(id));
CREATE INDEX ON @hk.plain (at);
CREATE RULE also AS ON DELETE TO @hk.plain DO ALSO SELECT @hk.try('rule');
SELECT @hk.arm('@hk.plain', true);
CREATE TABLE @hk.parted (id int NOT NULL, at timestamptz NOT NULL, kind @hk.kind) PARTITION BY RANGE (at);
CREATE TABLE @hk.parted_old PARTITION OF @hk.parted FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-01-02 00:00+00');
CREATE TABLE @hk.parted_def PARTITION OF @hk.parted DEFAULT;
SELECT @hk.arm('@hk.parted', true);
SELECT @hk.arm(x, false) FROM unnest(ARRAY['@hk.parted_old', '@hk.parted_def']) x;
INSERT INTO @hk.plain (id, at, kind) SELECT g, now() - (g - 0.5) * interval '1 hour', 'a' FROM generate_series(1, 48) g;
INSERT INTO @hk.parted (id, at, kind) SELECT g, '2020-01-01 00:00+00'::timestamptz + g * interval '1 hour', 'a' FROM generate_series(0, 9) g;
INSERT INTO @hk.parted (id, at, kind) SELECT g, now() - g * interval '1 day', 'a' FROM generate_series(10, 14) g;
INSERT INTO @hk.parted (id, at, kind) VALUES (15, now() - interval '1 hour', 'a');
TRUNCATE @hk.log;
`

// TestHookSuiteMaintain: the hook suite (sql/tests/security_hooks.sql) under
// CALL maintain() -- which commits, so it cannot run in pgTAP -- as an admin
// login (a member of the tables' owner) and as a superuser, with a
// partition to detach and drop. Every hook runs as the tables' owner and
// no privileged action succeeds.
func TestHookSuiteMaintain(t *testing.T) {
	t.Parallel()
	sd := newSecDB(t)
	ctx := context.Background()
	hostile := sd.login("hostile", "admin")
	sd.login("runner", "admin", hostile)
	hk := "sec_hk_" + sd.tag
	sd.names["@hk"] = `"` + hk + `"`
	sd.exec(`CREATE SCHEMA @hk AUTHORIZATION @hostile; GRANT USAGE ON SCHEMA @hk TO PUBLIC`)
	t.Cleanup(func() { _, _ = sd.db.Pool.Exec(context.Background(), sd.sql(`DROP SCHEMA @hk CASCADE`)) })
	hc := sd.connAs("hostile")
	if _, err := hc.Exec(ctx, sd.sql(hookFixture)); err != nil {
		t.Fatal(err)
	}
	if _, err := hc.Exec(ctx, sd.sql(`SELECT @S.retention_register('hk_plain', '@hk.plain', 'at', '1 day', p_batch_size => 10);
		SELECT @S.retention_register('hk_parted', '@hk.parted', 'at', '1 day', p_batch_size => 10);
		SELECT @S.retention_set_filter('hk_plain', 'kind', '{a,b}');
		SELECT @S.retention_set_filter('hk_plain', NULL, NULL);`)); err != nil {
		t.Fatal(err)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @hk.log`); n != 0 {
		t.Errorf("registration and the filter ran %d hooks, want none", n)
	}

	// the admin's pass: deletes and detaches
	if _, err := sd.connAs("runner").Exec(ctx, sd.sql(`CALL @S.maintain('hk-admin', '30 seconds')`)); err != nil {
		t.Fatal(err)
	}
	// the superuser's pass: the detached leaf is dropped; fresh rows deleted
	sd.exec(`CREATE TABLE @hk.kept AS SELECT * FROM @hk.log`)
	if _, err := hc.Exec(ctx, sd.sql(`INSERT INTO @hk.plain (id, at, kind) SELECT g, now() - g * interval '1 day', 'a' FROM generate_series(100, 104) g`)); err != nil {
		t.Fatal(err)
	}
	// the hostile's own INSERT ran its hooks in its own session: not ours to judge
	sd.exec(`TRUNCATE @hk.log; INSERT INTO @hk.log SELECT * FROM @hk.kept`)
	sd.exec(`UPDATE @S.retention_pass SET started_at = started_at - interval '1 hour' WHERE policy = 'hk_plain'`) // due again
	if _, err := pgtest.Conn(t, sd.db.URL).Exec(ctx, sd.sql(`CALL @S.maintain('hk-su', '30 seconds')`)); err != nil {
		t.Fatal(err)
	}

	if got := secValue[string](sd, `SELECT coalesce(string_agg(policy || ': ' || error, '; '), '') FROM @S.retention_pass WHERE policy LIKE 'hk_%' AND error IS NOT NULL`); got != "" {
		t.Errorf("passes recorded errors: %s", got)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @hk.plain WHERE at < now() - interval '1 day'`); n != 0 {
		t.Errorf("%d expired rows of the plain table left", n)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @hk.plain`); n != 24 {
		t.Errorf("the plain table holds %d rows, want its 24 young ones", n)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM pg_class WHERE relnamespace = '`+hk+`'::regnamespace
		AND (relname = 'parted_old' OR relname LIKE 'pgsweep_detached_%')`); n != 0 {
		t.Errorf("the expired leaf was not detached and dropped (%d tables left)", n)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @hk.parted_def`); n != 1 {
		t.Errorf("the default partition holds %d rows, want its 1 young one", n)
	}
	hooks := secValue[string](sd, `SELECT coalesce(string_agg(DISTINCT hook, ',' ORDER BY hook), '') FROM @hk.log`)
	for _, h := range []string{"a_row", "a_stmt", "b_row", "b_stmt", "rls", "rule"} {
		if !strings.Contains(","+hooks+",", ","+h+",") {
			t.Errorf("hook %s never ran (ran: %s): the suite cannot see it", h, hooks)
		}
	}
	if got := secValue[string](sd, `SELECT coalesce(string_agg(DISTINCT who, ', '), '') FROM @hk.log`); got != hostile {
		t.Errorf("hooks ran as %q, want only the tables' owner %q", got, hostile)
	}
	if got := secValue[string](sd, `SELECT coalesce(string_agg(DISTINCT who || ': ' || what, '; '), '') FROM @hk.log WHERE what <> 'ran'`); got != "" {
		t.Errorf("privileged actions succeeded: %s", got)
	}
	if got := secValue[string](sd, fmt.Sprintf(`SELECT coalesce(string_agg(rolname, ','), '') FROM pg_roles WHERE rolsuper AND rolname IN (%s)`,
		"'"+hostile+"','"+sd.roles["runner"]+"'")); got != "" {
		t.Errorf("roles became superusers: %s", got)
	}
	if n := secValue[int64](sd, `SELECT count(*) FROM @S.retention_policy WHERE owner = 'postgres'::regrole OR name = 'hk_evil'`); n != 0 {
		t.Errorf("%d policies re-pointed or forged", n)
	}
}
