package pgsweep

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Lease is one row of the pgsweep.leases view.
type Lease struct {
	// Name is the lease's name, e.g. retention:<policy> or maintain:<part>.
	Name  string
	Owner string // empty when released
	// Token is the fencing token of the latest tenure. The first tenure gets
	// 1 and each new one (after expiry or release) the next number; renewing
	// keeps it. It never decreases.
	Token int64
	// AcquiredAt is when the latest tenure began (database clock).
	AcquiredAt time.Time
	// ExpiresAt is when the tenure lapses unless renewed (database clock). A
	// release ends it at once: ExpiresAt becomes the release time if earlier.
	ExpiresAt time.Time
	// Live is true when an owner holds the lease and ExpiresAt is after the
	// database clock at the time of the query.
	Live bool
}

// LeaseAcquire tries to take or extend the lease name for owner for ttl
// (1 second to 1 hour). It returns the lease's fencing token and true when
// owner holds it now, or 0 and false while another owner's lease is live.
func (c *Client) LeaseAcquire(ctx context.Context, name, owner string, ttl time.Duration) (int64, bool, error) {
	var token *int64
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("lease_acquire")+"($1, $2, $3)", name, owner, ttl).Scan(&token)
	if err != nil {
		return 0, false, wrapErr("lease_acquire", err)
	}
	if token == nil {
		return 0, false, nil
	}
	return *token, true, nil
}

// LeaseRenew extends owner's live lease to ttl from now. It returns false when
// owner no longer holds a live lease (it lapsed or was taken over).
func (c *Client) LeaseRenew(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	var ok bool
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("lease_renew")+"($1, $2, $3)", name, owner, ttl).Scan(&ok)
	return ok, wrapErr("lease_renew", err)
}

// LeaseRelease gives up owner's lease so another owner can take it at once.
// It returns false, changing nothing, when owner does not hold it.
func (c *Client) LeaseRelease(ctx context.Context, name, owner string) (bool, error) {
	var ok bool
	err := c.db.QueryRow(ctx, "SELECT "+c.fn("lease_release")+"($1, $2)", name, owner).Scan(&ok)
	return ok, wrapErr("lease_release", err)
}

// LeaseReleaseOwner releases every lease owner holds and returns their names.
func (c *Client) LeaseReleaseOwner(ctx context.Context, owner string) ([]string, error) {
	rows, err := c.db.Query(ctx, "SELECT "+c.fn("lease_release_owner")+"($1)", owner)
	if err != nil {
		return nil, wrapErr("lease_release_owner", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return names, wrapErr("lease_release_owner", err)
}

// Leases lists every lease, live or not, ordered by name.
func (c *Client) Leases(ctx context.Context) ([]Lease, error) {
	rows, err := c.db.Query(ctx, leaseColumns+c.q+".leases ORDER BY name")
	if err != nil {
		return nil, wrapErr("leases", err)
	}
	ls, err := pgx.CollectRows(rows, scanLease)
	return ls, wrapErr("leases", err)
}

// leaseColumns are a Lease's columns of the leases view and of
// browse_leases, read by scanLease.
const leaseColumns = "SELECT name, coalesce(owner, ''), token, acquired_at, expires_at, live FROM "

func scanLease(r pgx.CollectableRow) (Lease, error) {
	var l Lease
	err := r.Scan(&l.Name, &l.Owner, &l.Token, &l.AcquiredAt, &l.ExpiresAt, &l.Live)
	return l, err
}
