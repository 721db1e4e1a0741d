package ring

import (
	"container/heap"
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// claimer moves due clocks from the queue to the armed set, claiming them
// in MySQL a little ahead of their deadline.
func (l *Loop) claimer(ctx context.Context) {
	timer := l.clk.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	for ctx.Err() == nil {
		// back-pressure: bounded in-flight
		l.mu.Lock()
		full := l.inFlight+l.cfg.ClaimBatch > l.cfg.MaxInFlight
		l.mu.Unlock()
		if full {
			select {
			case <-ctx.Done():
				return
			case <-l.slots:
			}
			continue
		}
		if len(l.lost) > 0 {
			if err := l.releaseLost(ctx, true); err != nil {
				failures++
				if failures == 1 || failures%100 == 0 {
					l.log.Warn("claims paused until MySQL answers", "err", err, "failures", failures)
				}
				if !l.sleep(ctx, min(time.Duration(failures)*100*time.Millisecond, 2*time.Second)) {
					return
				}
				continue
			}
		}
		if err := l.pub.Ready(); err != nil {
			// no broker: leave clocks pending rather than claim what cannot ring
			if !l.sleep(ctx, 50*time.Millisecond) {
				return
			}
			continue
		}
		now := l.clk.Now()
		at, ok := l.q.Earliest()
		if !ok || at.After(now.Add(l.cfg.ClaimAhead)) {
			wait := time.Hour
			if ok {
				wait = at.Sub(now) - l.cfg.ClaimAhead
			}
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C():
			case <-l.q.Wake():
			}
			continue
		}
		l.claimMu.Lock()
		dues := l.q.PopDue(now.Add(l.cfg.ClaimAhead), l.cfg.ClaimBatch)
		if len(dues) == 0 {
			l.claimMu.Unlock()
			continue
		}
		err := l.claim(ctx, dues, now)
		l.claimMu.Unlock()
		if err != nil {
			failures++
			if failures == 1 || failures%100 == 0 {
				l.log.Warn("claim failed; ringing paused until it works", "clocks", len(dues), "err", err, "failures", failures)
			}
			if !l.sleep(ctx, min(time.Duration(failures)*100*time.Millisecond, 2*time.Second)) {
				return
			}
			continue
		}
		if failures > 0 {
			l.log.Info("claims work again", "after_failures", failures)
			failures = 0
		}
	}
}

// claim claims dues in MySQL and arms what it got. When MySQL fails, the
// dues are offered back to the feeder (and the claim is remembered as
// lost, see releaseLost). Dues of shards whose lease is not
// valid at the moment are dropped: when the shard is lost its new owner
// loads them; when the local reckoning of the lease lapsed and is renewed,
// the feeder rescans the shard. Offering them back instead would have them
// popped again at once, ahead of the clocks of other shards.
func (l *Loop) claim(ctx context.Context, dues []alarm.Due, now time.Time) error {
	shardSet := map[int]bool{}
	for _, d := range dues {
		shardSet[d.Shard] = true
	}
	shards := make([]int, 0, len(shardSet))
	for s := range shardSet {
		shards = append(shards, s)
	}
	sort.Ints(shards)
	// Only shards whose lease runs long enough to publish at the deadline
	// (see fire): a clock claimed under a lease about to end would only be
	// handed back. Their dues are dropped like those of lapsed leases.
	minLeft := l.cfg.ClaimAhead + l.cfg.MinLeaseLeft
	leases := l.feed.Leases(shards)
	held := make(map[int]int64, len(leases))
	kept := leases[:0]
	for _, ls := range leases {
		if l.feed.ValidUntil(ls.Shard, ls.Epoch).Sub(now) >= minLeft {
			held[ls.Shard] = ls.Epoch
			kept = append(kept, ls)
		}
	}
	leases = kept
	ids := make([]int64, 0, len(dues))
	for _, d := range dues {
		if _, ok := held[d.Shard]; ok {
			ids = append(ids, d.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	token := rand.Int64()
	got, err := l.store.Claim(cctx, l.feed.Owner(), leases, ids, token, now.Add(l.cfg.ClaimAhead), now)
	if err != nil {
		// The claim may have been applied: the claimer releases it before
		// it claims again, else its clocks stay firing until the firing
		// timeout. Until then they wait in memory.
		lc := lostClaim{token: token}
		for _, d := range dues {
			if _, ok := held[d.Shard]; ok {
				lc.dues = append(lc.dues, d)
				l.feed.Offer(d)
			}
		}
		l.lost = append(l.lost, lc)
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil
		}
		return err
	}
	l.feed.Drained(shards)
	l.m.claims.Observe(float64(len(got)))
	if len(got) == 0 {
		return nil
	}
	l.mu.Lock()
	for _, c := range got {
		l.clocks[c.ID] = claimed{Clock: c, epoch: held[c.Shard]}
		l.flights[c.ID] = flight{token: token, shard: c.Shard}
		l.perShard[c.Shard]++
		heap.Push(&l.armed, &entry{due: alarm.Due{ID: c.ID, Shard: c.Shard, At: c.NextTryAt}})
	}
	l.inFlight += len(got)
	l.mu.Unlock()
	signal(l.armWake)
	return nil
}
