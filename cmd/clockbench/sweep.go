package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// runSweep runs a ring scenario at each -sweep percentage of the broker
// ceiling, in increasing order, over -span each, and finds the knee: the
// first rate whose lateness p99 passes -knee-p99. Past the knee it stops
// unless -sweep-all. A point at the rate the ring scenario of the same run
// already measured reuses that result. batchRate is the latest measured
// batch create rate (for the lead time); the sweep returns the newest one.
func runSweep(ctx context.Context, cfg *config, a *api, prefix string, ceiling, batchRate float64, ring *RingResult,
	logf func(string, ...any)) (*SweepResult, float64, error) {
	if ceiling <= 0 {
		return nil, batchRate, errors.New("the sweep needs the broker ceiling measured in the same run: add broker to -scenario")
	}
	s := newSweep(cfg.sweepPcts, ceiling, cfg.span, cfg.kneeP99Ms)
	measured := 0
	for i := range s.Points {
		p := &s.Points[i]
		if ring != nil && ring.PctOfCeiling == p.Pct && ring.N == p.N && ring.SpanS == s.SpanS {
			p.FromRing = true
			p.fill(ring)
			logf("sweep: %g%% of the ceiling (%s) is the ring scenario's rate: reusing its figures", p.Pct, fmtRate(p.TargetRate))
		} else {
			logf("sweep: %g%% of the broker ceiling %s = %s (%d clocks over %s)", p.Pct, fmtRate(ceiling), fmtRate(p.TargetRate), p.N, cfg.span)
			c := *cfg
			c.n = p.N
			quietBefore(ctx, cfg, "sweep", logf)
			g, err := runRing(ctx, &c, a, prefix+"-sweep"+strconv.FormatFloat(p.Pct, 'f', -1, 64), false, batchRate, logf)
			if err := ctx.Err(); err != nil {
				return nil, batchRate, err
			}
			if err != nil {
				p.Error = err.Error()
				s.Notes = append(s.Notes, fmt.Sprintf("%g%%: %v", p.Pct, err))
			} else {
				p.fill(g)
				if g.CreateRate > 0 {
					batchRate = g.CreateRate
				}
			}
		}
		measured = i + 1
		if !s.record(i, cfg.sweepAll) {
			logf("sweep: %g%% is past the knee (p99 %.1f ms > %g ms, or clocks lost): stopping (-sweep-all goes on)", p.Pct, p.Lateness.P99, cfg.kneeP99Ms)
			break
		}
	}
	s.finish(measured)
	return s, batchRate, nil
}
