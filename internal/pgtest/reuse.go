package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A fresh install runs every migration: about 2 s of database CPU, most of
// what a short test costs, and most of what `make test` costs on a 2-core
// machine. New therefore hands a test a schema another test of the same
// process has finished with, when that schema is provably a fresh install
// again:
//
//   - when the schema was installed, its pristine state was recorded: the
//     catalog (Signature), the schema's comment, its roles (attributes,
//     memberships, settings, and every dependency pg_shdepend records on
//     them in this database), every table's rows and every sequence;
//   - when the test ends, the catalog and the roles must equal that record
//     exactly (a test that replaced a function, granted a role, created a
//     role named after the schema, scheduled a pg_cron job for it, or
//     changed a table's options fails the comparison), and then every table
//     is truncated and refilled with its pristine rows, every sequence set
//     back, and the tables' statistics cleared, in one transaction with a
//     short lock timeout (a session the test left holding a lock fails it);
//   - anything that fails or differs drops the schema as before (DropSchema).
//
// PGSWEEP_TEST_REUSE=0 turns reuse off: every test then installs afresh.
// Schemas a finished process left in its pool are dropped by the next
// process on the same host (their names carry the host and pid).

type pristine struct {
	sig, roles, comment string
	rows                map[string][]string // table → rows as text
	seqs                map[string]seqValue
}

type seqValue struct {
	last   int64
	called bool
}

type reusable struct {
	schema string
	state  *pristine
}

var reusePool struct {
	mu    sync.Mutex
	free  map[string][]reusable // URL → schemas ready for a test
	n     int
	swept map[string]bool // URL → stale schemas of dead processes dropped
}

// reuseOn says whether New may reuse schemas (PGSWEEP_TEST_REUSE not "0";
// reset also refuses when the test role is not a superuser).
var reuseOn = sync.OnceValue(func() bool { return os.Getenv("PGSWEEP_TEST_REUSE") != "0" })

// hostTag names this host in pooled schema names, so that only this host's
// processes are judged alive or dead by sweepStale.
var hostTag = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	sum := sha256.Sum256([]byte(h))
	return hex.EncodeToString(sum[:3])
})

var pooledName = regexp.MustCompile(`^t_pool_([0-9a-f]{6})_([0-9]+)_[0-9]+$`)

// takeReusable returns a schema from the pool for url (reused), or a new
// name for a fresh install that may go back to the pool afterwards.
func takeReusable(t testing.TB, url string) (r reusable, reused bool) {
	t.Helper()
	reusePool.mu.Lock()
	defer reusePool.mu.Unlock()
	if reusePool.free == nil {
		reusePool.free = map[string][]reusable{}
		reusePool.swept = map[string]bool{}
	}
	if !reusePool.swept[url] {
		reusePool.swept[url] = true
		sweepStale(t, url)
	}
	if free := reusePool.free[url]; len(free) > 0 {
		reusePool.free[url] = free[:len(free)-1]
		return free[len(free)-1], true
	}
	reusePool.n++
	return reusable{schema: fmt.Sprintf("t_pool_%s_%d_%d", hostTag(), os.Getpid(), reusePool.n)}, false
}

// sweepStale drops the pooled schemas that processes of this host left
// behind when they ended.
func sweepStale(t testing.TB, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT nspname::text FROM pg_catalog.pg_namespace WHERE nspname LIKE 't\_pool\_%'`)
	names, err := collectStrings(rows, err)
	if err != nil {
		return
	}
	for _, n := range names {
		m := pooledName.FindStringSubmatch(n)
		if m == nil || m[1] != hostTag() {
			continue
		}
		if pid, _ := strconv.Atoi(m[2]); pid == os.Getpid() || processAlive(pid) {
			continue
		}
		DropSchema(t, url, n)
	}
}

func processAlive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// record reads schema's pristine state, right after its install.
func record(ctx context.Context, conn *pgx.Conn, schema string) (*pristine, error) {
	p := &pristine{rows: map[string][]string{}, seqs: map[string]seqValue{}}
	var err error
	if p.sig, p.roles, p.comment, err = catalogState(ctx, conn, schema); err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT relname::text FROM pg_catalog.pg_class
	   WHERE relnamespace = $1::regnamespace AND relkind IN ('r', 'p') AND NOT relispartition`, pgx.Identifier{schema}.Sanitize())
	tables, err := collectStrings(rows, err)
	if err != nil {
		return nil, err
	}
	for _, tb := range tables {
		var rs []string
		if err := conn.QueryRow(ctx, "SELECT coalesce(pg_catalog.array_agg(t::text), '{}') FROM "+pgx.Identifier{schema, tb}.Sanitize()+" t").Scan(&rs); err != nil {
			return nil, err
		}
		p.rows[tb] = rs
	}
	rows, err = conn.Query(ctx, `SELECT relname::text FROM pg_catalog.pg_class WHERE relnamespace = $1::regnamespace AND relkind = 'S'`,
		pgx.Identifier{schema}.Sanitize())
	seqs, err := collectStrings(rows, err)
	if err != nil {
		return nil, err
	}
	for _, s := range seqs {
		var v seqValue
		if err := conn.QueryRow(ctx, "SELECT last_value, is_called FROM "+pgx.Identifier{schema, s}.Sanitize()).Scan(&v.last, &v.called); err != nil {
			return nil, err
		}
		p.seqs[s] = v
	}
	return p, nil
}

// catalogState is what must be unchanged for a schema to be reused: its
// Signature, its roles and what depends on them, and its comment.
func catalogState(ctx context.Context, conn *pgx.Conn, schema string) (sig, roles, comment string, err error) {
	if sig, err = Signature(ctx, conn, schema); err != nil {
		return "", "", "", err
	}
	// what Signature leaves out (it compares upgrades with fresh installs,
	// which never differ there) but a test could leave behind
	rows, err := conn.Query(ctx, reuseExtra, pgx.Identifier{schema}.Sanitize())
	extra, err := collectStrings(rows, err)
	if err != nil {
		return "", "", "", err
	}
	sig += "\n" + strings.ReplaceAll(strings.Join(extra, "\n"), schema, "SCHEMA")
	like := strings.NewReplacer(`\`, `\\`, `_`, `\_`, `%`, `\%`).Replace(schema) + `\_%`
	rows, err = conn.Query(ctx, `
	  WITH r AS (SELECT * FROM pg_catalog.pg_roles WHERE rolname LIKE $1)
	  SELECT format('role %s super=%s inherit=%s createrole=%s createdb=%s login=%s bypassrls=%s connlimit=%s until=%s config=%s',
	                rolname, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolbypassrls, rolconnlimit,
	                rolvaliduntil, rolconfig) FROM r
	  UNION ALL
	  SELECT format('member %s of %s admin=%s', pg_catalog.pg_get_userbyid(m.member), pg_catalog.pg_get_userbyid(m.roleid), m.admin_option)
	    FROM pg_catalog.pg_auth_members m WHERE m.roleid IN (SELECT oid FROM r) OR m.member IN (SELECT oid FROM r)
	  UNION ALL
	  SELECT format('setting %s %s %s', d.setdatabase, pg_catalog.pg_get_userbyid(d.setrole), d.setconfig)
	    FROM pg_catalog.pg_db_role_setting d WHERE d.setrole IN (SELECT oid FROM r)
	  UNION ALL
	  SELECT format('depends %s %s %s', pg_catalog.pg_get_userbyid(d.refobjid), d.classid::regclass, d.deptype) || ' x' || count(*)
	    FROM pg_catalog.pg_shdepend d
	   WHERE d.refobjid IN (SELECT oid FROM r)
	     AND d.dbid IN (0, (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database()))
	   GROUP BY d.refobjid, d.classid, d.deptype
	  ORDER BY 1`, like)
	lines, err := collectStrings(rows, err)
	if err != nil {
		return "", "", "", err
	}
	var c *string
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.obj_description($1::regnamespace, 'pg_namespace')`, pgx.Identifier{schema}.Sanitize()).Scan(&c); err != nil {
		return "", "", "", err
	}
	if c != nil {
		comment = *c
	}
	return sig, strings.ReplaceAll(strings.Join(lines, "\n"), schema, "SCHEMA"), comment, nil
}

// reuseExtra lists, one line each, the schema's objects and settings that
// Signature does not describe: row-level security and its policies, rules
// on tables, whether each trigger is enabled, operators, collations,
// operator classes and families, extended statistics, sequence parameters,
// and each relation's persistence and replica identity.
const reuseExtra = `
  SELECT format('relation-flags %s rls=%s force=%s persistence=%s replident=%s', relname, relrowsecurity, relforcerowsecurity,
                relpersistence, relreplident) FROM pg_catalog.pg_class WHERE relnamespace = $1::regnamespace
  UNION ALL SELECT format('policy %s %s %s %s', c.relname, p.polname, p.polcmd, p.oid IS NOT NULL)
    FROM pg_catalog.pg_policy p JOIN pg_catalog.pg_class c ON c.oid = p.polrelid WHERE c.relnamespace = $1::regnamespace
  UNION ALL SELECT format('rule %s %s', c.relname, r.rulename)
    FROM pg_catalog.pg_rewrite r JOIN pg_catalog.pg_class c ON c.oid = r.ev_class
   WHERE c.relnamespace = $1::regnamespace AND r.rulename <> '_RETURN'
  UNION ALL SELECT format('trigger-enabled %s %s %s', c.relname, t.tgname, t.tgenabled)
    FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = $1::regnamespace
  UNION ALL SELECT format('operator %s', oid::regoperator) FROM pg_catalog.pg_operator WHERE oprnamespace = $1::regnamespace
  UNION ALL SELECT format('collation %s', collname) FROM pg_catalog.pg_collation WHERE collnamespace = $1::regnamespace
  UNION ALL SELECT format('opclass %s', opcname) FROM pg_catalog.pg_opclass WHERE opcnamespace = $1::regnamespace
  UNION ALL SELECT format('opfamily %s', opfname) FROM pg_catalog.pg_opfamily WHERE opfnamespace = $1::regnamespace
  UNION ALL SELECT format('statistics %s', stxname) FROM pg_catalog.pg_statistic_ext WHERE stxnamespace = $1::regnamespace
  UNION ALL SELECT format('sequence %s %s %s %s %s %s %s', c.relname, s.seqtypid, s.seqstart, s.seqincrement, s.seqmax, s.seqmin, s.seqcycle)
    FROM pg_catalog.pg_sequence s JOIN pg_catalog.pg_class c ON c.oid = s.seqrelid WHERE c.relnamespace = $1::regnamespace
  ORDER BY 1`

// giveBack returns a test's schema to the pool when it is a fresh install
// again (see above), and drops it otherwise.
func giveBack(t testing.TB, url string, r reusable) {
	if err := reset(url, r); err != nil {
		t.Logf("install %s not reused: %v", r.schema, err)
		DropSchema(t, url, r.schema)
		return
	}
	reusePool.mu.Lock()
	reusePool.free[url] = append(reusePool.free[url], r)
	reusePool.mu.Unlock()
}

var errChanged = errors.New("changed")

func reset(url string, r reusable) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var super bool
	if err := conn.QueryRow(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&super); err != nil {
		return err
	}
	if !super {
		return errors.New("the test role is not a superuser: statistics cannot be cleared")
	}
	if cron, err := cronJobs(ctx, conn, r.schema); err != nil || cron > 0 {
		return fmt.Errorf("pg_cron jobs name the schema (%d) %w", cron, err)
	}
	sig, roles, comment, err := catalogState(ctx, conn, r.schema)
	if err != nil {
		return err
	}
	switch {
	case sig != r.state.sig:
		return fmt.Errorf("catalog %w", errChanged)
	case roles != r.state.roles:
		return fmt.Errorf("roles %w:\n%s\n---\n%s", errChanged, roles, r.state.roles)
	case comment != r.state.comment:
		return fmt.Errorf("comment %w", errChanged)
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '2s'; SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		var names []string
		for tb := range r.state.rows {
			names = append(names, pgx.Identifier{r.schema, tb}.Sanitize())
		}
		if _, err := tx.Exec(ctx, "TRUNCATE "+strings.Join(names, ", ")); err != nil {
			return err
		}
		for tb, rs := range r.state.rows {
			if len(rs) == 0 {
				continue
			}
			rel := pgx.Identifier{r.schema, tb}.Sanitize()
			if _, err := tx.Exec(ctx, "INSERT INTO "+rel+" OVERRIDING SYSTEM VALUE SELECT (x::"+rel+").* FROM pg_catalog.unnest($1::text[]) x", rs); err != nil {
				return fmt.Errorf("refill %s: %w", tb, err)
			}
		}
		for s, v := range r.state.seqs {
			if _, err := tx.Exec(ctx, "SELECT pg_catalog.setval($1::regclass, $2, $3)", pgx.Identifier{r.schema, s}.Sanitize(), v.last, v.called); err != nil {
				return err
			}
		}
		q := pgx.Identifier{r.schema}.Sanitize()
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.pg_stat_reset_single_table_counters(c.oid) FROM pg_catalog.pg_class c
		   WHERE c.relnamespace = $1::regnamespace AND c.relkind IN ('r', 'p', 'i', 'S')`, q); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM pg_catalog.pg_statistic s USING pg_catalog.pg_class c
		   WHERE s.starelid = c.oid AND c.relnamespace = $1::regnamespace`, q)
		return err
	})
}

// cronJobs counts the pg_cron jobs of this database whose command names schema.
func cronJobs(ctx context.Context, conn *pgx.Conn, schema string) (int64, error) {
	var present bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass('cron.job') IS NOT NULL`).Scan(&present); err != nil || !present {
		return 0, err
	}
	var n int64
	err := conn.QueryRow(ctx, `SELECT pg_catalog.count(*) FROM cron.job WHERE database = pg_catalog.current_database()
	   AND pg_catalog.strpos(command, $1) > 0`, schema).Scan(&n)
	return n, err
}
