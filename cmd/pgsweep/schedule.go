package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/pgsweep/pgsweep"
)

// scheduleUsage is the usage line of `pgsweep schedule`.
const scheduleUsage = `usage: pgsweep schedule list|create|pause|resume|drop [flags]
  list   [--json]             every schedule: its queue, expression, zone, next slot, last message
  create --name N --queue Q --cron EXPR [--payload JSON] [--headers JSON] [--lane L]
         [--time-zone ZONE] [--catch-up latest|all|none]
                              create schedule N, or replace it (docs/schedules.md); EXPR is a
                              five-field cron expression or '@every <interval>'
  pause  --name N             N sends nothing until resume
  resume --name N             N sends again from its next slot after now
  drop   --name N             remove N
Every subcommand takes --database-url and --schema.`

// runSchedule is `pgsweep schedule …`: the periodic schedules of
// schedule.sql from the command line (the admin role's verbs; list needs
// the monitor role).
func runSchedule(ctx context.Context, args []string, out io.Writer) error {
	subs := map[string]bool{"list": true, "create": true, "pause": true, "resume": true, "drop": true}
	if len(args) == 0 || !subs[args[0]] {
		fmt.Fprintln(out, scheduleUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return nil
		}
		if len(args) == 0 {
			return fmt.Errorf("%w: want list, create, pause, resume or drop", errUsage)
		}
		return fmt.Errorf("%w: unknown subcommand %q: want list, create, pause, resume or drop", errUsage, args[0])
	}
	sub := args[0]
	fs, db := newDBFlagSet("schedule " + sub)
	var name, queue, cron, payload, headers, lane, zone, catchUp *string
	var asJSON *bool
	if sub == "list" {
		asJSON = fs.Bool("json", false, "print JSON for scripts")
	} else {
		name = fs.String("name", "", "the schedule's name")
	}
	if sub == "create" {
		queue = fs.String("queue", "", "the queue its messages go to")
		cron = fs.String("cron", "", "a five-field cron expression ('*/5 * * * *') or '@every <interval>'")
		payload = fs.String("payload", "{}", "the messages' payload (JSON)")
		headers = fs.String("headers", "{}", "the messages' headers (a JSON object)")
		lane = fs.String("lane", "", "an ordered lane of the queue (default: none)")
		zone = fs.String("time-zone", "UTC", "the IANA time zone the expression is read in")
		catchUp = fs.String("catch-up", "latest", "overdue slots: latest (one message), all (each), none (skip)")
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if err := db.validate(); err != nil {
		return err
	}
	if name != nil && *name == "" {
		return fmt.Errorf("%w: --name is required", errUsage)
	}
	if sub == "create" && (*queue == "" || *cron == "") {
		return fmt.Errorf("%w: --queue and --cron are required", errUsage)
	}
	if sub == "create" && (!json.Valid([]byte(*payload)) || !json.Valid([]byte(*headers))) {
		return fmt.Errorf("%w: --payload and --headers must be JSON", errUsage)
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
	case "list":
		return scheduleList(ctx, c, *asJSON, out)
	case "create":
		err := c.ScheduleCreate(ctx, *name, *queue, *cron, &pgsweep.ScheduleOptions{
			Payload: json.RawMessage(*payload), Headers: json.RawMessage(*headers), Lane: *lane,
			TimeZone: *zone, CatchUp: pgsweep.CatchUp(*catchUp)})
		if err != nil {
			return withHint(err)
		}
		next, err := c.ScheduleNextTimes(ctx, *cron, *zone, time.Time{}, 3)
		if err != nil {
			return withHint(err)
		}
		fmt.Fprintf(out, "schedule %s: %s (%s) to queue %s; next slots:", *name, *cron, *zone, *queue)
		for _, t := range next {
			fmt.Fprintf(out, " %s", t.Format(time.RFC3339))
		}
		fmt.Fprintln(out)
	case "pause", "resume":
		f := c.SchedulePause
		if sub == "resume" {
			f = c.ScheduleResume
		}
		changed, err := f(ctx, *name)
		if err != nil {
			return withHint(err)
		}
		switch {
		case changed && sub == "pause":
			fmt.Fprintf(out, "paused schedule %s: it sends nothing until `pgsweep schedule resume`\n", *name)
		case changed:
			fmt.Fprintf(out, "resumed schedule %s (the slots of the pause are not sent)\n", *name)
		case sub == "pause":
			fmt.Fprintf(out, "schedule %s was paused already\n", *name)
		default:
			fmt.Fprintf(out, "schedule %s was not paused\n", *name)
		}
	case "drop":
		dropped, err := c.ScheduleDrop(ctx, *name)
		if err != nil {
			return withHint(err)
		}
		if dropped {
			fmt.Fprintf(out, "dropped schedule %s\n", *name)
		} else {
			fmt.Fprintf(out, "no schedule %s\n", *name)
		}
	}
	return nil
}

func scheduleList(ctx context.Context, c *pgsweep.Client, asJSON bool, out io.Writer) error {
	list, err := c.Schedules(ctx)
	if err != nil {
		return withHint(err)
	}
	if asJSON {
		if list == nil {
			list = []pgsweep.Schedule{}
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tQUEUE\tCRON\tTIME ZONE\tCATCH-UP\tPAUSED\tNEXT\tLAST SENT\tLAST ID\tERROR")
	for _, s := range list {
		var lastID string
		if s.LastID != nil {
			lastID = fmt.Sprint(*s.LastID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Queue, s.Cron, s.TimeZone, s.CatchUp, yesNo(s.Paused),
			timeOrDash(s.NextAt), timeOrDash(s.LastAt), dash(lastID), dash(s.LastError))
	}
	return tw.Flush()
}

// timeOrDash prints a time in RFC 3339, or "-" for none.
func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}
