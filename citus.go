package pgsweep

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// CitusObject is one row of citus_distribute(): a table or function of the
// install, where it is on the Citus cluster, and whether the call changed it.
type CitusObject struct {
	// Kind is "table" or "function".
	Kind string
	// Name is the table's name or the function's signature.
	Name string
	// Placement is where it is: "distributed by queue", "reference",
	// "local (coordinator)", "delegated by p_queue", "on every node", …
	Placement string
	// Changed is true when this call converted or re-distributed it.
	Changed bool
}

// CitusDistribute distributes the install over a Citus cluster: SELECT *
// FROM <schema>.citus_distribute(), on the coordinator (docs/operations.md,
// "Scaling out with Citus"). Idempotent; call it after every migration.
// Without Citus, or while the owner role cannot log in, the database raises
// SQLSTATE 55000 with a hint that says what to do (in the *pgconn.PgError
// the returned error wraps).
func (c *Client) CitusDistribute(ctx context.Context) ([]CitusObject, error) {
	rows, err := c.db.Query(ctx, "SELECT object_kind, object_name, placement, changed FROM "+c.fn("citus_distribute")+"()")
	if err != nil {
		return nil, wrapErr("citus_distribute", err)
	}
	objs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CitusObject, error) {
		var o CitusObject
		err := r.Scan(&o.Kind, &o.Name, &o.Placement, &o.Changed)
		return o, err
	})
	return objs, wrapErr("citus_distribute", err)
}
