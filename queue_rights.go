package pgsweep

import "context"

// Right is a per-queue right (sql/functions/queue_rights.sql; docs/queues.md,
// "Per-queue rights"). A role's function grants say which verbs it may call
// at all; its rights say on which queues. A call without the right fails
// with an *Error that matches ErrPermissionDenied (SQLSTATE 42501) and
// changes nothing.
type Right string

const (
	// RightSend allows Send and SendBatch.
	RightSend Right = "send"
	// RightConsume allows Claim, ClaimIDs, Renew, Complete, Fail, Release,
	// DeadLetter (the relay) and the Worker.
	RightConsume Right = "consume"
	// RightBrowse allows reading payloads without consuming them (the
	// dashboard's message views).
	RightBrowse Right = "browse"
	// RightManage allows QueueConfigure, QueuePause, QueueResume,
	// QueuePurge, CancelMessages, DeadRequeue, QueueDrop, LaneSkip,
	// queue_recover, QueueGrant and QueueRevoke.
	RightManage Right = "manage"
)

// QueueGrant gives role (a PostgreSQL role name, spelled exactly) rights on
// queue; a right held already stays as it is. The caller needs RightManage
// on queue (and the schema's admin role). An unknown queue, no rights or an
// unknown right is an ErrInvalidArgument and changes nothing.
func (c *Client) QueueGrant(ctx context.Context, queue, role string, rights ...Right) error {
	return c.queueRights(ctx, "queue_grant", queue, role, rights)
}

// QueueRevoke takes rights on queue from role; revoking a right role does
// not hold changes nothing. Only role's own grant goes: a member of another
// role that holds the right keeps it through that role. Revoking the
// defaults (send and consume from the schema's worker role, browse and
// manage from its admin role) makes a queue private. The caller needs
// RightManage on queue.
func (c *Client) QueueRevoke(ctx context.Context, queue, role string, rights ...Right) error {
	return c.queueRights(ctx, "queue_revoke", queue, role, rights)
}

func (c *Client) queueRights(ctx context.Context, op, queue, role string, rights []Right) error {
	names := make([]string, len(rights))
	for i, r := range rights {
		names[i] = string(r)
	}
	// The role name is quoted, so it is read exactly as given (no case
	// folding); an unknown role fails the cast (SQLSTATE 42704).
	_, err := c.db.Exec(ctx, "SELECT "+c.fn(op)+"($1::pg_catalog.text, "+
		"pg_catalog.quote_ident($2::pg_catalog.text)::pg_catalog.regrole, $3::pg_catalog.text[])", queue, role, names)
	return wrapErr(op, err)
}
