// Package citustest is pgsweep's Citus test tier: tests against a real
// Citus cluster (a coordinator and two workers, scripts/citus.sh, `make
// citus`) that install pgsweep into a schema of the coordinator, distribute
// it with citus_distribute() and prove that the queue verbs run on the
// worker that holds their queue, that claims stay disjoint, that workers,
// retention and leadership behave as on one server, and that a distributed
// install upgrades (docs/operations.md, "Scaling out with Citus").
//
// The tests carry the build tag citus: `make test-citus` (go test -tags
// citus ./internal/citustest/) runs them, `make test` does not. Most tests
// share one distributed install (Shared: an install and citus_distribute
// take about 25 s), each on queues and tables of its own; a test that
// changes the install itself (a migration, citus_distribute, replaced
// functions or views, a shard move, an uninstall) installs into a schema of
// its own (New) and uninstalls at the end. The cluster is shared, so they
// run one at a time.
//
// The cluster is, in order: TEST_CITUS_URL (the coordinator's URL); the one
// `make citus` started (its DSN is in .pgsweep/citus/dsn); or, when Citus is
// installed, one this package starts with scripts/citus.sh. Without Citus the
// tests skip, saying so, unless CI is set: in CI a missing Citus is a
// failure.
package citustest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Node is one node of the cluster.
type Node struct {
	Name    string // coordinator, worker1, worker2 (by port order)
	Host    string
	Port    int
	GroupID int
	URL     string // the coordinator's URL with this node's host and port
}

// Cluster is a running Citus cluster.
type Cluster struct {
	URL         string // the coordinator
	Coordinator Node
	Workers     []Node // primary workers, by port
}

var (
	clusterOnce sync.Once
	clusterVal  *Cluster
	clusterErr  error
	clusterSkip string
)

// Get returns the cluster, or ends the test: it skips only when Citus is not
// installed and CI is unset.
func Get(t testing.TB) *Cluster {
	t.Helper()
	clusterOnce.Do(func() { clusterVal, clusterSkip, clusterErr = find() })
	if clusterSkip != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("no Citus cluster (CI=%s requires one): %s", os.Getenv("CI"), clusterSkip)
		}
		t.Skipf("Citus tier skipped: %s", clusterSkip)
	}
	if clusterErr != nil {
		t.Fatalf("Citus cluster: %v", clusterErr)
	}
	return clusterVal
}

// CitusInstalled reports whether the Citus extension is installed on this
// machine (its control file, for any installed PostgreSQL).
func CitusInstalled() bool {
	for _, pattern := range []string{"/usr/share/postgresql/*/extension/citus.control", "/usr/local/share/postgresql/extension/citus.control",
		"/usr/local/pgsql/share/extension/citus.control"} {
		if m, _ := filepath.Glob(pattern); len(m) > 0 {
			return true
		}
	}
	return false
}

func find() (*Cluster, string, error) {
	if u := os.Getenv("TEST_CITUS_URL"); u != "" {
		c, err := describe(u)
		if err != nil {
			return nil, "", fmt.Errorf("TEST_CITUS_URL is set but unusable: %w", err)
		}
		return c, "", nil
	}
	root, err := pgtest.RepoRoot()
	if err != nil {
		return nil, "", err
	}
	if b, err := os.ReadFile(filepath.Join(root, ".pgsweep", "citus", "dsn")); err == nil {
		if c, err := describe(strings.TrimSpace(string(b))); err == nil {
			return c, "", nil
		}
	}
	if !CitusInstalled() {
		return nil, "Citus is not installed (run ../shared/citus/install.sh as root, or install Citus's packages; then `make citus`)", nil
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "citus.sh"), "start")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, "", fmt.Errorf("scripts/citus.sh start: %v: %s", err, ee.Stderr)
		}
		return nil, "", fmt.Errorf("scripts/citus.sh start: %v", err)
	}
	c, err := describe(strings.TrimSpace(string(out)))
	return c, "", err
}

// describe connects to the coordinator and reads the nodes from pg_dist_node.
func describe(coordinatorURL string) (*Cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, coordinatorURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	var coordinator bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') AND citus_is_coordinator()`).Scan(&coordinator); err != nil {
		return nil, fmt.Errorf("is this a Citus coordinator? %w", err)
	}
	if !coordinator {
		return nil, fmt.Errorf("%s is not a Citus coordinator", pgsweep.RedactSecrets(coordinatorURL))
	}
	rows, err := conn.Query(ctx, `SELECT nodename, nodeport, groupid FROM pg_dist_node
		WHERE noderole = 'primary' AND isactive ORDER BY groupid <> 0, nodeport`)
	if err != nil {
		return nil, err
	}
	type row struct {
		Host  string
		Port  int32
		Group int32
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, err
	}
	c := &Cluster{URL: coordinatorURL}
	for _, n := range nodes {
		u, err := url.Parse(coordinatorURL)
		if err != nil {
			return nil, err
		}
		u.Host = fmt.Sprintf("%s:%d", n.Host, n.Port)
		node := Node{Host: n.Host, Port: int(n.Port), GroupID: int(n.Group), URL: u.String()}
		if n.Group == 0 {
			node.Name = "coordinator"
			node.URL = coordinatorURL
			c.Coordinator = node
			continue
		}
		node.Name = fmt.Sprintf("worker%d", len(c.Workers)+1)
		c.Workers = append(c.Workers, node)
	}
	if len(c.Workers) < 2 {
		return nil, fmt.Errorf("the cluster has %d workers; the Citus tier needs two (scripts/citus.sh starts them)", len(c.Workers))
	}
	return c, nil
}

// WorkerByPort returns the worker that listens on port.
func (c *Cluster) WorkerByPort(port int) (Node, bool) {
	for _, w := range c.Workers {
		if w.Port == port {
			return w, true
		}
	}
	return Node{}, false
}

// Install is one test's own distributed pgsweep install: a schema of the
// coordinator, migrated, its owner role allowed to log in (Citus connects to
// the workers as the role that runs a statement, and pgsweep's functions run
// as the owner), distributed with citus_distribute(), and uninstalled when
// the test ends.
type Install struct {
	*Cluster
	Schema string
	Pool   *pgxpool.Pool
	Client *pgsweep.Client
}

// New installs pgsweep into a fresh schema of the coordinator and
// distributes it.
func New(t testing.TB, maxConns int32) *Install {
	t.Helper()
	in := NewUndistributed(t, maxConns, -1)
	in.Distribute(t)
	return in
}

// NewUndistributed installs pgsweep at version (-1: the latest) into a fresh
// schema of the coordinator, lets its owner log in, and stops there.
func NewUndistributed(t testing.TB, maxConns int32, version int32) *Install {
	t.Helper()
	c := Get(t)
	schema := pgtest.SchemaName(t)
	t.Cleanup(func() { Uninstall(t, c.URL, schema) })
	in, err := install(c, schema, maxConns, version)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Pool.Close)
	return in
}

// install migrates schema on the coordinator to version (-1: the latest),
// lets its owner role log in and opens a pool of maxConns (0: pgx's
// default) on it.
func install(c *Cluster, schema string, maxConns int32, version int32) (*Install, error) {
	// A bound for a loaded machine, never a measurement: an install sends
	// thousands of statements to the workers one at a time (about 15 s on
	// an idle machine, several times that when CI runs make test beside it).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		return nil, fmt.Errorf("connect to the coordinator: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := pgsweep.MigrateTo(ctx, conn, schema, version); err != nil {
		return nil, fmt.Errorf("migrate %s on the coordinator: %w", schema, err)
	}
	if _, err := conn.Exec(ctx, "ALTER ROLE "+pgx.Identifier{schema + "_owner"}.Sanitize()+" LOGIN"); err != nil {
		return nil, fmt.Errorf("let %s_owner log in: %w", schema, err)
	}
	cfg, err := pgxpool.ParseConfig(c.URL)
	if err != nil {
		return nil, err
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	client, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Install{Cluster: c, Schema: schema, Pool: pool, Client: client}, nil
}

// The package's shared distributed install (Shared): made by the first test
// that asks for it, uninstalled by CloseShared when the tests are done.
var shared struct {
	mu     sync.Mutex
	in     *Install
	schema string
	err    error
}

// SharedSchema is the schema of the shared install (Shared): pgsweep, the
// schema the pgTAP files name (TestCitusPgTAP runs them on it).
const SharedSchema = "pgsweep"

// Shared returns the distributed install the package's tests share, making
// it the first time (an install and citus_distribute take about 25 s, most
// of a short test's time). A test on it works on queues, tables and policies
// of its own names (QueuePerWorker with a prefix of its own), asserts only on
// those, and puts back any setting it changes (t.Cleanup): the next test
// finds the install as the one before left it. A test that changes the
// install itself (its functions or views, a migration, citus_distribute,
// an uninstall, a shard move) or asserts on every queue or row of it makes
// its own with New. CloseShared (TestMain) uninstalls it.
func Shared(t testing.TB) *Install {
	t.Helper()
	c := Get(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.in == nil && shared.err == nil {
		shared.schema = SharedSchema
		// A test cluster's own: what an interrupted run left goes first.
		err := uninstall(c.URL, shared.schema)
		var in *Install
		if err == nil || errors.Is(err, pgsweep.ErrNotInstalled) {
			in, err = install(c, shared.schema, 4, -1)
		}
		if err == nil {
			_, err = in.distribute(context.Background())
		}
		if err != nil {
			// CloseShared still uninstalls what was made.
			shared.err = fmt.Errorf("the shared install %s: %w", shared.schema, err)
			if in != nil {
				in.Pool.Close()
			}
		} else {
			shared.in = in
		}
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.in
}

// CloseShared uninstalls the shared install, if a test made one (or tried
// to). TestMain calls it after the tests.
func CloseShared() error {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.schema == "" {
		return nil
	}
	if shared.in != nil {
		shared.in.Pool.Close()
	}
	err := uninstall(clusterVal.URL, shared.schema)
	if errors.Is(err, pgsweep.ErrNotInstalled) {
		err = nil
	}
	shared.in, shared.schema = nil, ""
	return err
}

// Uninstall removes a test's install with pgsweep.Uninstall, in a
// transaction in Citus's sequential mode: Uninstall counts the messages left
// (a multi-shard query) and then drops the schema, and Citus refuses a schema
// command after a parallel multi-shard statement in one transaction
// (TestCitusUninstall shows Uninstall itself on a distributed install).
// Falls back to pgtest.DropSchema.
func Uninstall(t testing.TB, url, schema string) {
	t.Helper()
	if err := uninstall(url, schema); err != nil && !errors.Is(err, pgsweep.ErrNotInstalled) {
		t.Logf("uninstall %s: %v; dropping it by name", schema, err)
		pgtest.DropSchema(t, url, schema)
	}
}

func uninstall(url, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"); err != nil {
		return err
	}
	if _, err := pgsweep.Uninstall(ctx, tx, schema, pgsweep.UninstallOptions{Force: true}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// DistributeRow is one row of citus_distribute()'s result.
type DistributeRow struct {
	Kind, Name, Placement string
	Changed               bool
}

// Distribute calls citus_distribute() as the install's admin role.
func (in *Install) Distribute(t testing.TB) []DistributeRow {
	t.Helper()
	rows, err := in.distribute(context.Background())
	if err != nil {
		t.Fatalf("citus_distribute: %v", err)
	}
	return rows
}

func (in *Install) distribute(ctx context.Context) ([]DistributeRow, error) {
	conn, err := in.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{in.Schema + "_admin"}.Sanitize()); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, "SELECT object_kind, object_name, placement, changed FROM "+in.Q()+".citus_distribute()")
	if err != nil {
		return nil, err
	}
	res, err := pgx.CollectRows(rows, pgx.RowToStructByPos[DistributeRow])
	if err != nil {
		return nil, err
	}
	return res, tx.Commit(ctx)
}

// Q is the install's schema, quoted.
func (in *Install) Q() string { return pgx.Identifier{in.Schema}.Sanitize() }

// Rel is a relation of the install, quoted.
func (in *Install) Rel(name string) string { return pgx.Identifier{in.Schema, name}.Sanitize() }

// WorkerOf returns the worker that holds queue's shard of message.
func (in *Install) WorkerOf(t testing.TB, queue string) Node {
	t.Helper()
	var port int32
	err := in.Pool.QueryRow(context.Background(), `SELECT s.nodeport FROM pg_dist_shard_placement s
		WHERE s.shardid = get_shard_id_for_distribution_column($1::regclass, $2::text)`, in.Schema+".message", queue).Scan(&port)
	if err != nil {
		t.Fatalf("where is queue %s: %v", queue, err)
	}
	w, ok := in.WorkerByPort(int(port))
	if !ok {
		t.Fatalf("queue %s is on port %d, which is no worker", queue, port)
	}
	return w
}

// QueuePerWorker returns one queue name per worker, prefix0, prefix1, …
// chosen so that the i-th name lives on the i-th worker.
func (in *Install) QueuePerWorker(t testing.TB, prefix string) []string {
	t.Helper()
	names := make([]string, len(in.Workers))
	found := 0
	for i := 0; found < len(names) && i < 1000; i++ {
		q := prefix + strconv.Itoa(i)
		w := in.WorkerOf(t, q)
		for k, wk := range in.Workers {
			if wk.Port == w.Port && names[k] == "" {
				names[k] = q
				found++
			}
		}
	}
	if found < len(names) {
		t.Fatalf("no queue name %s<n> on every worker", prefix)
	}
	return names
}

// Exec runs sql on the install's pool or ends the test.
func (in *Install) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := in.Pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// Int runs a query that returns one integer.
func (in *Install) Int(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	return queryInt(t, in.Pool, sql, args...)
}

func queryInt(t testing.TB, db pgsweep.DBTX, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// RemoteCommand is one command the coordinator sent to another node, as
// citus.log_remote_commands reports it.
type RemoteCommand struct {
	SQL  string
	Port int
}

var onServer = regexp.MustCompile(`on server \S+:(\d+) `)

// Traced is a coordinator connection with citus.log_remote_commands on: it
// records every command the coordinator sends to a worker on its behalf.
type Traced struct {
	Conn *pgx.Conn
	mu   sync.Mutex
	cmds []RemoteCommand
}

// NewTraced opens a traced connection to the coordinator.
func (c *Cluster) NewTraced(t testing.TB) *Traced {
	t.Helper()
	cfg, err := pgx.ParseConfig(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &Traced{}
	cfg.RuntimeParams["citus.log_remote_commands"] = "on"
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if !strings.HasPrefix(n.Message, "issuing ") {
			return
		}
		port := 0
		if m := onServer.FindStringSubmatch(n.Detail); m != nil {
			port, _ = strconv.Atoi(m[1])
		}
		tr.mu.Lock()
		tr.cmds = append(tr.cmds, RemoteCommand{SQL: strings.TrimPrefix(n.Message, "issuing "), Port: port})
		tr.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tr.Conn = conn
	return tr
}

// Take returns the commands recorded since the last Take and forgets them.
func (tr *Traced) Take() []RemoteCommand {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	c := tr.cmds
	tr.cmds = nil
	return c
}

// updateStmt finds UPDATE statements and their SET lists in PL/pgSQL source.
var updateStmt = regexp.MustCompile(`(?is)\bUPDATE\s+[\w."]+(?:\s+(?:AS\s+)?\w+)?\s+SET\s+(.*?)\s+(?:WHERE|FROM|RETURNING)\b`)

// arrayFetch is an assignment whose whole value is an element of an array
// variable: `col = v_due[least(m.attempt, v_k)]`.
var arrayFetch = regexp.MustCompile(`(?s)^\s*"?\w+"?\s*=\s*[A-Za-z_][\w.]*\s*\[.*\](?:\s*::\s*[\w ]+)?\s*$`)

// CrashingUpdates lists the functions of the install whose UPDATE statements
// set a column to an array element at the top of the SET expression
// ("SET visible_at = v_due[least(m.attempt, v_k)]"). Citus 13.2.2 takes a
// top-level SubscriptingRef in an UPDATE's target list for an array element
// assignment ("SET a[1] = x", ExpandMergedSubscriptingRefEntries), strips its
// array and dereferences NULL when it deparses the statement: the backend
// dies with signal 11 and the node restarts, on the coordinator or on a
// worker alike. Wrapped in anything (coalesce, CASE) the same value is safe.
// The tests that would run such a function check this first and fail
// instead of crashing a node under the other tests.
func (in *Install) CrashingUpdates(t testing.TB) []string {
	t.Helper()
	rows, err := in.Pool.Query(context.Background(), `SELECT p.oid::regprocedure::text, p.prosrc FROM pg_proc p
		JOIN pg_language l ON l.oid = p.prolang WHERE p.pronamespace = $1::regnamespace AND l.lanname = 'plpgsql' ORDER BY 1`, in.Schema)
	if err != nil {
		t.Fatal(err)
	}
	type fn struct{ Sig, Src string }
	fns, err := pgx.CollectRows(rows, pgx.RowToStructByPos[fn])
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fns {
		for _, m := range updateStmt.FindAllStringSubmatch(f.Src, -1) {
			for _, a := range splitTop(m[1]) {
				if arrayFetch.MatchString(a) {
					out = append(out, fmt.Sprintf("%s: SET %s", strings.TrimPrefix(f.Sig, in.Schema+"."), strings.Join(strings.Fields(a), " ")))
				}
			}
		}
	}
	return out
}

// splitTop splits a SET list at the commas outside parentheses and brackets.
func splitTop(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i, r := range s {
		switch r {
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}
