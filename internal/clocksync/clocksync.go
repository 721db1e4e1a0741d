// Package clocksync makes an instance ring by MySQL's clock. A ring must
// never come before its time, and if each instance judged that by its own
// wall clock, one whose clock runs ahead of the others' (no NTP, a VM
// resumed from a pause) would ring its shards' clocks early by as much. So
// the instance reads MySQL's clock now and then. MySQL's time was read at
// some moment between the query's send and its answer, so at a later moment
// t it is at least db + (t − answered) and at most db + (t − sent), counted
// on the local monotonic clock (which no step of the wall clock moves), less
// or plus what the two clocks may drift apart meanwhile. The ring loop's
// time is the local wall clock kept between the highest such lower bound of
// the recent readings and Slack above it: where the two clocks agree (NTP,
// or MySQL on the same machine) it is the wall clock itself, and wherever
// they differ it is never more than Slack ahead of MySQL's clock, whatever
// the wall clock does between readings.
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

// MaxDrift is how fast the local monotonic clock and MySQL's may run apart,
// in parts per million: each reading's bounds widen by as much with its
// age, so an old reading cannot hide a drift.
const MaxDrift = 200

// Slack is how far above the surely reached MySQL time the ring time may
// follow the local wall clock: about the round trip and drift of a reading,
// so that clocks in agreement ring by the wall clock, not a little late.
const Slack = time.Millisecond

// WarnOffset is the offset between this instance's wall clock and MySQL's
// past which a WARN says so (the ring times follow MySQL's whatever it is).
const WarnOffset = 100 * time.Millisecond

// maxAge: a reading older than this is dropped (its bounds have widened by
// 24 ms by then).
const maxAge = 2 * time.Minute

func drift(d time.Duration) time.Duration { return d / 1_000_000 * MaxDrift }

// reading is one reading of MySQL's clock: db, read between the local
// monotonic instants sent and answered.
type reading struct {
	db             time.Time
	sent, answered time.Duration
}

// lower and upper bound MySQL's time at the local monotonic instant at
// (at or after the reading).
func (r reading) lower(at time.Duration) time.Time {
	e := at - r.answered
	return r.db.Add(e - drift(e))
}

func (r reading) upper(at time.Duration) time.Time {
	e := at - r.sent
	return r.db.Add(e + drift(e))
}

// Sync is the instance's ring clock, MySQL's as seen from here (a
// ring.Clock).
type Sync struct {
	wall func() time.Time     // the local wall clock
	mono func() time.Duration // the local monotonic clock
	log  *slog.Logger

	anchor atomic.Pointer[reading] // the reading Now counts from; nil: none yet

	mu       sync.Mutex
	readings []reading // the last maxAge of them
	warned   bool      // a WARN said the clocks differ
	offset   prometheus.Gauge
}

// New returns a Sync that follows the local clock until its first reading.
func New(log *slog.Logger, reg prometheus.Registerer) *Sync {
	start := time.Now()
	return newSync(time.Now, func() time.Duration { return time.Since(start) }, log, reg)
}

func newSync(wall func() time.Time, mono func() time.Duration, log *slog.Logger, reg prometheus.Registerer) *Sync {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sync{wall: wall, mono: mono, log: log, offset: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "clockd_clock_offset_seconds",
		Help: "This instance's wall clock minus MySQL's, at the last reading of MySQL's clock (one a second). " +
			"clockd rings by MySQL's clock whatever it is; keep the machines' clocks in sync all the same.",
	})}
	if reg != nil {
		reg.MustRegister(s.offset)
	}
	return s
}

// Now is the local wall clock kept between MySQL's time as surely reached
// (the best lower bound of the recent readings, counted on the monotonic
// clock) and Slack above it. Before the first reading, the wall clock.
func (s *Sync) Now() time.Time {
	w := s.wall()
	a := s.anchor.Load()
	if a == nil {
		return w
	}
	lo := a.lower(s.mono())
	if hi := lo.Add(Slack); w.After(hi) {
		return hi
	}
	if w.Before(lo) {
		return lo
	}
	return w
}

// Local is the local clock: shard leases are reckoned by it.
func (s *Sync) Local() time.Time { return s.wall() }

// NewTimer is a real timer: durations are the same on either clock.
func (s *Sync) NewTimer(d time.Duration) ring.Timer { return ring.RealClock{}.NewTimer(d) }

// Observe takes one reading: MySQL's clock said db for a query sent at the
// local monotonic instant sent and answered at answered, when the local
// wall clock said wallAt.
func (s *Sync) Observe(sent, answered time.Duration, db, wallAt time.Time) {
	if answered < sent {
		return
	}
	x := reading{db: db, sent: sent, answered: answered}
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.readings[:0]
	for _, r := range s.readings {
		// too old, or contradicting the new one (MySQL's clock was
		// stepped): only the newer readings count
		if answered-r.answered > maxAge || r.lower(answered).After(x.upper(answered)) || x.lower(answered).After(r.upper(answered)) {
			continue
		}
		kept = append(kept, r)
	}
	s.readings = append(kept, x)
	// the best lower bound: every bound grows at the same rate, so the
	// reading whose bound is highest now stays highest
	best := s.readings[0]
	for _, r := range s.readings[1:] {
		if r.lower(answered).After(best.lower(answered)) {
			best = r
		}
	}
	s.anchor.Store(&best)

	mid := db.Add((answered - sent) / 2)
	off := wallAt.Sub(mid)
	s.offset.Set(off.Seconds())
	switch big := off > WarnOffset || off < -WarnOffset; {
	case big && !s.warned:
		s.warned = true
		s.log.Warn("this instance's clock differs from MySQL's; clockd rings by MySQL's clock (keep the clocks in sync with NTP)",
			"offset", off.Round(time.Millisecond).String())
	case !big && s.warned && off < WarnOffset/2 && off > -WarnOffset/2:
		s.warned = false
		s.log.Info("this instance's clock agrees with MySQL's again", "offset", off.Round(time.Millisecond).String())
	}
}

// Read takes one reading of MySQL's clock with read.
func (s *Sync) Read(ctx context.Context, read func(context.Context) (time.Time, error)) error {
	sent := s.mono()
	db, err := read(ctx)
	answered, wallAt := s.mono(), s.wall()
	if err != nil {
		return err
	}
	s.Observe(sent, answered, db, wallAt)
	return nil
}

// Run reads MySQL's clock with read every interval until ctx is done.
func (s *Sync) Run(ctx context.Context, read func(context.Context) (time.Time, error), interval time.Duration) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		_ = s.Read(rctx, read) // MySQL away: the last readings stand, their bounds widening
		cancel()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}
