package tracingtest

import (
	"context"
	"testing"

	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/internal/pgtest"
)

// Two hops in one trace: the application sends "orders" in its
// transaction; the Worker of orders sends "emails" from its handler; the
// Worker of emails processes it. Every span has the application's trace
// id and the parent the conventions give it; the picture of the trace
// is drawn (traceSVG).
func TestTwoHopsOneTrace(t *testing.T) {
	ctx, db, _ := pgtest.StartQueue(t, 8, "orders", pgsweep.Outbox, 5)
	if err := db.Client.QueueCreate(ctx, "emails", pgsweep.Outbox, 5); err != nil {
		t.Fatal(err)
	}
	r := newRecorder(t)
	c := tracedClient(t, db, r)
	actx, app := r.Tracer("shop").Start(ctx, "place order")
	tx, err := db.Pool.Begin(actx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.WithDB(tx).Send(actx, "orders", pgsweep.Message{Payload: payload}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(actx); err != nil {
		t.Fatal(err)
	}
	app.End()
	runWorker(t, db, "orders", r, func(ctx context.Context, d *pgsweep.Delivery) error {
		_, _, err := c.Send(ctx, "emails", pgsweep.Message{Payload: payload})
		return err
	}, nil, 0)
	runWorker(t, db, "emails", r, func(ctx context.Context, d *pgsweep.Delivery) error {
		_, s := r.Tracer("mailer").Start(ctx, "smtp send")
		s.End()
		return nil
	}, nil, 0)
	r.wait(t, "process orders", 1)
	r.wait(t, "process emails", 1)
	sendOrders := r.one(t, "send orders")
	processOrders := r.one(t, "process orders")
	sendEmails := r.one(t, "send emails")
	processEmails := r.one(t, "process emails")
	childOf(t, sendOrders, app.SpanContext())
	childOf(t, processOrders, sendOrders.SpanContext())
	childOf(t, sendEmails, processOrders.SpanContext())
	childOf(t, processEmails, sendEmails.SpanContext())
	childOf(t, r.one(t, "smtp send"), processEmails.SpanContext())
	writePicture(t, r.rec.Ended(), false)
}
