//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/pgsweep/pgsweep/internal/pgtest"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgsweep/pgsweep"
)

// The suite's configuration. Every bound the suite asserts is derived from
// these and documented where it is checked.
const (
	numWorkers = 4
	numRunners = 2

	workerLease  = 5 * time.Second // WorkerOptions.Lease of every worker
	runnerBudget = 2 * time.Second // pgsweep run --budget
	runnerIval   = 2 * time.Second // setting runner_interval
	runnerJitter = 500 * time.Millisecond
	maintainTTL  = 8 * time.Second // setting maintain_lease_ttl
	// The retention policy's own lease (retention_set_lease_ttl; 30 s by
	// default). Shorter than maintain_lease_ttl by more than a renewal
	// period, so that the policy's lease of a killed pass has expired when
	// another runner takes the part over: see TestFaultsBusyPolicyBacklog
	// for what happens otherwise.
	policyTTL     = 3 * time.Second
	maxAttempts   = 8       // of both queues
	eventRows     = 300_000 // eligible rows of the retention policy at the start
	topUpBelow    = 100_000 // before a retention fault, add rows when fewer remain
	topUpRows     = 100_000
	producerBatch = 60                     // messages per producer transaction
	producerTick  = 200 * time.Millisecond // one batch per tick: 300 messages/s
	outboxQueue   = "faults_out"
	inboxQueue    = "faults_in"
	policyName    = "faults_events"
)

// suite is one run: the cluster, the processes, the observer's pool.
type suite struct {
	t       *testing.T
	repo    string
	bin     string // directory of the pgsweep and faultworker binaries
	logs    string // directory of the processes' logs
	dbDir   string // PGSWEEP_DB_DIR of the suite's cluster
	dbPort  string
	dsn     string
	obs     *pgxpool.Pool // the suite's own connections: statement_timeout 0, never terminated
	prod    *producer
	mu      sync.Mutex
	procs   map[string]*proc // current incarnation per slot (w1.., r1..)
	all     []*proc
	failed  []string // what errorf reported, said again after the dumps
	gens    map[string]int
	events  []*event
	httpFor map[string]string // runner slot -> its /healthz address
	// killedRunners are the runners killed with kill -9 (their passes may
	// stay without an end).
	killedRunners []string
	started       time.Time
}

// event is one injected fault.
type event struct {
	Kind     string
	Target   string
	At       time.Time     // when it was injected
	End      time.Time     // when it was over (server back, window closed); At for instant faults
	InFlight int           // messages claimed and not finished when it hit: the most it may duplicate
	Recovery time.Duration // from End until everything it hit was back at work
	Note     string
}

func (s *suite) record(e *event) *event {
	if e.End.IsZero() {
		e.End = e.At
	}
	s.events = append(s.events, e)
	s.t.Logf("fault %d: %s %s", len(s.events), e.Kind, e.Target)
	return e
}

// done logs what a fault's recovery looked like.
func (s *suite) done(e *event) {
	s.t.Logf("   in flight %d; recovered after %v: %s", e.InFlight, e.Recovery.Round(10*time.Millisecond), e.Note)
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

// db runs scripts/db.sh on the suite's own cluster.
func (s *suite) db(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(s.repo, "scripts", "db.sh"), args...)
	cmd.Env = append(os.Environ(), "PGSWEEP_DB_DIR="+s.dbDir, "PGSWEEP_DB_PORT="+s.dbPort)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return "", fmt.Errorf("scripts/db.sh %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// newSuite builds the binaries, starts the suite's cluster, migrates it and
// creates the queues, the bookkeeping tables and the retention backlog.
func newSuite(t *testing.T) *suite {
	repo, err := pgtest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{t: t, repo: repo, bin: t.TempDir(), logs: t.TempDir(), procs: map[string]*proc{}, gens: map[string]int{},
		httpFor: map[string]string{}, killedRunners: []string{}}
	s.dbDir, err = os.MkdirTemp("", "pgsweep-faults-")
	if err != nil {
		t.Fatal(err)
	}
	s.dbPort = freePort(t)

	built := make(chan error, 1)
	go func() {
		cmd := exec.Command("go", "build", "-o", s.bin+"/", "./cmd/pgsweep", "./internal/faults/cmd/faultworker")
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("go build: %v\n%s", err, out)
		}
		built <- err
	}()
	// The cluster is stopped and removed last (cleanups run in reverse).
	t.Cleanup(func() {
		if _, err := s.db("stop"); err != nil {
			t.Logf("stopping the suite's cluster: %v", err)
		}
		if t.Failed() && os.Getenv("PGSWEEP_FAULTS_KEEP") != "" {
			t.Logf("kept the suite's cluster directory %s", s.dbDir)
			return
		}
		_ = os.RemoveAll(s.dbDir)
	})
	s.dsn, err = s.db("start")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no PostgreSQL for the fault suite (CI=%s requires one): %v", os.Getenv("CI"), err)
		}
		t.Skipf("no PostgreSQL for the fault suite: %v", err)
	}
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.repeatFailures) // runs after the dump: the failures last, where a truncated log keeps them
	t.Cleanup(s.dumpOnFailure)
	t.Cleanup(s.killAll)

	if out, err := exec.Command(s.binary("pgsweep"), "migrate", "--database-url", s.dsn).CombinedOutput(); err != nil {
		t.Fatalf("pgsweep migrate: %v\n%s", err, out)
	}
	cfg, err := pgxpool.ParseConfig(s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 3 * time.Second
	// A client's startup parameters win over ALTER DATABASE ... SET: the
	// statement_timeout fault does not reach the suite's own queries.
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "0"
	cfg.ConnConfig.RuntimeParams["application_name"] = "faults-observer"
	s.obs, err = pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.obs.Close)

	// scripts/db.sh's clusters commit asynchronously (fast, not durable). A
	// crash (restart -m immediate) would then lose a handler's committed
	// insert while its message's completion, sent after the restart with
	// the claim's still valid token, survives: no fault of pgsweep's, but
	// it would look like a lost message. fsync stays off (the machine
	// does not crash, only processes do).
	s.exec(`ALTER SYSTEM SET synchronous_commit = on`)
	s.exec(`SELECT pg_reload_conf()`)
	s.exec(fmt.Sprintf(`
		CREATE SCHEMA faults;
		CREATE TABLE faults.sent (queue text NOT NULL, key text NOT NULL, poison boolean NOT NULL,
			at timestamptz NOT NULL DEFAULT clock_timestamp(), PRIMARY KEY (queue, key));
		CREATE TABLE faults.handled (queue text NOT NULL, msg_id bigint NOT NULL, key text, attempt int NOT NULL,
			worker text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE INDEX ON faults.handled (worker, at);
		CREATE INDEX ON faults.handled (queue, key);
		CREATE TABLE faults.events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			created_at timestamptz NOT NULL, pad text NOT NULL);
		INSERT INTO faults.events (created_at, pad)
			SELECT now() - interval '1 day' - i * interval '1 millisecond', repeat('x', 100) FROM generate_series(1, %d) i;
		CREATE INDEX ON faults.events (created_at);
		SELECT pgsweep.queue_create('%s', 'outbox', %d);
		SELECT pgsweep.queue_create('%s', 'inbox', %d);
		SELECT pgsweep.retention_register('%s', 'faults.events', 'created_at', '1 hour');
		SELECT pgsweep.retention_set_lease_ttl('%s', '%d seconds');
		SELECT pgsweep.setting_set('runner_interval', '%d seconds');
		SELECT pgsweep.setting_set('runner_jitter', '%d milliseconds');
		SELECT pgsweep.setting_set('maintain_lease_ttl', '%d seconds');
		SELECT pgsweep.setting_set('recovery_interval', '1 second');
		-- slow retention while faults are injected, so that passes are killed mid-way
		SELECT pgsweep.setting_set('retention_duty_cycle', '1');`,
		eventRows, outboxQueue, maxAttempts, inboxQueue, maxAttempts, policyName, policyName, int(policyTTL/time.Second),
		int(runnerIval/time.Second), int(runnerJitter/time.Millisecond), int(maintainTTL/time.Second)))
	s.exec("VACUUM ANALYZE faults.events")
	s.started = time.Now()
	return s
}

func (s *suite) binary(name string) string { return filepath.Join(s.bin, name) }

// exec runs SQL on the observer's pool or ends the test.
func (s *suite) exec(sql string, args ...any) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := s.obs.Exec(ctx, sql, args...); err != nil {
		s.t.Fatalf("%v\n%s", err, sql)
	}
}

// query scans one row, retrying while the server is unreachable (up to 30 s).
func (s *suite) query(sql string, args []any, dest ...any) {
	s.t.Helper()
	pgtest.Eventually(s.t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.obs.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
			return fmt.Errorf("%w\n%s", err, sql)
		}
		return nil
	})
}

func (s *suite) count(sql string, args ...any) int {
	s.t.Helper()
	var n int
	s.query(sql, args, &n)
	return n
}

// waitUntil polls cond until it holds and returns how long that took; it
// ends the test when limit passes first. Errors (the server is down) count
// as "not yet".
func (s *suite) waitUntil(what string, limit time.Duration, cond func(ctx context.Context) (bool, error)) time.Duration {
	s.t.Helper()
	start := time.Now()
	var last error
	pgtest.Eventually(s.t, limit, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ok, err := cond(ctx)
		if err != nil {
			last = err
		}
		if err != nil || !ok {
			return fmt.Errorf("%s (last error: %v)", what, last)
		}
		return nil
	})
	return time.Since(start)
}

// --- processes ---

// proc is one incarnation of a worker or runner process.
type proc struct {
	kind   string // "worker" or "runner"
	slot   string // w1, r2, ...
	name   string // slot.generation: the owner label
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error // Wait's result, once exited is closed
	http   string
}

func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// spawn starts a new incarnation of slot ("w1" ... a worker, "r1" ... a runner).
func (s *suite) spawn(slot string) *proc {
	s.t.Helper()
	s.mu.Lock()
	s.gens[slot]++
	name := fmt.Sprintf("%s.%d", slot, s.gens[slot])
	s.mu.Unlock()
	p := &proc{slot: slot, name: name, log: filepath.Join(s.logs, name+".log"), exited: make(chan struct{})}
	if strings.HasPrefix(slot, "w") {
		p.kind = "worker"
		p.cmd = exec.Command(s.binary("faultworker"), "--database-url", s.dsn, "--name", name,
			"--queues", outboxQueue+","+inboxQueue, "--lease", workerLease.String())
	} else {
		p.kind = "runner"
		if s.httpFor[slot] == "" {
			s.httpFor[slot] = "127.0.0.1:" + freePort(s.t)
		}
		p.http = s.httpFor[slot]
		p.cmd = exec.Command(s.binary("pgsweep"), "run", "--database-url", s.dsn, "--owner", name,
			"--http-addr", p.http, "--budget", runnerBudget.String(), "--log-format", "json")
	}
	f, err := os.Create(p.log)
	if err != nil {
		s.t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	s.mu.Lock()
	s.procs[slot] = p
	s.all = append(s.all, p)
	s.mu.Unlock()
	return p
}

// live returns the current incarnations of one kind that are running.
func (s *suite) live(kind string) []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ps []*proc
	for _, p := range s.procs {
		if p.kind == kind && p.alive() {
			ps = append(ps, p)
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].slot < ps[j].slot })
	return ps
}

func names(ps []*proc) []string {
	var n []string
	for _, p := range ps {
		n = append(n, p.name)
	}
	return n
}

// kill9 kills p and waits until it is gone.
func (s *suite) kill9(p *proc) {
	s.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// term sends SIGTERM and requires exit status 0 within limit.
func (s *suite) term(p *proc, limit time.Duration) time.Duration {
	s.t.Helper()
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(limit):
		s.t.Fatalf("%s %s did not exit within %v of SIGTERM", p.kind, p.name, limit)
	}
	if p.err != nil {
		s.t.Fatalf("%s %s exited with %v after SIGTERM (want 0)", p.kind, p.name, p.err)
	}
	return time.Since(start)
}

func (s *suite) killAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.all {
		if p.alive() {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
}

// errorf reports a failure (t.Errorf) and keeps it for repeatFailures.
func (s *suite) errorf(format string, args ...any) {
	s.t.Helper()
	msg := fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.failed = append(s.failed, msg)
	s.mu.Unlock()
	s.t.Error(msg)
}

// repeatFailures says the failures again once the dumps are out: a CI log
// cut to its last lines would otherwise show only the dumps.
func (s *suite) repeatFailures() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, msg := range s.failed {
		s.t.Logf("--- failure %d of %d: %s", i+1, len(s.failed), msg)
	}
}

func (s *suite) dumpOnFailure() {
	if !s.t.Failed() {
		return
	}
	s.mu.Lock()
	all := append([]*proc(nil), s.all...)
	s.mu.Unlock()
	for _, p := range all {
		s.t.Logf("--- last lines of %s %s (exit: %v)\n%s", p.kind, p.name, p.err, tail(p.log, 12))
	}
	s.t.Logf("--- last lines of the suite's postgres.log\n%s", tail(filepath.Join(s.dbDir, "postgres.log"), 30))
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// health asks a runner's /healthz.
type health struct {
	Code    int
	Healthy bool   `json:"healthy"`
	Owner   string `json:"owner"`
	LastErr string `json:"last_error"`
	Fails   int    `json:"consecutive_failures"`
	Success string `json:"last_success"`
}

func getHealth(addr string) (health, error) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return health{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return health{}, err
	}
	var h health
	if err := json.Unmarshal(b, &h); err != nil {
		return health{}, fmt.Errorf("/healthz body %q: %w", b, err)
	}
	h.Code = resp.StatusCode
	return h, nil
}

// --- the producer ---

// producer sends producerBatch messages per producerTick in one transaction
// that also records their keys in faults.sent: what committed was sent, and
// a batch whose commit failed is sent again (ON CONFLICT skips the keys that
// did commit). Every fifth message goes to the inbox queue, every 97th is
// poison (always fails, ends dead-lettered).
type producer struct {
	pool     *pgxpool.Pool
	client   *pgsweep.Client
	stopc    chan struct{}
	done     chan struct{}
	batches  atomic.Int64
	failures atomic.Int64
	lastErr  atomic.Value
}

func (s *suite) startProducer() {
	cfg, err := pgxpool.ParseConfig(s.dsn)
	if err != nil {
		s.t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.ConnectTimeout = 3 * time.Second
	cfg.ConnConfig.RuntimeParams["application_name"] = "faults-producer"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(pool.Close)
	client, err := pgsweep.NewClient(pool, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	p := &producer{pool: pool, client: client, stopc: make(chan struct{}), done: make(chan struct{})}
	s.prod = p
	go p.run()
}

func (p *producer) run() {
	defer close(p.done)
	tick := time.NewTicker(producerTick)
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-p.stopc:
			return
		case <-tick.C:
		}
		if err := p.send(n); err != nil {
			p.failures.Add(1)
			p.lastErr.Store(err.Error())
			continue // the same keys again on the next tick
		}
		p.batches.Add(1)
		n += producerBatch
	}
}

func (p *producer) send(first int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	byQueue := map[string][]int{}
	for i := first; i < first+producerBatch; i++ {
		q := outboxQueue
		if i%5 == 4 {
			q = inboxQueue
		}
		byQueue[q] = append(byQueue[q], i)
	}
	c := p.client.WithDB(tx)
	for _, q := range []string{outboxQueue, inboxQueue} {
		var keys []string
		var poison []bool
		for _, i := range byQueue[q] {
			keys = append(keys, fmt.Sprintf("m-%06d", i))
			poison = append(poison, i%97 == 96)
		}
		rows, err := tx.Query(ctx, `INSERT INTO faults.sent (queue, key, poison)
			SELECT $1, k, p FROM unnest($2::text[], $3::bool[]) AS u(k, p) ON CONFLICT DO NOTHING RETURNING key, poison`, q, keys, poison)
		if err != nil {
			return err
		}
		var ms []pgsweep.Message
		for rows.Next() {
			var k string
			var bad bool
			if err := rows.Scan(&k, &bad); err != nil {
				rows.Close()
				return err
			}
			ms = append(ms, pgsweep.Message{Key: k, Payload: []byte(fmt.Sprintf(`{"key":%q,"poison":%t}`, k, bad))})
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ms) == 0 {
			continue
		}
		if _, err := c.SendBatch(ctx, q, ms); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

func (p *producer) stop() {
	close(p.stopc)
	<-p.done
}
