// Package clocksync keeps an instance ringing by MySQL's clock. A ring must
// never come before its time, and every instance decides when a clock is
// due by its own wall clock; an instance whose clock runs ahead of the
// others' (no NTP, a VM resumed from a pause) would ring its shards' clocks
// early by as much. So the instance reads MySQL's clock now and then and
// estimates its own offset from it, as NTP does: MySQL's time was read at
// some moment between the query's send (t0) and its answer (t1), so the
// local clock is ahead of MySQL's by at least t0−db and at most t1−db, and
// the last readings together bound it tighter. When it may be ahead by more
// than a tolerance, the ring loop's time is moved back by the upper bound,
// which can only make rings later (by at most the round trip), never early;
// when it is surely behind by more, it is moved forward as far as it surely
// is.
package clocksync

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/ring"
)

// Tolerance is the offset from MySQL's clock that is left alone: two clocks
// kept by NTP agree far better, and within it a correction would only move
// rings by the noise of the estimate.
const Tolerance = 10 * time.Millisecond

// window is how many recent readings bound the offset together.
const window = 8

type sample struct {
	lo, hi time.Duration // the local clock is ahead of MySQL's by lo..hi
}

// Sync is the instance's clock, corrected toward MySQL's (a ring.Clock).
type Sync struct {
	base func() time.Time
	log  *slog.Logger

	correction atomic.Int64 // nanoseconds subtracted from base()

	mu      sync.Mutex
	samples []sample
	warned  bool // the clocks were said to differ
	offset  prometheus.Gauge
}

// New returns a Sync with no correction yet. base is the local clock
// (time.Now when nil).
func New(base func() time.Time, log *slog.Logger, reg prometheus.Registerer) *Sync {
	if base == nil {
		base = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sync{base: base, log: log, offset: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "clockd_clock_offset_seconds",
		Help: "This instance's clock minus MySQL's, as bounded by the last 8 readings of MySQL's clock (one every 5 s). " +
			"Beyond 10 ms either way the ring loop rings by MySQL's clock.",
	})}
	if reg != nil {
		reg.MustRegister(s.offset)
	}
	return s
}

// Now is the local clock less the correction.
func (s *Sync) Now() time.Time { return s.base().Add(-time.Duration(s.correction.Load())) }

// Local is the local clock itself: shard leases are reckoned by it.
func (s *Sync) Local() time.Time { return s.base() }

// NewTimer is a real timer: durations are the same on either clock.
func (s *Sync) NewTimer(d time.Duration) ring.Timer { return ring.RealClock{}.NewTimer(d) }

// Correction is how far Now is behind the local clock.
func (s *Sync) Correction() time.Duration { return time.Duration(s.correction.Load()) }

// Observe takes one reading: MySQL's clock said db for a query sent at the
// local time t0 and answered at t1.
func (s *Sync) Observe(t0, db, t1 time.Time) {
	if t1.Before(t0) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	x := sample{lo: t0.Sub(db), hi: t1.Sub(db)}
	s.samples = append(s.samples, x)
	if len(s.samples) > window {
		s.samples = s.samples[len(s.samples)-window:]
	}
	// Each reading bounds the offset; together they bound it tighter. When
	// they disagree, the local clock was stepped (NTP, a VM resumed): only
	// the newest reading counts.
	best := s.samples[0]
	for _, y := range s.samples[1:] {
		best.lo, best.hi = max(best.lo, y.lo), min(best.hi, y.hi)
	}
	if best.lo > best.hi {
		s.samples = append(s.samples[:0], x)
		best = x
	}
	mid := best.lo + (best.hi-best.lo)/2
	s.offset.Set(mid.Seconds())
	was := time.Duration(s.correction.Load())
	var corr time.Duration
	switch {
	// possibly ahead by more than the tolerance: moved back by as much as
	// it can be ahead (never early); surely behind by more: moved forward
	// by as much as it surely is
	case best.hi > Tolerance || best.hi < -Tolerance:
		corr = best.hi
	// once correcting, keep at it until the offset is well within the
	// tolerance, so that an offset near it does not flap
	case was != 0 && (best.hi > Tolerance/2 || best.hi < -Tolerance/2):
		corr = best.hi
	}
	s.correction.Store(int64(corr))
	// said when the clocks surely differ, not for a slow reading that
	// cannot tell, and once more when they agree again
	surely := best.lo > Tolerance || best.hi < -Tolerance
	switch {
	case surely && !s.warned:
		s.warned = true
		s.log.Warn("this instance's clock differs from MySQL's: ringing by MySQL's clock (keep the clocks in sync with NTP)",
			"offset", mid.Round(time.Millisecond).String(), "correction", corr.Round(time.Millisecond).String())
	case s.warned && corr == 0:
		s.warned = false
		s.log.Info("this instance's clock agrees with MySQL's again", "offset", mid.Round(time.Millisecond).String())
	}
}

// Read takes one reading of MySQL's clock with read.
func (s *Sync) Read(ctx context.Context, read func(context.Context) (time.Time, error)) error {
	t0 := s.base()
	db, err := read(ctx)
	t1 := s.base()
	if err != nil {
		return err
	}
	s.Observe(t0, db, t1)
	return nil
}

// Run reads MySQL's clock with read every interval until ctx is done.
func (s *Sync) Run(ctx context.Context, read func(context.Context) (time.Time, error), interval time.Duration) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, interval)
		_ = s.Read(rctx, read) // MySQL away: the last estimate stands
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}
