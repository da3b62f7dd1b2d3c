package pgsweep_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// schedCounts: messages sent by schedules and how many distinct slots they
// carry (equal: no slot twice).
func schedCounts(t *testing.T, db *pgtest.DB) (msgs, slots int64) {
	t.Helper()
	msgs = db.Int(t, "SELECT count(*) FROM "+db.Rel("message")+" WHERE key LIKE 'pgsweep-schedule:%'")
	slots = db.Int(t, "SELECT count(DISTINCT key) FROM "+db.Rel("message")+" WHERE key LIKE 'pgsweep-schedule:%'")
	return msgs, slots
}

// TestScheduleExactlyOnceRacing: 8 sessions take steps of the schedules
// part at once, in a loop, on a clock (p_now) that each moves on a second
// at a time, so every slot is found due by several sessions together. Each
// slot of each schedule is sent exactly once: the count of messages equals
// the count of slots schedule_next_times gives for the same span.
func TestScheduleExactlyOnceRacing(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 10, "sched", pgsweep.Outbox, 5)
	t0 := time.Date(2025, 3, 30, 0, 0, 0, 0, time.UTC) // the Berlin spring-forward night
	crons := map[string]string{"s_every": "@every 7 seconds", "s_min": "* * * * *", "s_berlin": "*/2 1-3 * * *", "s_all": "*/3 * * * *"}
	for name, cron := range crons {
		mode := pgsweep.CatchUpAll
		zone := "UTC"
		if name == "s_berlin" {
			zone = "Europe/Berlin"
		}
		if err := c.ScheduleCreate(ctx, name, "sched", cron, &pgsweep.ScheduleOptions{TimeZone: zone, CatchUp: mode}); err != nil {
			t.Fatal(err)
		}
	}
	// start them at t0 (creation took the clock's now)
	db.MustExec(t, "UPDATE "+db.Rel("schedule")+" s SET last_slot = $1, next_at = (SELECT t FROM "+db.Rel("schedule_next_times")+
		"(s.cron, s.time_zone, $1, 1) t)", t0)
	const steps = 2 * 3600 / 20 // two hours across the change, 20 seconds a step
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := db.Pool.Acquire(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Release()
			for i := 1; i <= steps; i++ {
				now := t0.Add(time.Duration(i*20) * time.Second)
				if _, err := conn.Exec(ctx, "SELECT "+db.Rel("_schedule_run")+"($1, 2)", now); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	end := t0.Add(steps * 20 * time.Second)
	var want int64
	for name, cron := range crons {
		zone := "UTC"
		if name == "s_berlin" {
			zone = "Europe/Berlin"
		}
		times, err := c.ScheduleNextTimes(ctx, cron, zone, t0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, ts := range times {
			if !ts.After(end) {
				n++
			}
		}
		got := db.Int(t, "SELECT count(*) FROM "+db.Rel("message")+" WHERE headers ->> 'pgsweep-schedule' = $1", name)
		if got != n {
			t.Errorf("%s (%s): %d messages, want one per slot: %d", name, cron, got, n)
		}
		want += n
	}
	msgs, slots := schedCounts(t, db)
	if msgs != want || slots != want {
		t.Fatalf("%d messages for %d distinct slots, want %d of each", msgs, slots, want)
	}
	t.Logf("8 sessions, %d steps each: %d slots, each sent once", steps, want)
}

// TestScheduleCrashMidStep: a session that locked a due schedule and sent
// its slot inside a transaction dies before committing; the others skip the
// locked row meanwhile, and after the death the slot is sent exactly once.
func TestScheduleCrashMidStep(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 4, "crash", pgsweep.Outbox, 5)
	if err := c.ScheduleCreate(ctx, "c1", "crash", "* * * * *", &pgsweep.ScheduleOptions{CatchUp: pgsweep.CatchUpAll}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	db.MustExec(t, "UPDATE "+db.Rel("schedule")+" SET last_slot = $1::timestamptz, next_at = $1::timestamptz + interval '1 minute'", t0)
	now := t0.Add(5*time.Minute + 30*time.Second)

	victim := pgtest.Conn(t, db.URL)
	var pid int32
	if err := victim.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := victim.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var counts string
	if err := victim.QueryRow(ctx, "SELECT "+db.Rel("_schedule_run")+"($1)::text", now).Scan(&counts); err != nil {
		t.Fatal(err)
	}
	if want := `{"more": false, "sent": 5, "fired": 1, "refused": 0, "skipped": 0}`; counts != want {
		t.Fatalf("the victim's step: %s, want %s", counts, want)
	}
	// meanwhile: the row is locked, another step skips it
	if got := db.Int(t, "SELECT ("+db.Rel("_schedule_run")+"($1) ->> 'sent')::int", now); got != 0 {
		t.Fatalf("a step beside the locked row sent %d", got)
	}
	db.MustExec(t, "SELECT pg_catalog.pg_terminate_backend($1)", pid)
	pgtest.Eventually(t, 10*time.Second, func() error {
		if db.Int(t, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid = $1", pid) != 0 {
			return errors.New("victim still there")
		}
		return nil
	})
	if msgs, _ := schedCounts(t, db); msgs != 0 {
		t.Fatalf("the dead step left %d messages", msgs)
	}
	if got := db.Int(t, "SELECT ("+db.Rel("_schedule_run")+"($1) ->> 'sent')::int", now); got != 5 {
		t.Fatalf("after the crash a step sent %d, want the 5 slots", got)
	}
	if got := db.Int(t, "SELECT ("+db.Rel("_schedule_run")+"($1) ->> 'sent')::int", now); got != 0 {
		t.Fatalf("again: %d", got)
	}
	if msgs, slots := schedCounts(t, db); msgs != 5 || slots != 5 {
		t.Fatalf("%d messages, %d slots; want 5 and 5", msgs, slots)
	}
}

// TestScheduleMaintainRacing: real passes on the real clock. Four sessions
// call maintain() over and over while an '@every 1 second' schedule runs;
// every slot it sent, it sent once, and it kept up.
func TestScheduleMaintainRacing(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 8, "tick", pgsweep.Outbox, 5)
	if err := c.ScheduleCreate(ctx, "tick", "tick", "@every 1 second", &pgsweep.ScheduleOptions{CatchUp: pgsweep.CatchUpAll,
		Payload: json.RawMessage(`{"t": 1}`)}); err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(3500 * time.Millisecond)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := pgtest.Conn(t, db.URL)
			cc, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: db.Schema})
			if err != nil {
				t.Error(err)
				return
			}
			for i := 0; time.Now().Before(stop); i++ {
				if err := cc.Maintain(ctx, fmt.Sprintf("r%d", g), 10*time.Second); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	msgs, slots := schedCounts(t, db)
	if msgs != slots || msgs < 2 {
		t.Fatalf("%d messages for %d slots (want equal, at least 2)", msgs, slots)
	}
	list, err := c.Schedules(ctx)
	if err != nil || len(list) != 1 || list[0].LastID == nil || list[0].NextAt == nil {
		t.Fatalf("schedules: %+v, %v", list, err)
	}
	passes, err := c.MaintenancePasses(ctx, 5)
	if err != nil || len(passes) == 0 || passes[0].Schedules == "" {
		t.Fatalf("passes: %+v, %v", passes, err)
	}
}

// TestScheduleClient: the Client's verbs, their errors, and the rights
// (a worker may not create; a monitor lists but sees no payload).
func TestScheduleClient(t *testing.T) {
	ctx, db, c := pgtest.StartQueue(t, 4, "jobs", pgsweep.Outbox, 5)
	opts := &pgsweep.ScheduleOptions{Payload: json.RawMessage(`{"report": "daily"}`), TimeZone: "Europe/Berlin", Lane: "reports"}
	if err := c.ScheduleCreate(ctx, "daily", "jobs", "0 6 * * MON-FRI", opts); err != nil {
		t.Fatal(err)
	}
	if err := c.ScheduleCreate(ctx, "daily", "jobs", "0 7 * * MON-FRI", opts); err != nil {
		t.Fatalf("re-create (upsert): %v", err)
	}
	list, err := c.Schedules(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("%+v %v", list, err)
	}
	s := list[0]
	if s.Cron != "0 7 * * MON-FRI" || s.TimeZone != "Europe/Berlin" || s.CatchUp != pgsweep.CatchUpLatest || s.Lane != "reports" ||
		s.Paused || s.NextAt == nil || s.NextAt.In(time.UTC).Minute() != 0 {
		t.Fatalf("schedule: %+v", s)
	}
	for _, bad := range []struct{ name, cron, zone, arg string }{
		{"x", "61 * * * *", "", "p_cron"}, {"x", "* * * * *", "Mars/Base", "p_time_zone"}, {"", "* * * * *", "", "p_name"},
	} {
		err := c.ScheduleCreate(ctx, bad.name, "jobs", bad.cron, &pgsweep.ScheduleOptions{TimeZone: bad.zone})
		var pe *pgsweep.Error
		if !errors.Is(err, pgsweep.ErrInvalidArgument) || !errors.As(err, &pe) || !strings.Contains(err.Error(), bad.arg) {
			t.Errorf("%+v: %v, want ErrInvalidArgument naming %s", bad, err, bad.arg)
		}
	}
	if err := c.ScheduleCreate(ctx, "x", "jobs", "* * * * *", &pgsweep.ScheduleOptions{CatchUp: "sometimes"}); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Errorf("catch-up: %v", err)
	}
	if _, err := c.SchedulePause(ctx, "nope"); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Errorf("pause unknown: %v", err)
	}
	if ok, err := c.SchedulePause(ctx, "daily"); !ok || err != nil {
		t.Fatalf("pause: %v %v", ok, err)
	}
	if ok, err := c.SchedulePause(ctx, "daily"); ok || err != nil {
		t.Fatalf("pause again: %v %v", ok, err)
	}
	if ok, err := c.ScheduleResume(ctx, "daily"); !ok || err != nil {
		t.Fatalf("resume: %v %v", ok, err)
	}
	times, err := c.ScheduleNextTimes(ctx, "0 0 29 2 *", "", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), 2)
	if err != nil || len(times) != 2 || times[0].Year() != 2028 || times[1].Year() != 2032 {
		t.Fatalf("next times: %v %v", times, err)
	}

	worker, _ := pgtest.RolePool(t, db, "worker")
	wc, err := pgsweep.NewClient(worker, &pgsweep.ClientOptions{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := wc.ScheduleCreate(ctx, "w", "jobs", "* * * * *", nil); !errors.Is(err, pgsweep.ErrPermissionDenied) {
		t.Errorf("a worker creates: %v, want ErrPermissionDenied", err)
	}
	monitor, _ := pgtest.RolePool(t, db, "monitor")
	mc, err := pgsweep.NewClient(monitor, &pgsweep.ClientOptions{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := mc.Schedules(ctx); err != nil || len(l) != 1 {
		t.Errorf("a monitor lists: %v %v", l, err)
	}
	if _, err := mc.ScheduleDrop(ctx, "daily"); !errors.Is(err, pgsweep.ErrPermissionDenied) {
		t.Errorf("a monitor drops: %v", err)
	}
	if ok, err := c.ScheduleDrop(ctx, "daily"); !ok || err != nil {
		t.Fatalf("drop: %v %v", ok, err)
	}
	if ok, err := c.ScheduleDrop(ctx, "daily"); ok || err != nil {
		t.Fatalf("drop again: %v %v", ok, err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+db.Rel("schedule")).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d left, %v", n, err)
	}
}
