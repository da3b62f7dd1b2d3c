package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pgsweep/pgsweep"
)

// queueUsage is the usage line of `pgsweep queue`.
const queueUsage = `usage: pgsweep queue pause|resume|purge|drop|stats|grant|revoke [flags]
  pause  --queue Q            claims of Q return nothing until resume (sends go on)
  resume --queue Q            claims of Q take messages again
  purge  --queue Q            delete Q's pending messages (due, scheduled, waiting in a lane)
  drop   --queue Q [--force]  remove Q and everything of it; refused while a message is in flight, unless --force
  stats  [--queue Q] [--lanes N] [--json]
                              queue_stats (of Q, or of every queue), and up to N lanes of Q (lane_stats)
  grant  --queue Q --role R --rights send,consume,browse,manage
                              give role R those rights on Q (needs manage on Q; docs/queues.md, "Per-queue rights")
  revoke --queue Q --role R --rights ...
                              take them from R (a right R does not hold: nothing happens)
Every subcommand takes --database-url and --schema.`

// runQueue is `pgsweep queue …`: the queue operations of queue_ops.sql and
// the queue and lane statistics, from the command line (the admin role's
// verbs; stats needs the monitor role).
func runQueue(ctx context.Context, args []string, out io.Writer) error {
	subs := map[string]bool{"pause": true, "resume": true, "purge": true, "drop": true, "stats": true, "grant": true, "revoke": true}
	if len(args) == 0 || !subs[args[0]] {
		fmt.Fprintln(out, queueUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return nil
		}
		if len(args) == 0 {
			return fmt.Errorf("%w: want pause, resume, purge, drop, stats, grant or revoke", errUsage)
		}
		return fmt.Errorf("%w: unknown subcommand %q: want pause, resume, purge, drop, stats, grant or revoke", errUsage, args[0])
	}
	sub := args[0]
	fs, db := newDBFlagSet("queue " + sub)
	queue := fs.String("queue", "", "the queue")
	var force *bool
	var lanes *int
	var asJSON *bool
	var role, rights *string
	switch sub {
	case "drop":
		force = fs.Bool("force", false, "drop it even while messages are in flight (their workers' calls then fail)")
	case "stats":
		lanes = fs.Int("lanes", 10, "with --queue: show up to this many of its lanes, blocked and oldest first (0: none; at most 10000)")
		asJSON = fs.Bool("json", false, "print JSON for scripts")
	case "grant", "revoke":
		role = fs.String("role", "", "the role (its exact name)")
		rights = fs.String("rights", "", "comma-separated rights: send, consume, browse, manage")
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := db.validate(); err != nil {
		return err
	}
	if sub != "stats" && *queue == "" {
		return fmt.Errorf("%w: --queue is required", errUsage)
	}
	if (sub == "grant" || sub == "revoke") && (*role == "" || *rights == "") {
		return fmt.Errorf("%w: --role and --rights are required", errUsage)
	}
	if sub == "stats" && (*lanes < 0 || *lanes > 10000) {
		return fmt.Errorf("%w: --lanes must be between 0 and 10000, got %d", errUsage, *lanes)
	}
	conn, err := db.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	c, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: db.schema})
	if err != nil {
		return err
	}
	switch sub {
	case "pause":
		changed, err := c.QueuePause(ctx, *queue)
		if err != nil {
			return withHint(err)
		}
		if changed {
			fmt.Fprintf(out, "paused queue %s: claims return nothing until `pgsweep queue resume`\n", *queue)
		} else {
			fmt.Fprintf(out, "queue %s was paused already\n", *queue)
		}
	case "resume":
		changed, err := c.QueueResume(ctx, *queue)
		if err != nil {
			return withHint(err)
		}
		if changed {
			fmt.Fprintf(out, "resumed queue %s\n", *queue)
		} else {
			fmt.Fprintf(out, "queue %s was not paused\n", *queue)
		}
	case "purge":
		n, err := c.QueuePurge(ctx, *queue)
		if err != nil {
			return withHint(err)
		}
		fmt.Fprintf(out, "purged %d pending message(s) from queue %s\n", n, *queue)
	case "drop":
		n, err := c.QueueDrop(ctx, *queue, *force)
		if err != nil {
			return withHint(err)
		}
		fmt.Fprintf(out, "dropped queue %s (%d live message(s) deleted, with its processed rows, dead letters and lanes)\n", *queue, n)
	case "stats":
		return queueStats(ctx, c, *queue, *lanes, *asJSON, out)
	case "grant", "revoke":
		var rs []pgsweep.Right
		for _, r := range strings.Split(*rights, ",") {
			rs = append(rs, pgsweep.Right(strings.TrimSpace(r)))
		}
		if sub == "grant" {
			err = c.QueueGrant(ctx, *queue, *role, rs...)
		} else {
			err = c.QueueRevoke(ctx, *queue, *role, rs...)
		}
		if err != nil {
			return withHint(err)
		}
		if sub == "grant" {
			fmt.Fprintf(out, "granted %s on queue %s to role %s\n", *rights, *queue, *role)
		} else {
			fmt.Fprintf(out, "revoked %s on queue %s from role %s\n", *rights, *queue, *role)
		}
	}
	return nil
}

// queueStatsReport is what `pgsweep queue stats` shows; --json prints it.
type queueStatsReport struct {
	Queues []pgsweep.QueueStats `json:"queues"`
	Lanes  []pgsweep.LaneStats  `json:"lanes,omitempty"`
}

func queueStats(ctx context.Context, c *pgsweep.Client, queue string, lanes int, asJSON bool, out io.Writer) error {
	all, err := c.QueueStats(ctx)
	if err != nil {
		return withHint(err)
	}
	rep := queueStatsReport{Queues: []pgsweep.QueueStats{}}
	for _, s := range all {
		if queue == "" || s.Queue == queue {
			rep.Queues = append(rep.Queues, s)
		}
	}
	if queue != "" && len(rep.Queues) == 0 {
		return fmt.Errorf("no queue %q in schema %s", queue, c.Schema())
	}
	if queue != "" && lanes > 0 {
		if rep.Lanes, err = c.LaneStats(ctx, queue, lanes); err != nil {
			return withHint(err)
		}
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tKIND\tPAUSED\tPENDING\tPROCESSING\tFAILED\tPROCESSED\tDEAD\tLANES\tBLOCKED\tOLDEST PENDING")
	for _, s := range rep.Queues {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", s.Queue, s.Kind, yesNo(s.Paused), s.Pending, s.Processing,
			s.Failed, s.Processed, s.Dead, s.Lanes, s.BlockedLanes, age(s.OldestPendingAge))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Lanes) > 0 {
		fmt.Fprintf(out, "\nlanes of %s (blocked first, then the oldest heads; at most %d):\n", queue, lanes)
		tw = tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LANE\tWAITING\tHEAD\tATTEMPT\tSTATE\tOLDEST")
		for _, l := range rep.Lanes {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", l.Lane, l.Waiting, l.HeadID, l.HeadAttempt, dash(l.HeadState), age(l.OldestAge))
		}
		return tw.Flush()
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// age prints a duration to the millisecond; zero is "-".
func age(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}
