package pgsweep_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

func TestLeaseClient(t *testing.T) {
	db := pgtest.New(t, 4)
	c := db.Client
	ctx := context.Background()

	tok, ok, err := c.LeaseAcquire(ctx, "job", "a", 30*time.Second)
	if err != nil || !ok || tok != 1 {
		t.Fatalf("acquire: %d %v %v", tok, ok, err)
	}
	if _, ok, err := c.LeaseAcquire(ctx, "job", "b", 30*time.Second); err != nil || ok {
		t.Fatalf("second owner acquired a live lease: %v %v", ok, err)
	}
	if ok, err := c.LeaseRenew(ctx, "job", "a", time.Minute); err != nil || !ok {
		t.Fatalf("renew: %v %v", ok, err)
	}
	if ok, err := c.LeaseRelease(ctx, "job", "b"); err != nil || ok {
		t.Fatalf("non-holder release: %v %v", ok, err)
	}
	leases, err := c.Leases(ctx)
	if err != nil || len(leases) != 1 || leases[0].Owner != "a" || !leases[0].Live || leases[0].Token != 1 {
		t.Fatalf("leases: %+v %v", leases, err)
	}
	if !leases[0].ExpiresAt.After(leases[0].AcquiredAt.Add(50 * time.Second)) {
		t.Fatalf("renew did not extend to a minute: %+v", leases[0])
	}
	if ok, err := c.LeaseRelease(ctx, "job", "a"); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	tok, ok, err = c.LeaseAcquire(ctx, "job", "b", 30*time.Second)
	if err != nil || !ok || tok != 2 {
		t.Fatalf("acquire after release: %d %v %v", tok, ok, err)
	}
	names, err := c.LeaseReleaseOwner(ctx, "b")
	if err != nil || len(names) != 1 || names[0] != "job" {
		t.Fatalf("release owner: %v %v", names, err)
	}
}

func TestLeaseClientInvalidArguments(t *testing.T) {
	db := pgtest.New(t, 2)
	c := db.Client
	ctx := context.Background()
	cases := []struct {
		name, owner string
		ttl         time.Duration
	}{
		{"", "a", time.Second},
		{"job", "", time.Second},
		{"job", "a", 500 * time.Millisecond},
		{"job", "a", 2 * time.Hour},
	}
	for _, tc := range cases {
		_, _, err := c.LeaseAcquire(ctx, tc.name, tc.owner, tc.ttl)
		if !errors.Is(err, pgsweep.ErrInvalidArgument) {
			t.Errorf("acquire(%q, %q, %v): got %v, want ErrInvalidArgument", tc.name, tc.owner, tc.ttl, err)
		}
		var pe *pgsweep.Error
		if !errors.As(err, &pe) || pe.Op != "lease_acquire" {
			t.Errorf("error %v does not name the operation", err)
		}
	}
	leases, err := c.Leases(ctx)
	if err != nil || len(leases) != 0 {
		t.Fatalf("failed calls left leases behind: %+v %v", leases, err)
	}
}
