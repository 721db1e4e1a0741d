package ring

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// firer publishes armed clocks when their deadline comes: one timer for the
// earliest, never a fixed poll.
func (l *Loop) firer(ctx context.Context) {
	timer := l.clk.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := l.clk.Now()
		l.mu.Lock()
		var batch []claimed
		for len(l.armed) > 0 && len(batch) < l.cfg.ClaimBatch && !l.armed[0].due.At.After(now) {
			e := heap.Pop(&l.armed).(*entry)
			batch = append(batch, l.clocks[e.due.ID])
			delete(l.clocks, e.due.ID)
		}
		wait := time.Hour
		if len(l.armed) > 0 {
			wait = l.armed[0].due.At.Sub(now)
		}
		l.mu.Unlock()
		if len(batch) > 0 {
			l.fire(ctx, batch, now)
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		case <-l.armWake:
		}
	}
}

// unexpired returns the clocks of batch that may still ring at now, and
// reports the others: expired (past latest_ring_at), or for a recurring
// clock, the occurrence skipped (past its occurrence_deadline).
func (l *Loop) unexpired(batch []claimed, now time.Time) []claimed {
	var expired []int64
	var skipped []alarm.Advance
	ready := make([]claimed, 0, len(batch))
	for _, c := range batch {
		if by := c.RingBy(); !by.IsZero() && passed(now, by) {
			if c.Recurring() {
				// the occurrence is skipped; the clock moves on
				skipped = append(skipped, alarm.AdvanceOf(c.Clock, alarm.StatusExpired, now, now,
					"occurrence_deadline passed before the occurrence could ring"))
				continue
			}
			expired = append(expired, c.ID)
			continue
		}
		ready = append(ready, c)
	}
	if n := len(expired) + len(skipped); n > 0 {
		l.m.rings.WithLabelValues("expired").Add(float64(n))
		l.report(func(r *results) {
			r.expired = append(r.expired, expired...)
			r.advance = append(r.advance, skipped...)
		})
	}
	return ready
}

// fire publishes one batch of due clocks in its own goroutine (bounded by
// the publisher slots) so that the next deadline is not held up by confirms.
//
// Fencing: the lease of each clock's shard is checked after the publish
// slot is taken, right before the publish, and a publish starts only while
// the lease has MinLeaseLeft to run; the wait for its confirms ends when the
// earliest of those leases does. So no ring is sent by an instance whose
// lease (by its own reckoning) has lapsed, and none waits for its confirm
// past it: an unconfirmed one is then a failed attempt, retried later by
// whoever owns the shard.
func (l *Loop) fire(ctx context.Context, batch []claimed, now time.Time) {
	ready := l.unexpired(batch, now)
	if len(ready) == 0 {
		return
	}
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		l.report(func(r *results) {
			for _, c := range ready {
				r.unclaim = append(r.unclaim, c.Clock)
			}
		})
		return
	}
	// The slot may have taken a while (every publisher waiting for its
	// confirms, up to amqp.confirm_timeout): a clock whose latest_ring_at
	// passed meanwhile must not ring.
	now = l.clk.Now()
	if ready = l.unexpired(ready, now); len(ready) == 0 {
		<-l.sem
		return
	}
	var rings []Ring
	var unclaim []alarm.Clock
	var deadline time.Time
	var leases []alarm.Lease
	leaseNow := l.clk.Local()
	for _, c := range ready {
		until := l.feed.ValidUntil(c.Shard, c.epoch)
		if until.Sub(leaseNow) < l.cfg.MinLeaseLeft {
			unclaim = append(unclaim, c.Clock)
			continue
		}
		if deadline.IsZero() || until.Before(deadline) {
			deadline = until
		}
		if !slices.Contains(leases, alarm.Lease{Shard: c.Shard, Epoch: c.epoch}) {
			leases = append(leases, alarm.Lease{Shard: c.Shard, Epoch: c.epoch})
		}
		// the attempts before a replay count: a replayed clock's ring is a repeat
		rings = append(rings, Ring{Clock: c.Clock, Attempt: max(c.Attempts, 1) + c.ReplayedAttempts})
	}
	if len(unclaim) > 0 {
		l.report(func(r *results) { r.unclaim = append(r.unclaim, unclaim...) })
	}
	if len(rings) == 0 {
		<-l.sem
		return
	}
	go func() {
		defer func() { <-l.sem }()
		pctx, cancel := l.leaseBound(ctx, leases, deadline)
		pubStart := l.clk.Now()
		for _, r := range rings {
			if r.Attempt == 1 {
				l.m.publishLate.Observe(pubStart.Sub(r.Clock.RingAt).Seconds())
			}
		}
		res := l.pub.Publish(pctx, rings)
		cancel()
		end := l.clk.Now()
		l.m.publishDur.Observe(end.Sub(pubStart).Seconds())
		var rung []alarm.Rung
		var advance []alarm.Advance
		var failed []alarm.Outcome
		var failedClocks, notSent []alarm.Clock
		var failedBy map[string]failures // made at the first failure: none in the common case
		for i, r := range res {
			c := rings[i].Clock
			at := r.At
			if at.IsZero() {
				at = end
			}
			if r.Err != nil && l.cfg.NotSent(r.Err) {
				// never left this process (broker away): no attempt was made
				l.m.rings.WithLabelValues(l.cfg.ResultLabel(r.Err)).Inc()
				notSent = append(notSent, c)
				continue
			}
			if r.Err == nil {
				if c.Recurring() {
					advance = append(advance, alarm.AdvanceOf(c, alarm.StatusRung, at, end, ""))
				} else {
					rung = append(rung, alarm.Rung{ID: c.ID, At: at})
				}
				if rings[i].Attempt == 1 {
					l.m.lateness.Observe(at.Sub(c.RingAt).Seconds())
				}
				continue
			}
			label := l.cfg.ResultLabel(r.Err)
			l.m.rings.WithLabelValues(label).Inc()
			if label != "unroutable" { // the publisher says why, per application
				if failedBy == nil {
					failedBy = map[string]failures{}
				}
				f := failedBy[label]
				if f.n++; f.first == nil {
					f.first = r.Err
				}
				failedBy[label] = f
			}
			o := l.cfg.Retry.Outcome(c, at, r.Err)
			if o.Status != alarm.StatusPending {
				l.m.rings.WithLabelValues(string(o.Status)).Inc()
				if c.Recurring() {
					// the occurrence is given up; the clock moves on
					advance = append(advance, alarm.AdvanceOf(c, o.Status, at, end, o.Error))
					continue
				}
			}
			failed = append(failed, o)
			failedClocks = append(failedClocks, c)
		}
		for label, f := range failedBy {
			if ok, heldBack := l.failLog.Allow(label, f.n); ok {
				l.log.Warn("ring attempts failed; their clocks are retried (one whose confirm was lost may reach its consumer twice)",
					"result", label, "clocks", f.n, "err", f.first, "like_failures_not_logged", heldBack)
			}
		}
		l.m.rings.WithLabelValues("rung").Add(float64(len(rung) + len(advance)))
		l.report(func(r *results) {
			r.rung = append(r.rung, rung...)
			r.advance = append(r.advance, advance...)
			r.failed = append(r.failed, failed...)
			r.failCls = append(r.failCls, failedClocks...)
			r.unclaim = append(r.unclaim, notSent...)
		})
	}()
}

// failures counts a publish batch's failed attempts of one result, with
// the first one's error.
type failures struct {
	n     int
	first error
}

// errLeaseEnded ends the wait for a batch's confirms: the lease of one of
// its clocks' shards ended by this instance's reckoning.
var errLeaseEnded = fmt.Errorf("the lease of the clock's shard ended before the broker confirmed the ring: %w", context.DeadlineExceeded)

// leaseBound returns the context a batch is published under: not cancelled
// by the loop's shutdown (rings in flight finish), and ended (with
// errLeaseEnded as its cause) when the first of the batch's leases ends by
// the local clock, as renewed meanwhile. A deadline fixed at the publish
// (the leases' end as then reckoned, 0.8 to 0.55 of the TTL away) gave up
// on confirms that took longer although every lease had been renewed
// since: under load a slow confirm made a failed attempt, and its clocks
// were rung twice (TestClusterJoinLeaveStorm, once in seven CI runs). A
// lease this instance no longer holds (lost) is not renewed: its last
// reckoning stands. (A shard handed over stays held, and renewed, until
// its release, which ends the hold at once: seen within leaseLook.)
func (l *Loop) leaseBound(ctx context.Context, leases []alarm.Lease, until time.Time) (context.Context, context.CancelFunc) {
	pctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := make(chan struct{})
	go func() {
		last := make([]time.Time, len(leases)) // each lease's last reckoning
		for i := range last {
			last[i] = until
		}
		t := l.clk.NewTimer(min(until.Sub(l.clk.Local()), leaseLook))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C():
			}
			if end := l.leasesEnd(leases, last); end.After(l.clk.Local()) {
				t.Reset(min(end.Sub(l.clk.Local()), leaseLook))
				continue
			}
			cancel(errLeaseEnded)
			return
		}
	}()
	return pctx, func() {
		close(stop)
		cancel(errors.New("publish done"))
	}
}

// leaseLook is how often a wait for confirms looks at its leases again: a
// lease can also end sooner than reckoned (a hand-over's release ends the
// hold at once).
const leaseLook = 250 * time.Millisecond

// leasesEnd is when the first of leases ends as reckoned now, keeping in
// last each one's latest reckoning: one no longer held (zero) keeps it.
func (l *Loop) leasesEnd(leases []alarm.Lease, last []time.Time) time.Time {
	var end time.Time
	for i, ls := range leases {
		if v := l.feed.ValidUntil(ls.Shard, ls.Epoch); !v.IsZero() {
			last[i] = v
		}
		if end.IsZero() || last[i].Before(end) {
			end = last[i]
		}
	}
	return end
}
