package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgsweep/pgsweep"
)

// The runner's spans (docs/operations.md, "Tracing"). Each pass is one span,
// SpanPass, a child of the context given to RunOnce (Run gives none: a new
// trace per pass). Its children:
//
//   - SpanDetach, the concurrent detach of expired partitions that precedes
//     maintain() (not with Options.PlainDetach);
//   - one span per part that ran in this pass, named SpanPass + "." + the
//     part (pgsweep.maintain.recovery, .schedules, .stats, .retention),
//     with the part's counts, and under the retention part one
//     SpanRetentionPolicy per policy it ran.
//
// A part that did not run in this pass (another runner holds its lease:
// "busy"; "not due"; "no budget") has no span: the pass span says what each
// part did in its attribute pgsweep.part.<part>. A pass is never skipped as
// a whole: every pass has its span.
//
// The parts run inside the database, in one CALL maintain(): their spans are
// made after it returned, from the maintenance history (maintenance_runs,
// retention_passes), and placed on the local clock by their offset from the
// pass's start in the database (the server's clock may differ from the
// runner's), within the span of the CALL. That history is read only when the
// pass span is recording: with tracing off a pass costs nothing more.
const (
	// SpanPass is the span of one maintenance pass.
	SpanPass = "pgsweep.maintain"
	// SpanDetach is the span of the concurrent detach before maintain().
	SpanDetach = "pgsweep.maintain.detach"
	// SpanRetentionPolicy is the span of one retention policy's pass in the
	// retention part.
	SpanRetentionPolicy = "pgsweep.maintain.retention.policy"
)

// Attributes of the runner's spans (the counts of a part are
// pgsweep.<part>.<count>: pgsweep.recovery.recovered, ...).
const (
	attrOwner    = attribute.Key("pgsweep.owner")
	attrSchema   = attribute.Key("pgsweep.schema")
	attrPassID   = attribute.Key("pgsweep.pass.id")
	attrStatus   = attribute.Key("pgsweep.part.status")
	attrSteps    = attribute.Key("pgsweep.part.steps")
	attrPolicy   = attribute.Key("pgsweep.retention.policy")
	attrOutcome  = attribute.Key("pgsweep.retention.outcome")
	attrDeleted  = attribute.Key("pgsweep.retention.deleted")
	attrBatches  = attribute.Key("pgsweep.retention.batches")
	attrStrategy = attribute.Key("pgsweep.retention.strategy")
	attrMode     = attribute.Key("pgsweep.retention.mode")
)

// newTracer returns the runner's tracer from tp (pgsweep.Tracer).
func newTracer(tp trace.TracerProvider) trace.Tracer { return pgsweep.Tracer(tp, pgsweep.TracerName) }

// startPass starts the span of a pass.
func (r *Runner) startPass(ctx context.Context) (context.Context, trace.Span) {
	ctx, span := r.tracer.Start(ctx, SpanPass, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(attrOwner.String(r.owner), attrSchema.String(r.opts.Schema))
	}
	return ctx, span
}

// endPass ends the span of a pass with what it did (p: nil when it failed)
// or its error.
func endPass(span trace.Span, p *Pass, err error) {
	if span.IsRecording() {
		switch {
		case err != nil:
			span.RecordError(errors.New(redactErr(err)))
			span.SetStatus(codes.Error, redactErr(err))
		case p != nil:
			attrs := []attribute.KeyValue{attrPassID.Int64(p.ID)}
			for _, part := range sortedKeys(p.Parts) {
				attrs = append(attrs, attribute.String("pgsweep.part."+part, p.Parts[part]))
			}
			span.SetAttributes(attrs...)
			if p.Error != "" {
				span.SetStatus(codes.Error, pgsweep.RedactSecrets(p.Error))
			}
		}
	}
	span.End()
}

// traceDetach records the concurrent detach's result on its span.
func traceDetach(span trace.Span, d pgsweep.DetachResult, err error) {
	if span.IsRecording() {
		span.SetAttributes(
			attribute.Int("pgsweep.detach.claimed", d.Claimed),
			attribute.Int("pgsweep.detach.detached", d.Detached),
			attribute.Int("pgsweep.detach.dropped", d.Dropped),
			attribute.Int("pgsweep.detach.pending", d.Pending),
			attribute.Int("pgsweep.detach.released", d.Released),
			attribute.Int("pgsweep.detach.skipped", len(d.Skipped)),
			attribute.Int64("pgsweep.detach.rows", d.Rows))
		for _, e := range d.Errors {
			span.RecordError(errors.New(redactErr(e)))
		}
		switch {
		case err != nil:
			span.RecordError(errors.New(redactErr(err)))
			span.SetStatus(codes.Error, redactErr(err))
		case len(d.Errors) > 0:
			span.SetStatus(codes.Error, fmt.Sprintf("%d detach statements failed", len(d.Errors)))
		}
	}
	span.End()
}

// partRun is one row of maintenance_runs: a part's run in a pass.
type partRun struct {
	part, status, errMsg string
	started              time.Time
	finished             *time.Time
	steps                int64
	counts               []byte
}

// policyPass is one row of retention_passes: a policy's pass.
type policyPass struct {
	policy, mode, strategy, outcome, errMsg string
	started                                 time.Time
	finished                                *time.Time
	rows                                    int64
	batches                                 int64
}

// passClock places database times on the local clock: the pass began at
// dbStart in the database and its CALL ran from callStart to callEnd here.
type passClock struct {
	dbStart            time.Time
	callStart, callEnd time.Time
}

// at is the local time of the database time t, within the CALL.
func (c passClock) at(t time.Time) time.Time {
	l := c.callStart.Add(t.Sub(c.dbStart))
	switch {
	case l.Before(c.callStart):
		return c.callStart
	case l.After(c.callEnd):
		return c.callEnd
	}
	return l
}

// end is the local time of a database end time (nil: the end of the CALL).
func (c passClock) end(t *time.Time) time.Time {
	if t == nil {
		return c.callEnd
	}
	return c.at(*t)
}

// traceParts adds the spans of the parts of pass p, which CALL maintain ran
// on conn from callStart to callEnd, under the span in ctx. It reads the
// history only when that span records.
func (r *Runner) traceParts(ctx context.Context, conn Conn, p *Pass, callStart, callEnd time.Time) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	runs, dbStart, err := r.readRuns(ctx, conn, p.ID)
	if err != nil {
		if ctx.Err() == nil { // a stop fails the pass anyway
			r.log.Warn("tracing: could not read the pass's parts", "error", redactErr(err))
		}
		span.AddEvent("parts unread", trace.WithAttributes(attribute.String("error", redactErr(err))))
		return
	}
	clock := passClock{dbStart: dbStart, callStart: callStart, callEnd: callEnd}
	for _, run := range runs {
		pctx, ps := r.tracer.Start(ctx, SpanPass+"."+run.part, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithTimestamp(clock.at(run.started)),
			trace.WithAttributes(attrStatus.String(run.status), attrSteps.Int64(run.steps)))
		ps.SetAttributes(countAttrs(run.part, run.counts)...)
		if run.part == "retention" {
			r.tracePolicies(pctx, conn, run, clock)
		}
		if run.errMsg != "" {
			msg := pgsweep.RedactSecrets(run.errMsg)
			ps.RecordError(errors.New(msg))
			ps.SetStatus(codes.Error, msg)
		}
		ps.End(trace.WithTimestamp(clock.end(run.finished)))
	}
}

// tracePolicies adds a span per policy pass of the retention run run.
func (r *Runner) tracePolicies(ctx context.Context, conn Conn, run partRun, clock passClock) {
	pols, err := r.readPolicyPasses(ctx, conn, run)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("tracing: could not read the retention passes", "error", redactErr(err))
		}
		trace.SpanFromContext(ctx).AddEvent("policies unread", trace.WithAttributes(attribute.String("error", redactErr(err))))
		return
	}
	for _, pp := range pols {
		_, s := r.tracer.Start(ctx, SpanRetentionPolicy, trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithTimestamp(clock.at(pp.started)),
			trace.WithAttributes(attrPolicy.String(pp.policy), attrOutcome.String(pp.outcome),
				attrDeleted.Int64(pp.rows), attrBatches.Int64(pp.batches), attrMode.String(pp.mode)))
		if pp.strategy != "" {
			s.SetAttributes(attrStrategy.String(pp.strategy))
		}
		if pp.errMsg != "" {
			msg := pgsweep.RedactSecrets(pp.errMsg)
			s.RecordError(errors.New(msg))
			s.SetStatus(codes.Error, msg)
		}
		s.End(trace.WithTimestamp(clock.end(pp.finished)))
	}
}

// countAttrs turns a run's counts into attributes pgsweep.<part>.<name>: a
// number as it is, an object of numbers (retention's rows deleted per
// policy) as its sum.
func countAttrs(part string, raw []byte) []attribute.KeyValue {
	var counts map[string]json.RawMessage
	if json.Unmarshal(raw, &counts) != nil {
		return nil
	}
	var attrs []attribute.KeyValue
	for _, k := range sortedKeys(counts) {
		var n int64
		var byName map[string]int64
		switch {
		case json.Unmarshal(counts[k], &n) == nil:
		case json.Unmarshal(counts[k], &byName) == nil:
			for _, v := range byName {
				n += v
			}
		default:
			continue
		}
		attrs = append(attrs, attribute.Int64("pgsweep."+part+"."+k, n))
	}
	return attrs
}

// readRuns reads the runs of pass id, in the order they began, and the
// pass's start (database clock).
func (r *Runner) readRuns(ctx context.Context, conn Conn, id int64) ([]partRun, time.Time, error) {
	var dbStart time.Time
	s := r.quoted()
	if err := conn.QueryRow(ctx, "SELECT started_at FROM "+s+".maintenance_passes WHERE id OPERATOR(pg_catalog.=) $1::pg_catalog.int8", id).
		Scan(&dbStart); err != nil {
		return nil, dbStart, fmt.Errorf("read maintenance_passes: %w", err)
	}
	rows, err := conn.Query(ctx, "SELECT part, status, started_at, finished_at, steps, counts, coalesce(error, '') FROM "+s+
		".maintenance_runs WHERE pass_id OPERATOR(pg_catalog.=) $1::pg_catalog.int8 ORDER BY id", id)
	if err != nil {
		return nil, dbStart, fmt.Errorf("read maintenance_runs: %w", err)
	}
	defer rows.Close()
	var runs []partRun
	for rows.Next() {
		var run partRun
		if err := rows.Scan(&run.part, &run.status, &run.started, &run.finished, &run.steps, &run.counts, &run.errMsg); err != nil {
			return nil, dbStart, fmt.Errorf("read maintenance_runs: %w", err)
		}
		runs = append(runs, run)
	}
	if err := rows.Err(); err != nil {
		return nil, dbStart, fmt.Errorf("read maintenance_runs: %w", err)
	}
	return runs, dbStart, nil
}

// readPolicyPasses reads the retention passes that the retention run run
// made: this owner's, begun while it ran.
func (r *Runner) readPolicyPasses(ctx context.Context, conn Conn, run partRun) ([]policyPass, error) {
	// a run still open (finished nil): any later pass of this owner
	rows, err := conn.Query(ctx, "SELECT policy, mode, coalesce(strategy, ''), outcome, started_at, finished_at, rows_deleted, batches, coalesce(error, '') FROM "+
		r.quoted()+".retention_passes WHERE owner OPERATOR(pg_catalog.=) $1::pg_catalog.text"+
		" AND started_at OPERATOR(pg_catalog.>=) $2::pg_catalog.timestamptz"+
		" AND ($3::pg_catalog.timestamptz IS NULL OR started_at OPERATOR(pg_catalog.<=) $3::pg_catalog.timestamptz) ORDER BY id",
		r.owner, run.started, run.finished)
	if err != nil {
		return nil, fmt.Errorf("read retention_passes: %w", err)
	}
	defer rows.Close()
	var out []policyPass
	for rows.Next() {
		var pp policyPass
		if err := rows.Scan(&pp.policy, &pp.mode, &pp.strategy, &pp.outcome, &pp.started, &pp.finished, &pp.rows, &pp.batches, &pp.errMsg); err != nil {
			return nil, fmt.Errorf("read retention_passes: %w", err)
		}
		out = append(out, pp)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read retention_passes: %w", err)
	}
	return out, nil
}

// quoted is the runner's schema, quoted for a statement.
func (r *Runner) quoted() string { return pgx.Identifier{r.opts.Schema}.Sanitize() }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
