package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/clockd/clockd/internal/benchkit"
)

// peer is a job queue under test. Its workers hand every job they get to a
// recorder and do nothing else.
type peer interface {
	Name() string
	Module() string                  // the Go module whose version is reported
	Settings() map[string]string     // the configuration measured
	Reset(ctx context.Context) error // drop every job and queue state
	// Start starts the workers, which record into rec.
	Start(ctx context.Context, rec *recorder) error
	// Enqueue schedules every job of p in bulk, in due-time order.
	Enqueue(ctx context.Context, p *plan) error
	// Stop stops the workers and waits for their handlers.
	Stop(ctx context.Context) error
	Close()
}

// plan holds the due times of one run, exactly as clockbench's ringPlan:
// job i is due at firstDue + span*i/n, truncated to the millisecond.
type plan struct {
	n        int
	firstDue time.Time
	span     time.Duration
}

func (p *plan) due(i int) time.Time {
	off := time.Duration(float64(p.span) * float64(i) / float64(p.n))
	return p.firstDue.Add(off).Truncate(time.Millisecond)
}

// recorder keeps the first receipt time of every job (Unix ns) and counts
// the rest as duplicates.
type recorder struct {
	recv       []atomic.Int64
	distinct   atomic.Int64
	duplicates atomic.Int64
	unexpected atomic.Int64
}

func newRecorder(n int) *recorder { return &recorder{recv: make([]atomic.Int64, n)} }

// record is called by a worker with the time it got job i.
func (r *recorder) record(now time.Time, i int) {
	switch {
	case i < 0 || i >= len(r.recv):
		r.unexpected.Add(1)
	case r.recv[i].CompareAndSwap(0, now.UnixNano()):
		r.distinct.Add(1)
	default:
		r.duplicates.Add(1)
	}
}

// Result is what one run measured; it is printed as one JSON line.
type Result struct {
	Peer     string            `json:"peer"`
	Version  string            `json:"version"`
	Settings map[string]string `json:"settings"`
	Scenario string            `json:"scenario"`
	N        int               `json:"n"`
	SpanS    float64           `json:"span_s"`
	LeadS    float64           `json:"lead_s"`
	FirstDue time.Time         `json:"first_due"`
	LastDue  time.Time         `json:"last_due"`
	// Quiet is the wait for a quiet machine before the run, LoadAvg the
	// load average when it began.
	Quiet   QuietWait `json:"quiet_wait"`
	LoadAvg string    `json:"loadavg_at_start"`

	EnqueueS        float64 `json:"enqueue_s"`
	EnqueueRate     float64 `json:"enqueue_rate"`
	EnqueueOverranS float64 `json:"enqueue_overran_s,omitempty"`

	Received   int `json:"received"`
	Duplicates int `json:"duplicates"`
	Unexpected int `json:"unexpected"`
	Early      int `json:"early"`
	// EarlyBeforeSecond counts the jobs received even before the whole
	// second their due time falls in (asynq keeps due times in seconds, so
	// its early jobs should all be within their second).
	EarlyBeforeSecond int     `json:"early_before_due_second"`
	Lost              int     `json:"lost"`
	Lateness          Summary `json:"lateness"`
	// DrainRate is clockbench's ring rate: (received-1) / (last - first receipt)
	DrainRate     float64 `json:"drain_rate"`
	FirstReceiptS float64 `json:"first_receipt_after_first_due_s"`
	LastReceiptS  float64 `json:"last_receipt_after_first_due_s"`
	// DrainCPU is the machine's CPU between the readings that bracket the
	// receipts from first to last, CPUPerJobUS the machine's CPU time per job
	// received between them.
	DrainCPU    *CPUUse  `json:"cpu_first_to_last_receipt,omitempty"`
	CPUPerJobUS float64  `json:"machine_cpu_us_per_job,omitempty"`
	Notes       []string `json:"notes,omitempty"`
}

type config struct {
	n    int
	span time.Duration
	lead time.Duration // 0: 2 s + 2 × n / the enqueue rate of a probe, at least 5 s
	// before each run, wait (quietMax at most) until the machine is less
	// than quietBusy % busy, as clockbench does; 0: do not wait
	quietBusy float64
	quietMax  time.Duration
	grace     time.Duration
	settle    time.Duration
}

const (
	hotDefaultN  = 100000
	ringDefaultN = 5000
	probeN       = 2000
)

// moduleVersion is the version of module m this binary was built with.
func moduleVersion(m string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == m {
				return d.Version
			}
		}
	}
	return "unknown"
}

// probeRate enqueues n jobs due in an hour, without workers, and returns
// the enqueue rate (run resets the peer afterwards).
func probeRate(ctx context.Context, pr peer, n int) (float64, error) {
	if err := pr.Reset(ctx); err != nil {
		return 0, err
	}
	p := &plan{n: n, firstDue: time.Now().Add(time.Hour).Truncate(time.Millisecond), span: time.Second}
	t0 := time.Now()
	if err := pr.Enqueue(ctx, p); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}

// run measures one scenario, "hot" or "ring", on pr.
func run(ctx context.Context, cfg config, pr peer, scenario string, logf func(string, ...any)) (*Result, error) {
	n, span := cfg.n, cfg.span
	if scenario == "hot" {
		span = time.Second
		if n == 0 {
			n = hotDefaultN
		}
	} else if n == 0 {
		n = ringDefaultN
	}
	lead := cfg.lead
	if lead == 0 {
		r, err := probeRate(ctx, pr, min(n, probeN))
		if err != nil {
			return nil, fmt.Errorf("probe: %w", err)
		}
		lead = max(5*time.Second, 2*time.Second+time.Duration(2*float64(n)/r*float64(time.Second)))
		logf("%s %s: probe enqueued at %.0f/s, lead %.1fs", pr.Name(), scenario, r, lead.Seconds())
	}
	if err := pr.Reset(ctx); err != nil {
		return nil, fmt.Errorf("reset: %w", err)
	}
	var quiet QuietWait
	if cfg.quietBusy > 0 {
		if quiet = benchkit.WaitQuiet(ctx, cfg.quietBusy, cfg.quietMax); !quiet.Quiet {
			logf("%s %s: the machine is still %.0f%% busy after %.1fs; starting anyway", pr.Name(), scenario, quiet.BusyPct, quiet.WaitedS)
		}
	}
	rec := newRecorder(n)
	if err := pr.Start(ctx, rec); err != nil {
		return nil, fmt.Errorf("start workers: %w", err)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		return pr.Stop(sctx)
	}
	defer stop()

	start := time.Now()
	firstDue := start.Add(lead)
	if scenario == "hot" {
		firstDue = firstDue.Truncate(time.Second).Add(time.Second)
	}
	p := &plan{n: n, firstDue: firstDue.Truncate(time.Millisecond), span: span}
	lastDue := p.due(n - 1)
	res := &Result{
		Peer: pr.Name(), Version: moduleVersion(pr.Module()), Settings: pr.Settings(), Scenario: scenario,
		N: n, SpanS: span.Seconds(), LeadS: p.firstDue.Sub(start).Seconds(),
		FirstDue: p.firstDue.UTC(), LastDue: lastDue.UTC(), Quiet: quiet, LoadAvg: benchkit.LoadAvg(),
	}
	logf("%s %s: enqueueing %d jobs due %s .. %s", pr.Name(), scenario, n,
		p.firstDue.Format("15:04:05.000"), lastDue.Format("15:04:05.000"))
	if err := pr.Enqueue(ctx, p); err != nil {
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	enqEnd := time.Now()
	res.EnqueueS = enqEnd.Sub(start).Seconds()
	res.EnqueueRate = float64(n) / res.EnqueueS
	if over := enqEnd.Sub(p.firstDue); over > 0 {
		res.EnqueueOverranS = over.Seconds()
		res.Notes = append(res.Notes, fmt.Sprintf("the enqueue ended %.2fs after the first due time: raise -lead", over.Seconds()))
	}
	logf("%s %s: enqueued in %.2fs = %.0f/s; first due in %.2fs", pr.Name(), scenario, res.EnqueueS, res.EnqueueRate, time.Until(p.firstDue).Seconds())

	// wait for every job, then -settle more for duplicates, or until
	// -grace after the last due time
	series := benchkit.StartSeries(cpuEvery, benchkit.ReadMark)
	defer series.Stop()
	deadline := lastDue.Add(cfg.grace)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var allAt time.Time
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case now := <-tick.C:
			if allAt.IsZero() && int(rec.distinct.Load()) >= n {
				allAt = now
			}
			done = !allAt.IsZero() && now.Sub(allAt) >= cfg.settle || now.After(deadline)
		}
	}
	series.Stop()
	if err := stop(); err != nil {
		res.Notes = append(res.Notes, "stop: "+err.Error())
	}

	// evaluate
	late := make([]time.Duration, 0, n)
	var first, last int64
	for i := range n {
		t := rec.recv[i].Load()
		if t == 0 {
			res.Lost++
			continue
		}
		if first == 0 || t < first {
			first = t
		}
		last = max(last, t)
		d := time.Duration(t - p.due(i).UnixNano())
		if d < 0 {
			res.Early++
			if t < p.due(i).Truncate(time.Second).UnixNano() {
				res.EarlyBeforeSecond++
			}
		}
		late = append(late, d)
	}
	res.Received = len(late)
	res.Duplicates = int(rec.duplicates.Load())
	res.Unexpected = int(rec.unexpected.Load())
	if res.Received > 1 && last > first {
		res.DrainRate = float64(res.Received-1) / time.Duration(last-first).Seconds()
	}
	if first != 0 {
		res.FirstReceiptS = time.Unix(0, first).Sub(p.firstDue).Seconds()
		res.LastReceiptS = time.Unix(0, last).Sub(p.firstDue).Seconds()
	}
	if time.Duration(last-first) >= minDrainCPUSpan {
		if a, b, ok := series.Window(time.Unix(0, first), time.Unix(0, last)); ok {
			u := cpuBetween(a, b)
			between := 0
			for i := range n {
				if t := rec.recv[i].Load(); t >= a.When.UnixNano() && t <= b.When.UnixNano() {
					between++
				}
			}
			res.DrainCPU = &u
			if between > 0 {
				res.CPUPerJobUS = u.MachineBusyS / float64(between) * 1e6
			}
		}
	}
	res.Lateness = benchkit.Summarize(late)
	if res.Early > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d jobs received early, at most %.1f ms; %d of them before the whole second their due time falls in",
			res.Early, -res.Lateness.Min, res.EarlyBeforeSecond))
	}
	logf("%s %s: received %d/%d, drain %.0f/s, lateness p50 %.2f p99 %.2f p99.9 %.2f max %.2f ms, early %d, lost %d, duplicates %d",
		pr.Name(), scenario, res.Received, n, res.DrainRate, res.Lateness.P50, res.Lateness.P99, res.Lateness.P999, res.Lateness.Max,
		res.Early, res.Lost, res.Duplicates)
	return res, nil
}
