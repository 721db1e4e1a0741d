package preload

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/ring"
)

// loader fills the queue with one shard's clocks.
//
// Two ranges, two cursors: the backlog (clocks already due when the shard
// was acquired, next_try_time <= boundary) and the live range (boundary,
// now+window]. Everything up to a cursor is in memory or being rung; the
// cursors only move forward between full rescans, so loading never
// rewrites rows (no index churn) and never reads the same rows twice.
type loader struct {
	m        *Manager
	shard    int
	epoch    int64
	boundary time.Time

	mu         sync.Mutex
	validUntil time.Time // local monotonic reckoning of the lease
	liveAt     time.Time
	liveID     int64
	backAt     time.Time
	backID     int64
	backDone   bool
	nextFull   time.Time // when the next full rescan falls due (see rescanAfter)
	movedBack  uint64    // bumped when the live cursor moves back (reset) or an offer found the quota full
	backReset  uint64    // bumped when the backlog cursor moves back (reset)

	rescanSeen int64 // the last clock_shard.rescan_at acted on (lease keeper only)

	capped atomic.Bool // a class hit its quota on the last pass
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// setValid extends the local reckoning of the lease. When it had lapsed, or
// had less than LeaseMargin left (a pause, a slow lease round), the ring
// loop may have dropped clocks of this shard it could not claim: rescan so
// that they come back.
func (l *loader) setValid(t time.Time) {
	l.mu.Lock()
	lapsed := !l.validUntil.IsZero() && !time.Now().Add(l.m.cfg.LeaseMargin).Before(l.validUntil)
	l.validUntil = t
	l.mu.Unlock()
	if lapsed && !t.IsZero() {
		l.reset()
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

func (l *loader) invalidate() { l.setValid(time.Time{}) }

func (l *loader) valid(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Before(l.validUntil)
}

func (l *loader) until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil
}

// rescan starts a full rescan now.
func (l *loader) rescan() {
	l.reset()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// reset starts a full rescan of both ranges.
func (l *loader) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.liveAt, l.liveID = l.boundary, math.MaxInt64
	l.backAt, l.backID = time.UnixMilli(math.MinInt64/2), 0
	l.backDone = false
	l.nextFull = l.rescanAfter(time.Now())
	// a load running meanwhile (reset is called by the lease keeper too)
	// must not move the cursors forward again when its query ends
	l.movedBack++
	l.backReset++
}

func (l *loader) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-l.wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		if !time.Now().Before(l.nextFullTime()) {
			l.recoverStale(ctx)
			l.reset()
		}
		if err := l.load(ctx); err != nil {
			failures++
			if ctx.Err() == nil {
				if ok, held := l.m.loadFails.Allow("load", 1); ok {
					l.m.log.Warn("loading shard failed", "shard", l.shard, "err", err, "failures", failures,
						"like_failures_not_logged", held)
				}
			}
		} else {
			failures = 0
		}
		t.Reset(l.m.cfg.Interval)
	}
}

func (l *loader) nextFullTime() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nextFull
}

// rescanAfter is the first moment after t at which the shard's full rescan
// falls due. Each shard has its own moment in every Rescan interval (shard
// i at i/Shards of it, by the wall clock), so that the shards of an
// instance, and of a cluster, do not re-read their windows all at once: at
// 14,000 rings/s the 32 shards' windows hold 140,000 clocks, and reading
// them in one go stalled the rings for 200 ms (2 cores). A rescan comes
// within Rescan of the previous one, and every Rescan while none is asked
// for in between.
func (l *loader) rescanAfter(t time.Time) time.Time {
	r := int64(l.m.cfg.Rescan)
	if r <= 0 {
		return t // no interval: a full rescan at every pass
	}
	n := int64(max(l.m.cfg.Shards, 1))
	phase := r / n * (int64(l.shard) % n)
	since := ((t.UnixNano()-phase)%r + r) % r // since the shard's last moment, in [0, r)
	// t plus the wait, not the wall-clock instant: t's monotonic reading
	// carries over, so a step of the system clock (NTP setting it back an
	// hour) neither delays the rescan nor brings it forward
	return t.Add(time.Duration(r - since))
}

// recoverStale puts back clocks left firing too long (the safety net for a
// claim that was never published nor recorded).
func (l *loader) recoverStale(ctx context.Context) {
	now := l.m.now()
	n, err := l.m.store.RecoverFiring(ctx, l.shard, l.epoch, now.Add(-l.m.cfg.FiringTimeout), l.m.cfg.Held(), now)
	if err != nil {
		return
	}
	if n > 0 {
		l.m.log.Warn("recovered clocks stuck firing", "shard", l.shard, "clocks", n)
	}
}

func (l *loader) load(ctx context.Context) error {
	quota := l.m.quota()
	capped := false
	// backlog: overdue when the shard was acquired
	for {
		l.mu.Lock()
		done, at, id, gen := l.backDone, l.backAt, l.backID, l.backReset
		l.mu.Unlock()
		if done {
			break
		}
		room := quota - l.m.q.Count(l.shard, ring.Backlog)
		if room <= 0 {
			capped = true
			break
		}
		limit := min(room, l.m.cfg.Batch)
		stamp := l.m.q.BeginLoad()
		rows, err := l.m.store.LoadDue(ctx, l.shard, at, id, l.boundary, limit)
		l.m.q.AddLoaded(stamp, ring.Backlog, rows...)
		if err != nil {
			return err
		}
		l.mu.Lock()
		if l.backReset != gen {
			l.mu.Unlock()
			continue // reset while the query ran: start over
		}
		if len(rows) > 0 {
			last := rows[len(rows)-1]
			l.backAt, l.backID = last.At, last.ID
		}
		if len(rows) < limit {
			l.backDone = true
		}
		l.mu.Unlock()
	}
	// live: up to now + window
	until := l.m.now().Add(l.m.cfg.Window).Truncate(time.Millisecond)
	for {
		room := quota - l.m.q.Count(l.shard, ring.Live)
		if room <= 0 {
			capped = true
			break
		}
		limit := min(room, l.m.cfg.Batch)
		l.mu.Lock()
		at, id, moved := l.liveAt, l.liveID, l.movedBack
		l.mu.Unlock()
		if !at.Before(until) && id == math.MaxInt64 {
			break
		}
		stamp := l.m.q.BeginLoad()
		rows, err := l.m.store.LoadDue(ctx, l.shard, at, id, until, limit)
		l.m.q.AddLoaded(stamp, ring.Live, rows...)
		if err != nil {
			return err
		}
		l.mu.Lock()
		if l.movedBack != moved {
			// offer or reset moved the cursor back while the query ran,
			// for clocks the query may not have seen: keep it, read again.
			l.mu.Unlock()
			continue
		}
		if len(rows) < limit {
			// everything up to until is loaded
			if until.After(l.liveAt) || (until.Equal(l.liveAt) && l.liveID != math.MaxInt64) {
				l.liveAt, l.liveID = until, math.MaxInt64
			}
		} else {
			last := rows[len(rows)-1]
			l.liveAt, l.liveID = last.At, last.ID
		}
		short := len(rows) < limit
		l.mu.Unlock()
		if short {
			break
		}
	}
	l.capped.Store(capped)
	return nil
}

// offer takes a clock created or moved while this shard is owned. Inside
// the window it goes into memory at once; when the shard is at its quota,
// the live cursor is moved back so that the loader reads it in turn.
func (l *loader) offer(d alarm.Due) {
	now := l.m.now()
	if d.At.After(now.Add(l.m.cfg.Window)) {
		return // the loader finds it when its time nears
	}
	if l.m.q.Count(l.shard, ring.Live) < l.m.quota() {
		l.m.q.Add(ring.Live, d)
		return
	}
	l.mu.Lock()
	if d.At.Before(l.liveAt) || (d.At.Equal(l.liveAt) && d.ID <= l.liveID) {
		l.liveAt, l.liveID = d.At, d.ID-1
	}
	// Bumped even when the clock lies after the cursor: a load running now
	// may be reading the range it lies in, from before its commit; at its
	// end it would move the cursor past the clock (to its until), and the
	// clock would wait for the next full rescan.
	l.movedBack++
	l.mu.Unlock()
	l.capped.Store(true)
}
