package pgsweep_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// The maintenance statements a runner and the CLI reach through the Client
// (maintenance.go): a pass, reading it back, its progress, recording a
// failure on it, the runner's settings, and the session helpers a runner uses
// to wait for the backend of a pass it gave up on.
func TestClientMaintenance(t *testing.T) {
	ctx, db, c := pgtest.Start(t, 4)

	if _, found, err := c.LatestMaintenancePass(ctx, "m1"); err != nil || found {
		t.Fatalf("latest pass of an owner with none: found %v, err %v", found, err)
	}
	if err := c.Maintain(ctx, "m1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	p, found, err := c.LatestMaintenancePass(ctx, "m1")
	if err != nil || !found {
		t.Fatalf("latest pass: found %v, err %v", found, err)
	}
	if p.Owner != "m1" || p.Duration == nil || p.Recovery == "" || p.Retention == "" || len(p.Counts) == 0 || p.Error != "" {
		t.Fatalf("pass %+v: want m1's finished pass with both parts and counts", p)
	}
	prog, err := c.MaintenanceProgress(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if prog.Pass != p.ID || prog.Steps < 2 {
		t.Fatalf("progress %+v of pass %d: want its two finished parts at least", prog, p.ID)
	}

	// maintain() checks its own arguments: nothing recorded
	err = c.Maintain(ctx, "m1", 2*time.Hour)
	if !errors.Is(err, pgsweep.ErrInvalidArgument) || !strings.Contains(err.Error(), "p_budget") {
		t.Fatalf("budget of 2h: got %v, want ErrInvalidArgument naming p_budget", err)
	}

	// a pass left unfinished (its runner died) is closed by MaintainFailOwner
	if _, err := db.Pool.Exec(ctx, "INSERT INTO "+db.Q()+
		".maintain_pass (owner, started_at, budget) VALUES ('m2', now(), '10 seconds')"); err != nil {
		t.Fatal(err)
	}
	if err := c.MaintainFailOwner(ctx, "m2", "the runner was killed"); err != nil {
		t.Fatal(err)
	}
	p2, found, err := c.LatestMaintenancePass(ctx, "m2")
	if err != nil || !found || p2.Error != "the runner was killed" || p2.Duration == nil {
		t.Fatalf("failed pass %+v (found %v, err %v): want the error recorded and a finish time", p2, found, err)
	}
	ps, err := c.MaintenancePasses(ctx, 1)
	if err != nil || len(ps) != 1 || ps[0].ID != p2.ID {
		t.Fatalf("latest 1 pass: %+v, err %v; want pass %d", ps, err, p2.ID)
	}

	if d, err := c.SettingIntervals(ctx, "runner_interval", "maintain_lease_ttl"); err != nil || len(d) != 2 ||
		d[0] != 10*time.Second || d[1] != time.Minute {
		t.Fatalf("runner_interval, maintain_lease_ttl: %v, %v; want the defaults 10s and 1m, in that order", d, err)
	}
	if _, err := c.SettingIntervals(ctx, "runner_interval", "nope"); !errors.Is(err, pgsweep.ErrInvalidArgument) {
		t.Fatalf("unknown setting: got %v, want ErrInvalidArgument", err)
	}

	// a lease held by an owner is listed, not released, by OwnerLeases
	if _, ok, err := c.LeaseAcquire(ctx, "job", "m3", time.Minute); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if names, err := c.OwnerLeases(ctx, "m3"); err != nil || len(names) != 1 || names[0] != "job" {
		t.Fatalf("owner leases %v, %v; want [job]", names, err)
	}
	if ls, err := c.Leases(ctx); err != nil || len(ls) == 0 || !ls[0].Live {
		t.Fatalf("leases after OwnerLeases: %+v, %v; want the lease still live", ls, err)
	}
}

func TestClientBackendHelpers(t *testing.T) {
	db := pgtest.New(t, 4)
	ctx := context.Background()
	other := pgtest.Conn(t, db.URL)
	oc := db.Client.WithDB(other)
	start, err := oc.BackendStart(ctx)
	if err != nil || start.IsZero() {
		t.Fatalf("backend_start: %v, %v", start, err)
	}
	pid := other.PgConn().PID()
	c := db.Client
	if alive, err := c.BackendAlive(ctx, pid, &start); err != nil || !alive {
		t.Fatalf("alive: %v, %v; want true", alive, err)
	}
	wrong := start.Add(-time.Hour)
	if alive, err := c.BackendAlive(ctx, pid, &wrong); err != nil || alive {
		t.Fatalf("alive with another start time: %v, %v; want false (a reused pid)", alive, err)
	}
	if alive, err := oc.BackendAlive(ctx, pid, nil); err != nil || alive {
		t.Fatalf("a session asking about itself: %v, %v; want false", alive, err)
	}
	if err := c.TerminateBackend(ctx, pid, &start); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, 10*time.Second, func() error {
		alive, err := c.BackendAlive(ctx, pid, &start)
		if err != nil {
			t.Fatal(err)
		}
		if alive {
			return errors.New("the terminated backend is still there")
		}
		return nil
	})
}
