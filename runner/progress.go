package runner

import (
	"context"
	"time"
)

// progressMark is what the database shows of a pass's progress; it changes
// only when the pass commits something: a step of a part (maintain_run.steps),
// the end of a part (maintain_run.finished_at), a retention batch
// (retention_passes.batches), or a lease renewal (leases.expires_at), which
// maintain() does after every step and retention during a long policy.
type progressMark struct {
	pass, steps, batches int64
	leaseExpiry          int64 // Unix microseconds; 0: no lease
}

// readProgress reads the progress of this owner's latest pass.
func (r *Runner) readProgress(ctx context.Context, conn Conn) (progressMark, error) {
	p, err := r.sql(conn).MaintenanceProgress(ctx, r.owner)
	m := progressMark{pass: p.Pass, steps: p.Steps, batches: p.Batches}
	if !p.LeaseExpiry.IsZero() {
		m.leaseExpiry = p.LeaseExpiry.UnixMicro()
	}
	return m, err
}

// watchProgress runs beside a pass until ctx ends. Every progressEvery it
// reads the pass's progress on a connection of its own (opened at the first
// look, so a pass shorter than progressEvery never opens it), and notes the
// time whenever the progress changed since the look before: Health counts a
// recently committed step as a sign of life, so a long pass (a backlog after
// an outage) does not look dead.
func (r *Runner) watchProgress(ctx context.Context) {
	every := r.progressEvery
	if every <= 0 {
		return
	}
	var (
		conn Conn
		last *progressMark
	)
	defer func() {
		if conn != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = conn.Close(cctx)
		}
	}()
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(every)
		if conn == nil {
			c, err := r.connect(ctx)
			if err != nil {
				if ctx.Err() == nil {
					r.log.Debug("cannot watch the pass's progress", "error", redactErr(err))
				}
				continue
			}
			conn = c
		}
		m, err := r.readProgress(ctx, conn)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Debug("cannot read the pass's progress", "error", redactErr(err))
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				_ = conn.Close(cctx)
				cancel()
				conn, last = nil, nil
			}
			continue
		}
		if last != nil && m != *last {
			r.mu.Lock()
			if r.inPass {
				r.lastProgress = r.now()
			}
			r.mu.Unlock()
			r.signals.PartDone.Signal(m)
		}
		last = &m
	}
}
