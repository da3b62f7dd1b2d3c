package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/pgsweep/pgsweep"
)

func runDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlagSet("demo")
	var db dbFlags
	db.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := db.validate(); err != nil {
		return err
	}
	conn, err := db.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := pgsweep.Migrate(ctx, conn, db.schema)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "migrated schema %s to version %d\n\n", db.schema, res.To)

	pool, err := db.pool(ctx, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := pgsweep.NewClient(pool, &pgsweep.ClientOptions{Schema: db.schema})
	if err != nil {
		return err
	}
	return demoLeases(ctx, client, out)
}

// demoLeases shows two replicas contending for leadership: replica-a leads,
// then "crashes" (stops renewing); replica-b takes over only after the
// lease expired, with a higher fencing token.
func demoLeases(ctx context.Context, c *pgsweep.Client, out io.Writer) error {
	const name, ttl = "demo:leader", 2 * time.Second
	owners := []string{"replica-a", "replica-b"}
	fmt.Fprintf(out, "== leases: two replicas contend for %q (ttl %v); replica-a crashes after 3s\n", name, ttl)
	for _, o := range owners { // start clean if the demo ran before
		if _, err := c.LeaseRelease(ctx, name, o); err != nil {
			return err
		}
	}
	start := time.Now()
	crashed := false
	var leader string
	for time.Since(start) < 8*time.Second {
		for _, o := range owners {
			if o == "replica-a" && crashed {
				continue
			}
			tok, ok, err := c.LeaseAcquire(ctx, name, o, ttl)
			if err != nil {
				return err
			}
			if ok && leader != o {
				fmt.Fprintf(out, "%5.1fs  %s is leader (token %d)\n", time.Since(start).Seconds(), o, tok)
				leader = o
			}
		}
		if !crashed && time.Since(start) > 3*time.Second {
			crashed = true
			fmt.Fprintf(out, "%5.1fs  replica-a crashed: it stops renewing and never releases\n", time.Since(start).Seconds())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	ls, err := c.Leases(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nSELECT * FROM leases:")
	for _, l := range ls {
		fmt.Fprintf(out, "  %-14s owner=%-10s token=%d live=%v expires=%s\n", l.Name, l.Owner, l.Token, l.Live, l.ExpiresAt.Format(time.RFC3339))
	}
	_, err = c.LeaseRelease(ctx, name, "replica-b")
	return err
}
