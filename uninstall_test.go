package pgsweep_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// uninstallFixture is an install made as a DBA would meet it: the role
// <schema>_admin existed before (so the install did not create it and
// uninstall must keep it), a pg_cron job is scheduled when pg_cron is in the
// database, and, when busy, messages are pending, in flight, scheduled and
// waiting to retry.
type uninstallFixture struct {
	url, schema string
	conn        *pgx.Conn
	cron        bool
}

func newUninstallFixture(t *testing.T, busy bool) *uninstallFixture {
	t.Helper()
	ctx := context.Background()
	f := &uninstallFixture{url: pgtest.URL(t), schema: pgtest.SchemaName(t)}
	f.conn = pgtest.Conn(t, f.url)
	admin := pgx.Identifier{f.schema + "_admin"}.Sanitize()
	if _, err := f.conn.Exec(ctx, "CREATE ROLE "+admin+" NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pgtest.DropSchema(t, f.url, f.schema)
		// The role that existed before: an uninstall keeps it.
		if _, err := pgtest.Conn(t, f.url).Exec(context.Background(), "DROP OWNED BY "+admin+"; DROP ROLE "+admin); err != nil &&
			!strings.Contains(err.Error(), "does not exist") {
			t.Errorf("drop %s: %v", admin, err)
		}
	})
	if _, err := pgsweep.Migrate(ctx, f.conn, f.schema); err != nil {
		t.Fatal(err)
	}
	s := pgx.Identifier{f.schema}.Sanitize()
	if err := f.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron')`).Scan(&f.cron); err != nil {
		t.Fatal(err)
	}
	if f.cron {
		// A schedule that does not fire during the test.
		if _, err := f.conn.Exec(ctx, "SELECT "+s+".cron_schedule('0 0 1 1 *')"); err != nil {
			t.Fatal(err)
		}
	}
	if busy {
		for _, q := range []string{
			"SELECT " + s + ".queue_create('orders')",
			"SELECT " + s + ".send('orders', '{\"n\": 1}')",                                       // pending
			"SELECT " + s + ".send('orders', '{\"n\": 2}')",                                       // claimed below: in flight
			"SELECT " + s + ".send('orders', '{\"n\": 3}', '{}', NULL, now() + interval '1 day')", // scheduled
			"SELECT count(*) FROM " + s + ".claim('orders', 'w1', 1)",
		} {
			if _, err := f.conn.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	return f
}

// state describes what an uninstall leaves of the fixture, with the schema
// name replaced so that two fixtures compare equal.
func (f *uninstallFixture) state(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	var schemas int
	if err := f.conn.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = $1", f.schema).Scan(&schemas); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "schema exists: %v\n", schemas == 1)
	rows, err := f.conn.Query(ctx, "SELECT rolname FROM pg_roles WHERE rolname = ANY ($1) ORDER BY 1", pgsweep.RoleNames(f.schema))
	if err != nil {
		t.Fatal(err)
	}
	roles, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "roles: %s\n", strings.Join(roles, " "))
	fmt.Fprintf(&b, "cron jobs: %d\n", f.cronJobs(t))
	return strings.ReplaceAll(b.String(), f.schema, "SCHEMA")
}

func (f *uninstallFixture) cronJobs(t *testing.T) int {
	t.Helper()
	if !f.cron {
		return 0
	}
	var n int
	if err := f.conn.QueryRow(context.Background(), `SELECT count(*) FROM cron.job WHERE jobname LIKE 'pgsweep-maintain:' || left($1, 40) || '%'`,
		f.schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// installedRoles is the install's own record of the roles it created.
func (f *uninstallFixture) installedRoles(t *testing.T) []string {
	t.Helper()
	rows, err := f.conn.Query(context.Background(), "SELECT role_name FROM "+pgx.Identifier{f.schema, "installed_role"}.Sanitize()+" ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	roles, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return roles
}

// wantGone is the state every uninstall leaves: no schema, no role the
// install created, the role that existed before, no cron job.
const wantGone = "schema exists: false\nroles: SCHEMA_admin\ncron jobs: 0\n"

// A busy install is refused, with the counts and what --force would lose,
// and nothing changes (schema, roles, cron job, messages); with Force it goes.
func TestUninstallBusyRefusedThenForced(t *testing.T) {
	f := newUninstallFixture(t, true)
	ctx := context.Background()
	conn := pgtest.Conn(t, f.url)
	before, err := pgtest.Signature(ctx, conn, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	stateBefore := f.state(t)
	if want := "schema exists: true\nroles: SCHEMA_admin SCHEMA_monitor SCHEMA_owner SCHEMA_worker\n"; !strings.HasPrefix(stateBefore, want) {
		t.Fatalf("installed state:\n%s\nwant it to start with\n%s", stateBefore, want)
	}
	if f.cron && f.cronJobs(t) != 1 {
		t.Fatalf("cron job not scheduled: %s", stateBefore)
	}

	res, err := pgsweep.Uninstall(ctx, f.conn, f.schema, pgsweep.UninstallOptions{})
	if !errors.Is(err, pgsweep.ErrMessagesPending) {
		t.Fatalf("busy uninstall: %v, want ErrMessagesPending", err)
	}
	for _, want := range []string{"3 message(s) not yet delivered (1 pending, 1 in flight, 1 scheduled, 0 waiting to retry)",
		"nothing was changed", "--force", "lose"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
	if res.Messages.Live() != 3 {
		t.Errorf("result counts %+v", res.Messages)
	}
	after, err := pgtest.Signature(ctx, conn, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	if after != before || f.state(t) != stateBefore {
		t.Fatalf("a refused uninstall changed the install:\n%s", f.state(t))
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{f.schema, "message"}.Sanitize()).Scan(&n); err != nil || n != 3 {
		t.Fatalf("messages after the refusal: %d %v", n, err)
	}

	res, err = pgsweep.Uninstall(ctx, f.conn, f.schema, pgsweep.UninstallOptions{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.state(t); got != wantGone {
		t.Fatalf("after --force:\n%s\nwant\n%s", got, wantGone)
	}
	want := pgsweep.RoleNames(f.schema)
	if strings.Join(res.Roles, ",") != strings.Join([]string{want[3], want[0], want[2]}, ",") ||
		strings.Join(res.KeptRoles, ",") != want[1] || res.Messages.Live() != 3 || (f.cron && len(res.CronJobs) != 1) {
		t.Fatalf("result %+v", res)
	}
}

// An idle install goes without --force; a dry run before it returns the
// statements and changes nothing; a second uninstall finds nothing.
func TestUninstallIdleAndDryRun(t *testing.T) {
	f := newUninstallFixture(t, false)
	ctx := context.Background()
	conn := pgtest.Conn(t, f.url)
	created := f.installedRoles(t)
	if strings.Join(created, ",") != strings.Join([]string{f.schema + "_monitor", f.schema + "_owner", f.schema + "_worker"}, ",") {
		t.Fatalf("installed_role: %v (the pre-existing _admin must not be listed)", created)
	}
	before, err := pgtest.Signature(ctx, conn, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	stateBefore := f.state(t)

	res, err := pgsweep.Uninstall(ctx, f.conn, f.schema, pgsweep.UninstallOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	script := res.Script()
	s := pgx.Identifier{f.schema}.Sanitize()
	for _, want := range []string{"BEGIN;\n", "DROP SCHEMA " + s + " CASCADE;\n", "DROP OWNED BY \"" + f.schema + "_owner\";\n",
		"DROP ROLE \"" + f.schema + "_worker\";\n", "roles that existed before the install (kept): " + f.schema + "_admin", "COMMIT;\n"} {
		if !strings.Contains(script, want) {
			t.Errorf("dry run lacks %q:\n%s", want, script)
		}
	}
	if strings.Contains(script, "DROP ROLE \""+f.schema+"_admin\"") {
		t.Errorf("dry run drops the pre-existing role:\n%s", script)
	}
	if f.cron && !strings.Contains(script, "SELECT cron.unschedule(") {
		t.Errorf("dry run does not unschedule the cron job:\n%s", script)
	}
	after, err := pgtest.Signature(ctx, conn, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	if after != before || f.state(t) != stateBefore {
		t.Fatalf("the dry run changed the install:\n%s", f.state(t))
	}

	if _, err := pgsweep.Uninstall(ctx, f.conn, f.schema, pgsweep.UninstallOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := f.state(t); got != wantGone {
		t.Fatalf("after uninstall:\n%s\nwant\n%s", got, wantGone)
	}
	if _, err := pgsweep.Uninstall(ctx, f.conn, f.schema, pgsweep.UninstallOptions{}); !errors.Is(err, pgsweep.ErrNotInstalled) {
		t.Fatalf("second uninstall: %v, want ErrNotInstalled", err)
	}
}

// A schema that is not a pgsweep install is never dropped.
func TestUninstallRefusesForeignSchema(t *testing.T) {
	url := pgtest.URL(t)
	schema := pgtest.SchemaName(t)
	conn := pgtest.Conn(t, url)
	ctx := context.Background()
	t.Cleanup(func() { pgtest.DropSchema(t, url, schema) })
	id := pgx.Identifier{schema}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+id+"; CREATE TABLE "+id+".t (id int); INSERT INTO "+id+".t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	_, err := pgsweep.Uninstall(ctx, conn, schema, pgsweep.UninstallOptions{Force: true})
	if !errors.Is(err, pgsweep.ErrNotInstalled) || !strings.Contains(err.Error(), "not a pgsweep install") {
		t.Fatalf("uninstall of a foreign schema: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+id+".t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the foreign schema's table: %d %v", n, err)
	}
}

// A role the install created that was granted something in another
// database cannot be dropped: the uninstall fails as a whole, naming the
// role and the database, and changes nothing; once the DBA revoked it there,
// it goes through.
func TestUninstallRoleWithPrivilegesElsewhere(t *testing.T) {
	f := newUninstallFixture(t, false)
	ctx := context.Background()
	other, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	other.Path = "/postgres"
	oconn, err := pgx.Connect(ctx, other.String())
	if err != nil {
		t.Skipf("no database postgres to grant in: %v", err)
	}
	defer oconn.Close(ctx)
	worker := pgx.Identifier{f.schema + "_worker"}.Sanitize()
	if _, err := oconn.Exec(ctx, "GRANT USAGE ON SCHEMA public TO "+worker); err != nil {
		t.Fatal(err)
	}
	revoke := func() {
		if _, err := oconn.Exec(ctx, "REVOKE USAGE ON SCHEMA public FROM "+worker); err != nil {
			t.Error(err)
		}
	}
	stateBefore := f.state(t)
	_, err = pgsweep.Uninstall(ctx, f.conn, f.schema, pgsweep.UninstallOptions{})
	if err == nil {
		revoke()
		t.Fatal("uninstall dropped a role that has privileges in database postgres")
	}
	for _, want := range []string{"role " + f.schema + "_worker cannot be dropped", "database postgres", "nothing was changed", "DROP OWNED BY"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	if got := f.state(t); got != stateBefore {
		t.Errorf("the failed uninstall changed the install:\n%s\nwas\n%s", got, stateBefore)
	}
	revoke()
	if _, err := pgsweep.Uninstall(ctx, f.conn, f.schema, pgsweep.UninstallOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := f.state(t); got != wantGone {
		t.Fatalf("after uninstall:\n%s", got)
	}
}

// sql/uninstall.sql, run with psql, refuses a busy install as the binary
// does (nothing changed), and with force=1 leaves exactly what
// pgsweep.Uninstall leaves of an identical install.
func TestUninstallScriptMatchesBinary(t *testing.T) {
	psql := uninstallPsql(t)
	script, err := filepath.Abs(filepath.Join("sql", "uninstall.sql"))
	if err != nil {
		t.Fatal(err)
	}
	viaScript := newUninstallFixture(t, true)
	viaBinary := newUninstallFixture(t, true)
	before := viaScript.state(t)

	out, err := runPsqlScript(t, psql, viaScript.url, script, "-v", "schema="+viaScript.schema)
	if err == nil {
		t.Fatalf("the script uninstalled a busy install:\n%s", out)
	}
	for _, want := range []string{"messages are pending", "3 message(s) not yet delivered (1 pending, 1 in flight, 1 scheduled, 0 waiting to retry)",
		"nothing was changed", "force=1", "lose"} {
		if !strings.Contains(out, want) {
			t.Errorf("the script's refusal lacks %q:\n%s", want, out)
		}
	}
	if got := viaScript.state(t); got != before {
		t.Fatalf("a refused script changed the install:\n%s", got)
	}

	if out, err := runPsqlScript(t, psql, viaScript.url, script, "-v", "schema="+viaScript.schema, "-v", "force=1"); err != nil {
		t.Fatalf("script with force=1: %v\n%s", err, out)
	} else if !strings.Contains(out, "uninstalled from schema "+viaScript.schema) {
		t.Errorf("the script's report:\n%s", out)
	}
	if _, err := pgsweep.Uninstall(context.Background(), viaBinary.conn, viaBinary.schema, pgsweep.UninstallOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	gotScript, gotBinary := viaScript.state(t), viaBinary.state(t)
	if gotScript != gotBinary || gotScript != wantGone {
		t.Fatalf("script left\n%s\nbinary left\n%s\nwant\n%s", gotScript, gotBinary, wantGone)
	}

	// Not an install: refused, nothing dropped.
	if out, err := runPsqlScript(t, psql, viaScript.url, script, "-v", "schema="+viaScript.schema); err == nil ||
		!strings.Contains(out, "pgsweep is not installed there") {
		t.Fatalf("script on a missing schema: %v\n%s", err, out)
	}
}

// uninstallPsql finds psql as readme_test.go does: on PATH, else the Debian
// location; missing, the test fails under CI and is skipped otherwise.
func uninstallPsql(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	const debian = "/usr/lib/postgresql/15/bin/psql"
	if _, err := os.Stat(debian); err == nil {
		return debian
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("psql is not on PATH nor at %s (CI=%s requires it)", debian, os.Getenv("CI"))
	}
	t.Skipf("psql is not on PATH nor at %s", debian)
	return ""
}

// runPsqlScript runs file with psql as a DBA would and returns its output
// (stdout and stderr).
func runPsqlScript(t *testing.T, psql, dbURL, file string, vars ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"-X", "-d", dbURL}, vars...)
	cmd := exec.CommandContext(ctx, psql, append(args, "-f", file)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
