package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/pgsweep/pgsweep"
	"github.com/pgsweep/pgsweep/runner"
)

// statusReport is what `pgsweep status` shows; --json prints it as is.
// It reads what the dashboard reads: health() and the queues' latest
// snapshots (stats_latest: O(queues), whatever the messages); --exact adds
// queue_stats, the live count (a scan of every message).
type statusReport struct {
	Schema    string                    `json:"schema"`
	Findings  []pgsweep.Finding         `json:"findings"`
	Queues    []pgsweep.QueueSnapshot   `json:"queues"`
	Exact     []runner.QueueStats       `json:"exact,omitempty"`
	Leases    []pgsweep.Lease           `json:"leases"`
	Retention *genericTable             `json:"retention_policies"`
	Passes    []pgsweep.MaintenancePass `json:"recent_passes"`
	Cron      *pgsweep.CronJob          `json:"cron_job"`
	Missing   map[string]string         `json:"missing,omitempty"` // part → why it is not shown
	now       time.Time                 // when it was read (the snapshots' ages)
}

// genericTable holds a view whose columns this binary need not know (the
// retention_policies view belongs to the retention engine). Rows are as
// PostgreSQL writes the values (for scripts); Human as people read them.
type genericTable struct {
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
	Human   [][]string `json:"-"`
}

func runStatus(ctx context.Context, args []string, out io.Writer) error {
	fs, db := newDBFlagSet("status")
	asJSON := fs.Bool("json", false, "print JSON for scripts")
	passes := fs.Int("passes", 10, "how many recent maintenance passes to show")
	exact := fs.Bool("exact", false, "also count every queue's messages now (queue_stats: reads every message; the default reads the latest snapshots)")
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
	rep, err := collectStatus(ctx, conn, db.schema, *passes, *exact)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printStatus(out, rep)
	return nil
}

func isUndefined(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42883")
}

func collectStatus(ctx context.Context, conn *pgx.Conn, schema string, nPasses int, exact bool) (*statusReport, error) {
	rep := &statusReport{Schema: schema, Missing: map[string]string{}, now: time.Now()}
	q := pgx.Identifier{schema}.Sanitize()
	var err error

	client, err := pgsweep.NewClient(conn, &pgsweep.ClientOptions{Schema: schema})
	if err != nil {
		return nil, err
	}
	if rep.Findings, err = client.Health(ctx); isUndefined(err) {
		rep.Missing["findings"] = "health() does not exist in this schema (installs before 0.40)"
	} else if err != nil {
		return nil, err
	}
	if rep.Queues, err = client.StatsLatest(ctx); isUndefined(err) {
		rep.Missing["queues"] = "stats_latest() does not exist in this schema (installs before 0.40): --exact counts the messages"
	} else if err != nil {
		return nil, err
	}
	if exact {
		rep.Exact, err = runner.ReadQueueStats(ctx, client)
		if errors.Is(err, runner.ErrNoQueueStats) {
			rep.Missing["exact"] = err.Error()
		} else if err != nil {
			return nil, err
		}
	}

	if rep.Leases, err = client.Leases(ctx); err != nil {
		return nil, err
	}

	rep.Retention, err = readGeneric(ctx, conn, "SELECT * FROM "+q+".retention_policies")
	if isUndefined(err) {
		rep.Missing["retention_policies"] = "retention_policies does not exist in this schema (the retention engine is not installed)"
	} else if err != nil {
		return nil, err
	}

	if rep.Passes, err = client.MaintenancePasses(ctx, nPasses); err != nil {
		return nil, err
	}
	job, found, err := client.CronJob(ctx)
	if err != nil {
		return nil, fmt.Errorf("read cron job: %w", err)
	}
	if found {
		rep.Cron = &job
	}
	return rep, nil
}

func readGeneric(ctx context.Context, conn *pgx.Conn, sql string) (*genericTable, error) {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	t := &genericTable{}
	for _, f := range rows.FieldDescriptions() {
		t.Columns = append(t.Columns, f.Name)
	}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		row, human := make([]string, len(vals)), make([]string, len(vals))
		for i, v := range vals {
			row[i] = formatValue(v)
			human[i] = row[i]
			if iv, ok := v.(pgtype.Interval); ok {
				human[i] = humanInterval(iv)
			}
		}
		t.Rows = append(t.Rows, row)
		t.Human = append(t.Human, human)
	}
	return t, rows.Err()
}

func formatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case time.Time:
		return x.UTC().Format("2006-01-02 15:04:05Z")
	case time.Duration:
		return x.String()
	case pgtype.Interval:
		return formatInterval(x)
	case []byte:
		return string(x)
	case map[string]any, []any:
		b, _ := json.Marshal(x)
		return string(b)
	default:
		return fmt.Sprint(x)
	}
}

// formatInterval writes an interval as PostgreSQL does (IntervalStyle
// postgres, its default): "7 days", "00:01:00", "1 year 2 mons -3 days
// +04:05:06.5"; "" for NULL.
func formatInterval(iv pgtype.Interval) string {
	if !iv.Valid {
		return ""
	}
	var b strings.Builder
	zero, before := true, false // nothing written yet; the last part written was negative
	part := func(v int64, unit string) {
		if v == 0 {
			return
		}
		if !zero {
			b.WriteByte(' ')
		}
		if before && v > 0 {
			b.WriteByte('+')
		}
		fmt.Fprintf(&b, "%d %s", v, unit)
		if v != 1 {
			b.WriteByte('s')
		}
		before, zero = v < 0, false
	}
	part(int64(iv.Months/12), "year")
	part(int64(iv.Months%12), "mon")
	part(int64(iv.Days), "day")
	us := iv.Microseconds
	if zero || us != 0 {
		if !zero {
			b.WriteByte(' ')
		}
		switch {
		case us < 0:
			b.WriteByte('-')
			us = -us
		case before:
			b.WriteByte('+')
		}
		const usPerSec = int64(time.Second / time.Microsecond)
		h, m, sec, frac := us/(3600*usPerSec), us/(60*usPerSec)%60, us/usPerSec%60, us%usPerSec
		fmt.Fprintf(&b, "%02d:%02d:%02d", h, m, sec)
		if frac != 0 {
			b.WriteString(strings.TrimRight(fmt.Sprintf(".%06d", frac), "0"))
		}
	}
	return b.String()
}

func printStatus(out io.Writer, rep *statusReport) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	section := func(title string) { fmt.Fprintf(tw, "\n== %s\n", title) }
	fmt.Fprintf(tw, "pgsweep status of schema %s\n", rep.Schema)

	section("health")
	switch why, missing := rep.Missing["findings"]; {
	case missing:
		fmt.Fprintf(tw, "(%s)\n", why)
	case len(rep.Findings) == 0:
		fmt.Fprintln(tw, "(no findings)")
	default:
		fmt.Fprintln(tw, "SEVERITY\tKIND\tOBJECT\tDETAIL")
		for _, f := range rep.Findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Severity, f.Kind, f.Object, f.Detail)
			fmt.Fprintf(tw, "\t\t\t→ %s\n", f.Advice)
		}
	}

	section("queues (latest snapshots)")
	switch why, missing := rep.Missing["queues"]; {
	case missing:
		fmt.Fprintf(tw, "(%s)\n", why)
	case len(rep.Queues) == 0:
		fmt.Fprintln(tw, "(no queues)")
	default:
		fmt.Fprintln(tw, "QUEUE\tKIND\tPENDING\tDUE\tIN FLIGHT\tFAILED\tDEAD\tPROCESSED\tOLDEST DUE\tLANES\tBLOCKED\tAS OF")
		none := 0
		for _, q := range rep.Queues {
			kind := q.Kind
			if q.Paused {
				kind += " (paused)"
			}
			if q.TakenAt.IsZero() {
				none++
				fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\tno snapshot yet\n", q.Queue, kind)
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%s ago\n", q.Queue, kind, q.Pending, q.Due, q.InFlight,
				q.Failed, q.Dead, q.Processed, humanDuration(q.OldestDueAge), q.Lanes, q.BlockedLanes, humanDuration(rep.now.Sub(q.TakenAt)))
		}
		if none > 0 {
			fmt.Fprintln(tw, "(a snapshot is taken by maintain()'s stats part every stats_interval; --exact counts the messages now)")
		}
	}
	if rep.Exact != nil || rep.Missing["exact"] != "" {
		section("queues (exact, now)")
		if why, ok := rep.Missing["exact"]; ok {
			fmt.Fprintf(tw, "(%s)\n", why)
		} else {
			fmt.Fprintln(tw, "QUEUE\tKIND\tPENDING\tPROCESSING\tFAILED\tPROCESSED\tDEAD\tOLDEST PENDING")
			for _, q := range rep.Exact {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", q.Queue, q.Kind, q.Pending, q.Processing, q.Failed, q.Processed, q.Dead,
					humanDuration(q.OldestPendingAge))
			}
		}
	}

	section("leases")
	if len(rep.Leases) == 0 {
		fmt.Fprintln(tw, "(none)")
	} else {
		fmt.Fprintln(tw, "NAME\tHOLDER\tTOKEN\tLIVE\tEXPIRES")
		for _, l := range rep.Leases {
			holder := l.Owner
			if holder == "" {
				holder = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%s\n", l.Name, holder, l.Token, l.Live, l.ExpiresAt.UTC().Format("2006-01-02 15:04:05Z"))
		}
	}

	section("retention policies")
	switch t := rep.Retention; {
	case t == nil:
		fmt.Fprintf(tw, "(%s)\n", rep.Missing["retention_policies"])
	case len(t.Rows) == 0:
		fmt.Fprintln(tw, "(none registered)")
	default:
		cols := pickColumns(t.Columns, retentionColumns)
		head := make([]string, len(cols))
		for i, c := range cols {
			head[i] = strings.ToUpper(t.Columns[c])
		}
		fmt.Fprintln(tw, strings.Join(head, "\t"))
		for _, r := range t.Human {
			vals := make([]string, len(cols))
			for i, c := range cols {
				vals[i] = r[c]
			}
			fmt.Fprintln(tw, strings.Join(vals, "\t"))
		}
	}

	section("pg_cron")
	if rep.Cron == nil {
		fmt.Fprintln(tw, "(no maintain job scheduled; `pgsweep cron schedule` or run `pgsweep run`)")
	} else {
		fmt.Fprintf(tw, "job %d\t%s\t%s\tactive=%v\n", rep.Cron.JobID, rep.Cron.Schedule, rep.Cron.Command, rep.Cron.Active)
	}

	section("recent maintenance passes")
	if len(rep.Passes) == 0 {
		fmt.Fprintln(tw, "(none yet)")
	} else {
		fmt.Fprintln(tw, "ID\tOWNER\tSTARTED\tDURATION\tRECOVERY\tRETENTION\tCOUNTS\tERROR")
		for _, p := range rep.Passes {
			d := "running"
			if p.Duration != nil {
				d = humanDuration(*p.Duration)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Owner, p.StartedAt.UTC().Format("15:04:05Z"), d,
				dash(p.Recovery), dash(p.Retention), string(p.Counts), p.Error)
		}
	}
	_ = tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// retentionColumns are the retention_policies columns the text status shows
// when the view has them (--json shows every column).
var retentionColumns = []string{"name", "table_name", "mode", "run_interval", "last_finished_at",
	"last_outcome", "last_rows_deleted", "last_error"}

// pickColumns returns the indexes of want found in have, in want's order;
// every column when none is found.
func pickColumns(have, want []string) []int {
	var idx []int
	for _, w := range want {
		for i, h := range have {
			if h == w {
				idx = append(idx, i)
			}
		}
	}
	if len(idx) == 0 {
		for i := range have {
			idx = append(idx, i)
		}
	}
	return idx
}
