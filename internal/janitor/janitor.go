// Package janitor keeps the clock table to the clocks that matter: one
// clockd instance at a time (a lease in MySQL) moves finished clocks past
// their retention to clock_history in small throttled batches, keeps the
// history's day partitions (created ahead, dropped whole after their
// keep), and counts clocks per status for clockd_clocks.
package janitor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
)

// LeaseName is the janitor's row in clock_lease.
const LeaseName = "janitor"

// Store is what the janitor needs of MySQL.
type Store interface {
	HoldLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, name, owner string) error
	FinishedBefore(ctx context.Context, st alarm.Status, before, afterAt time.Time, afterID int64, limit int) ([]int64, time.Time, error)
	MoveFinished(ctx context.Context, st alarm.Status, ids []int64, before, dropBefore time.Time, history bool) (archived, deleted int64, err error)
	HistoryDays(ctx context.Context) ([]time.Time, error)
	AddHistoryDays(ctx context.Context, days []time.Time) error
	DropHistoryDays(ctx context.Context, days []time.Time) error
	CountClocks(ctx context.Context) (map[alarm.Status]int64, error)
}

// Config tunes the janitor. Zero values take the defaults.
type Config struct {
	InstanceID string
	// Retention: how long rung and cancelled clocks stay in clock.
	Retention time.Duration
	// RetentionFailed: the same for expired and dead clocks.
	RetentionFailed time.Duration
	// HistoryKeep: how long clock_history keeps them; NoHistory: none,
	// finished clocks are deleted.
	HistoryKeep time.Duration
	NoHistory   bool
	// PartitionsAhead: days of partitions kept ready past today.
	PartitionsAhead int
	// Interval between runs (at most a minute).
	Interval time.Duration
	// Batch: the most clocks per move transaction (batches adapt below
	// it, see pace); Movers: how many batches move at once (default 2).
	Batch  int
	Movers int
	// Busy reports whether the ring path has work now (clocks due or in
	// flight); nil: never. While it has, each mover works at most
	// BusyShare of the time (default 0.1; a tenth of it on a backlog, see
	// pace) and rests at least Pause between batches; while it has not,
	// movers do not rest.
	Busy      func() bool
	BusyShare float64
	Pause     time.Duration
	// LeaseTTL: a dead holder's lease is taken over within 1.25 × it.
	LeaseTTL time.Duration
	// CountEvery: how often the holder counts clocks per status.
	CountEvery time.Duration
	Now        func() time.Time // the clock retention is judged by
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

func (c *Config) defaults() {
	if c.Retention <= 0 {
		c.Retention = 24 * time.Hour
	}
	if c.RetentionFailed <= 0 {
		c.RetentionFailed = 7 * 24 * time.Hour
	}
	if c.HistoryKeep <= 0 && !c.NoHistory {
		c.HistoryKeep = 30 * 24 * time.Hour
	}
	if c.PartitionsAhead <= 0 {
		c.PartitionsAhead = 3
	}
	if c.Interval <= 0 {
		c.Interval = 30 * time.Second
	}
	if c.Batch <= 0 {
		c.Batch = 1000
	}
	if c.BusyShare <= 0 || c.BusyShare > 1 {
		c.BusyShare = 0.1
	}
	if c.Pause < 0 {
		c.Pause = 0
	}
	if c.Movers <= 0 {
		c.Movers = 2
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.CountEvery <= 0 {
		c.CountEvery = 30 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Janitor is one instance's janitor; Run it. Only the lease holder works.
type Janitor struct {
	cfg   Config
	store Store
	log   *slog.Logger
	// abandoned: the instance id is another process's now (Abandon): its
	// lease is that process's, and is not released
	abandoned atomic.Bool

	rows       *prometheus.CounterVec
	partitions *prometheus.CounterVec
	days       prometheus.Gauge
	lastRun    prometheus.Gauge
	holder     prometheus.Gauge
	errs       prometheus.Counter
	yielded    prometheus.Counter

	mu   sync.Mutex
	held bool
	// leaseFailing: the last renewal failed (logged once, not per attempt)
	leaseFailing bool
	counts       map[alarm.Status]int64
	countedAt    time.Time

	ddlRetryAt time.Time // no partition change before (after one failed; runs only)
}

// partitionRetry is how long the janitor leaves partitions alone after a
// change failed. A change fails when another session holds clock_history's
// metadata lock (a long report, an open transaction that read it), and
// while it waits for that lock, writes to clock_history queue behind it
// (up to twice mysql's 1 s wait): trying at every run would stall them
// every interval. Days are made janitor.partitions_ahead ahead, so the
// wait costs nothing; clocks of a day without its partition go to pmax.
const partitionRetry = 5 * time.Minute

// New makes a janitor; it registers its metrics, clockd_clocks{status}
// among them (exported only while this instance holds the lease, so that
// a sum over instances counts every clock once).
func New(cfg Config, store Store) *Janitor {
	cfg.defaults()
	j := &Janitor{cfg: cfg, store: store, log: cfg.Logger.With("component", "janitor"),
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "clockd_janitor_rows_total",
			Help: "Finished clocks the janitor took out of clock: archived (moved to clock_history) or deleted."}, []string{"action"}),
		partitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "clockd_janitor_partitions_total",
			Help: "Day partitions of clock_history the janitor created or dropped."}, []string{"action"}),
		days: prometheus.NewGauge(prometheus.GaugeOpts{Name: "clockd_janitor_history_partitions",
			Help: "Day partitions clock_history has (as last seen by the janitor holder)."}),
		lastRun: prometheus.NewGauge(prometheus.GaugeOpts{Name: "clockd_janitor_last_run_timestamp_seconds",
			Help: "When this instance's janitor last completed a run (0: never)."}),
		holder: prometheus.NewGauge(prometheus.GaugeOpts{Name: "clockd_janitor_holder",
			Help: "1 while this instance holds the janitor lease."}),
		yielded: prometheus.NewCounter(prometheus.CounterOpts{Name: "clockd_janitor_yield_seconds_total",
			Help: "Time the janitor's movers rested to leave MySQL to the rings (janitor.busy_percent), summed over movers."}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{Name: "clockd_janitor_errors_total",
			Help: "Janitor runs or steps that failed (logged; retried at the next run)."}),
	}
	j.rows.WithLabelValues("archived")
	j.rows.WithLabelValues("deleted")
	j.partitions.WithLabelValues("created")
	j.partitions.WithLabelValues("dropped")
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(j.rows, j.partitions, j.days, j.lastRun, j.holder, j.errs, j.yielded, countsCollector{j})
	}
	return j
}

// Held reports whether this instance holds the janitor lease.
func (j *Janitor) Held() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.held
}

func (j *Janitor) setHeld(h bool) {
	j.mu.Lock()
	changed := j.held != h
	j.held = h
	if !h {
		// Forget the counts and when they were taken, so that the next
		// holder run counts at once: a lease lost for one slow renewal
		// must not hide clockd_clocks for a whole CountEvery.
		j.counts, j.countedAt = nil, time.Time{}
	}
	j.mu.Unlock()
	if h {
		j.holder.Set(1)
	} else {
		j.holder.Set(0)
	}
	if changed {
		j.log.Info("janitor lease", "held", h, "instance", j.cfg.InstanceID)
	}
}

// Abandon makes Run end without giving the lease up: the instance id it
// is held under is another process's now (alarm.ErrInstanceTaken), and so
// is the lease (found by review: released, a second janitor could run
// beside that process's for a lease term).
func (j *Janitor) Abandon() { j.abandoned.Store(true) }

// Run holds or waits for the lease and, while held, runs every Interval,
// until ctx ends; then it gives the lease up (unless abandoned).
func (j *Janitor) Run(ctx context.Context) error {
	defer func() {
		if j.Held() && !j.abandoned.Load() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := j.store.ReleaseLease(rctx, LeaseName, j.cfg.InstanceID); err != nil {
				j.log.Warn("janitor lease not released", "err", err)
			}
			j.setHeld(false)
		}
	}()
	// The holder renews every third of the TTL; an instance waiting for
	// the lease tries it every quarter, as shard leases are tried, so that
	// a dead holder's lease is taken within 1.25 × the TTL of its death
	// (its last renewal + TTL, then at most one try).
	renew, try := j.cfg.LeaseTTL/3, j.cfg.LeaseTTL/4
	var lastRun time.Time
	for {
		if j.hold(ctx) && (lastRun.IsZero() || time.Since(lastRun) >= j.cfg.Interval) {
			lastRun = time.Now()
			if err := j.RunOnce(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, errLeaseLost) {
				j.errs.Inc()
				j.log.Warn("janitor run failed; retrying at the next run", "err", err)
			}
		}
		wait := min(try, j.cfg.Interval)
		if j.Held() {
			wait = min(renew, max(j.cfg.Interval-time.Since(lastRun), 0))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// hold takes or renews the lease and reports whether it is held.
func (j *Janitor) hold(ctx context.Context) bool {
	lctx, cancel := context.WithTimeout(ctx, j.cfg.LeaseTTL/3)
	defer cancel()
	held, err := j.store.HoldLease(lctx, LeaseName, j.cfg.InstanceID, j.cfg.LeaseTTL)
	// one warning when renewals start to fail (an outage of MySQL), one
	// line when they work again: not one per attempt (every LeaseTTL/3)
	failing := err != nil && ctx.Err() == nil // not the janitor's own stop
	j.mu.Lock()
	was := j.leaseFailing
	j.leaseFailing = failing
	j.mu.Unlock()
	switch {
	case failing && !was:
		j.log.Warn("janitor lease cannot be renewed; retrying quietly", "err", err)
	case failing:
		j.log.Debug("janitor lease still cannot be renewed", "err", err)
	case err == nil && was:
		j.log.Info("janitor lease renewals work again")
	}
	if err != nil {
		held = false
	}
	j.setHeld(held)
	return held
}

// errLeaseLost ends a run whose lease another instance took.
var errLeaseLost = errors.New("janitor lease lost")

// RunOnce does one janitor run: partitions, then the moves, then the
// counts. A keeper renews the lease every LeaseTTL/3 while it works, however
// long one step takes (a partition change on a busy server can take longer
// than the TTL), and stops the run when the lease is lost.
func (j *Janitor) RunOnce(ctx context.Context) error {
	start := time.Now()
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		tick := time.NewTicker(j.cfg.LeaseTTL / 3)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
				// the run's own end must not look like a lost lease:
				// renew on the caller's context
				if !j.hold(ctx) && runCtx.Err() == nil {
					stop(errLeaseLost)
					return
				}
			}
		}
	}()
	defer func() { stop(nil); <-kept }()
	lost := func(err error) error { // the lease's loss explains a cancelled step
		if errors.Is(context.Cause(runCtx), errLeaseLost) {
			return errLeaseLost
		}
		return err
	}
	var errs []error
	if now := j.cfg.Now(); !now.Before(j.ddlRetryAt) {
		if err := j.partitionsStep(runCtx); err != nil {
			errs = append(errs, lost(err))
			if runCtx.Err() == nil {
				j.ddlRetryAt = now.Add(partitionRetry)
			}
		}
	}
	archived, deleted, err := j.moveStep(runCtx)
	if err != nil {
		errs = append(errs, lost(err))
	}
	if err := j.countStep(runCtx, true); err != nil {
		errs = append(errs, lost(err))
	}
	if archived+deleted > 0 {
		j.log.Info("janitor run", "archived", archived, "deleted", deleted, "took", time.Since(start).Round(time.Millisecond).String())
	}
	if errors.Is(context.Cause(runCtx), errLeaseLost) {
		return errLeaseLost
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	j.lastRun.Set(float64(time.Now().UnixMilli()) / 1000)
	return nil
}

// class is a retention class: statuses and how long they stay.
type class struct {
	statuses  []alarm.Status
	retention time.Duration
}

// moveStep moves every finished clock past its retention, batch by batch:
// one finder reads the next batch's ids from the (status, update_time)
// index while Movers batches move, each in a transaction of its own on a
// connection of its own. The batches are disjoint and each locks its rows
// in id order, so they never wait for each other; a drain uses as many
// MySQL threads as there are movers. The pace sizes the batches and, while
// rings are due, rests the movers to leave MySQL to the ring path.
func (j *Janitor) moveStep(ctx context.Context) (archived, deleted int64, err error) {
	now := j.cfg.Now()
	// Clocks history would drop already are deleted, not copied: those of
	// the UTC days whose partitions are dropped (PlanPartitions), not all
	// that finished more than keep ago. A clock of a day still kept must be
	// archived: its key's older clocks (archived when it was re-armed) are
	// in that day or earlier, and a GET of the key would answer one of them.
	dropBefore := now.Add(-j.cfg.HistoryKeep).UTC().Truncate(24 * time.Hour)
	if j.cfg.NoHistory {
		dropBefore = now
	}
	p := newPace(j.cfg) // one per run: a run's length raises its share
	classes := []class{
		{[]alarm.Status{alarm.StatusRung, alarm.StatusCancelled}, j.cfg.Retention},
		{[]alarm.Status{alarm.StatusExpired, alarm.StatusDead}, j.cfg.RetentionFailed},
	}
	// A status whose moves fail does not keep the others in clock: each is
	// tried, and the first error is the run's.
	var first error
	for _, cl := range classes {
		before := now.Add(-cl.retention)
		for _, st := range cl.statuses {
			a, d, err := j.moveStatus(ctx, p, st, before, dropBefore)
			archived, deleted = archived+a, deleted+d
			if err != nil {
				if ctx.Err() != nil {
					return archived, deleted, err
				}
				first = cmp.Or(first, err)
			}
		}
	}
	return archived, deleted, first
}

// restCheck: a mover's rest ends early when the ring path has had no
// work for this long (a backlog's rests last up to 99 moves' time).
const restCheck = 100 * time.Millisecond

// rest waits d, or until the ring path has no work (a mover rests only
// for it: pace gives a rest only while Busy says so), counting the time in
// clockd_janitor_yield_seconds_total; false when ctx ended.
func (j *Janitor) rest(ctx context.Context, d time.Duration) bool {
	start := time.Now()
	defer func() { j.yielded.Add(time.Since(start).Seconds()) }()
	end := time.NewTimer(d)
	defer end.Stop()
	check := time.NewTicker(restCheck)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-end.C:
			return true
		case <-check.C:
			if !j.cfg.Busy() {
				return true
			}
		}
	}
}

// batch is the ids of one move; backlog: even its newest clock finished
// more than backlogLag before the retention boundary (see pace).
type batch struct {
	ids     []int64
	backlog bool
}

// moveStatus moves the clocks of one finished status that finished before
// `before`: the finder (this goroutine) hands batches to the movers.
func (j *Janitor) moveStatus(ctx context.Context, p *pace, st alarm.Status, before, dropBefore time.Time) (archived, deleted int64, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	batches := make(chan batch)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		moved [2]int64
	)
	for range j.cfg.Movers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rest time.Duration // owed by the last batch, taken before the next: none at the end
			for bt := range batches {
				ids := bt.ids
				if rest > 0 && !j.rest(ctx, rest) {
					return
				}
				start := time.Now()
				a, d, err := j.store.MoveFinished(ctx, st, ids, before, dropBefore, !j.cfg.NoHistory)
				if err != nil {
					cancel(err)
					return
				}
				j.rows.WithLabelValues("archived").Add(float64(a))
				j.rows.WithLabelValues("deleted").Add(float64(d))
				mu.Lock()
				moved[0], moved[1] = moved[0]+a, moved[1]+d
				mu.Unlock()
				rest = p.moved(len(ids), time.Since(start), bt.backlog)
			}
		}()
	}
	find := func() error {
		defer close(batches)
		var afterAt time.Time
		var afterID int64
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := j.countStep(ctx, false); err != nil { // a long drain still refreshes them
				j.log.Debug("count clocks", "err", err)
			}
			size := p.batch()
			ids, last, err := j.store.FinishedBefore(ctx, st, before, afterAt, afterID, size)
			if err != nil {
				return err
			}
			if len(ids) == 0 {
				return nil
			}
			select {
			case batches <- batch{ids, before.Sub(last) > backlogLag}:
			case <-ctx.Done():
				return ctx.Err()
			}
			afterAt, afterID = last, ids[len(ids)-1]
			if len(ids) < size {
				return nil
			}
		}
	}
	ferr := find()
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		ferr = cause // a mover's error explains the finder's cancellation
	} else if ferr == nil && cause != nil {
		ferr = cause
	}
	return moved[0], moved[1], ferr
}

// partitionsStep creates the days ahead and drops the days past keep.
func (j *Janitor) partitionsStep(ctx context.Context) error {
	days, err := j.store.HistoryDays(ctx)
	if err != nil {
		return err
	}
	add, drop := PlanPartitions(days, j.cfg.Now(), j.cfg.HistoryKeep, j.cfg.NoHistory, j.cfg.PartitionsAhead)
	dropped, err := j.eachDay(ctx, "dropped", drop, j.store.DropHistoryDays)
	created := 0
	if err == nil {
		created, err = j.eachDay(ctx, "created", add, j.store.AddHistoryDays)
	}
	j.days.Set(float64(len(days) - dropped + created))
	return err
}

// eachDay changes the partitions of days one day per statement and says
// how many it changed. A month in one statement (the first run's) took
// 1.19 s while MariaDB flushed, holding clock_history's metadata lock and
// the janitor's moves behind it; a day alone takes 15 ms on an idle server
// (docs/benchmarks.md).
func (j *Janitor) eachDay(ctx context.Context, action string, days []time.Time, change func(context.Context, []time.Time) error) (int, error) {
	n := 0
	var err error
	for _, d := range days {
		if err = change(ctx, []time.Time{d}); err != nil {
			break
		}
		n++
		j.partitions.WithLabelValues(action).Inc()
	}
	if n > 0 {
		j.log.Info("history partitions "+action, "from", day(days[0]), "to", day(days[n-1]), "count", n)
	}
	return n, err
}

func day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// PlanPartitions says which day partitions to add and drop, given the
// existing days (ascending, midnight UTC), now, the history's keep and how
// many days ahead to have ready. Days are added only after the last
// existing one (they are split off the catch-all partition, in order); with
// no partitions yet, they start at the oldest day still kept, so that
// clocks archived late land in their own day and leave with it. A day is
// dropped when its every clock finished more than keep ago. With no
// history, every past day is dropped and none is added.
func PlanPartitions(existing []time.Time, now time.Time, keep time.Duration, noHistory bool, ahead int) (add, drop []time.Time) {
	today := now.UTC().Truncate(24 * time.Hour)
	horizon := now.Add(-keep)
	if noHistory {
		horizon = now
	}
	for _, d := range existing {
		if !d.AddDate(0, 0, 1).After(horizon) {
			drop = append(drop, d)
		}
	}
	if noHistory {
		return nil, drop
	}
	last := today.AddDate(0, 0, ahead)
	next := horizon.UTC().Truncate(24 * time.Hour)
	if n := len(existing); n > 0 && !existing[n-1].Before(next) {
		next = existing[n-1].AddDate(0, 0, 1)
	}
	for d := next; !d.After(last); d = d.AddDate(0, 0, 1) {
		add = append(add, d)
	}
	return add, drop
}

// countStep refreshes the per-status counts when they are due (or always
// when forced, at the end of a run, if older than half the period).
func (j *Janitor) countStep(ctx context.Context, force bool) error {
	j.mu.Lock()
	age := time.Since(j.countedAt)
	j.mu.Unlock()
	if age < j.cfg.CountEvery && !(force && age >= j.cfg.CountEvery/2) {
		return nil
	}
	counts, err := j.store.CountClocks(ctx)
	if err != nil {
		return fmt.Errorf("count clocks: %w", err)
	}
	j.mu.Lock()
	j.counts, j.countedAt = counts, time.Now()
	j.mu.Unlock()
	return nil
}

// Counts returns the last per-status counts (nil when this instance does
// not hold the lease or has not counted yet).
func (j *Janitor) Counts() map[alarm.Status]int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.held || j.counts == nil {
		return nil
	}
	out := make(map[alarm.Status]int64, len(j.counts))
	for k, v := range j.counts {
		out[k] = v
	}
	return out
}

var countsDesc = prometheus.NewDesc("clockd_clocks",
	"Clocks in the clock table per status, counted by the janitor lease holder (only it exports this) at most every 30 s; "+
		"exact up to 1,000,000 a status; a larger one is counted over several rounds (its last complete count standing meanwhile), "+
		"and a clock that changes within its status meanwhile can be counted twice.", []string{"status"}, nil)

// countsCollector exports clockd_clocks{status} from the holder's counts.
type countsCollector struct{ j *Janitor }

func (c countsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- countsDesc }

func (c countsCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.j.Counts()
	if counts == nil {
		return
	}
	for _, st := range []alarm.Status{alarm.StatusPending, alarm.StatusFiring, alarm.StatusRung, alarm.StatusCancelled, alarm.StatusExpired, alarm.StatusDead} {
		ch <- prometheus.MustNewConstMetric(countsDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
}
