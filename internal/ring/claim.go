package ring

import (
	"container/heap"
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// claimer pops due clocks from the queue and hands them, one batch at a
// time, to Claimers workers that claim them in MySQL concurrently. A claim
// is a round trip of tens of milliseconds under load (an UPDATE of up to
// ClaimBatch rows and the SELECT of what it claimed); one after another,
// they capped the ring rate well below the broker's (docs/benchmarks.md).
func (l *Loop) claimer(ctx context.Context) {
	jobs := make(chan claimJob)
	var workers sync.WaitGroup
	for range l.cfg.Claimers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			l.claimWorker(ctx, jobs)
		}()
	}
	defer func() {
		close(jobs)
		workers.Wait()
	}()
	timer := l.clk.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	for ctx.Err() == nil {
		// a failed claim pauses claiming (capped backoff): MySQL is away
		if wait := l.claimPause(); wait > 0 {
			if !l.sleep(ctx, wait) {
				return
			}
			continue
		}
		// back-pressure: bounded in-flight, counting the batches being claimed
		l.mu.Lock()
		full := len(l.flights)+l.claiming+l.cfg.ClaimBatch > l.cfg.MaxInFlight
		l.mu.Unlock()
		if full {
			select {
			case <-ctx.Done():
				return
			case <-l.slots:
			}
			continue
		}
		if l.hasLost() {
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
			failures = 0
		}
		if err := l.pub.Ready(); err != nil {
			// no broker: leave clocks pending rather than claim what cannot ring
			if !l.sleep(ctx, 50*time.Millisecond) {
				return
			}
			continue
		}
		now := l.clk.Now()
		ahead := l.ahead()
		at, ok := l.q.Earliest()
		if !ok || at.After(now.Add(ahead)) {
			wait := time.Hour
			if ok {
				wait = at.Sub(now) - ahead
			}
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C():
			case <-l.q.Wake():
			case <-l.claimDone: // a claim's time may have moved ahead()
			}
			continue
		}
		// Natural batching: while a claim is under way, the clocks coming
		// due meanwhile gather into the next one; a second claim starts
		// when a whole batch is waiting (a backlog, a hot second), or when
		// the earliest clock could not wait for the claim under way and
		// still be claimed in time: ahead is twice the slowest recent
		// claim, and waiting for one claim and then making another took
		// up to both halves (7-11 % of the clocks of a 7,500 rings/s run
		// were armed after their time, docs/benchmarks.md). Many small
		// claims at once would cost MySQL more per clock.
		l.mu.Lock()
		busy := l.claimJobs
		l.mu.Unlock()
		if urgent := at.Add(-ahead / 2); busy > 0 && urgent.After(now) && !l.q.DueAtLeast(now.Add(ahead), l.cfg.ClaimBatch) {
			timer.Reset(urgent.Sub(now))
			select {
			case <-ctx.Done():
				return
			case <-l.claimDone:
			case <-timer.C():
			case <-l.q.Wake():
			}
			continue
		}
		// A small claim also takes clocks due within half as long again,
		// up to claimFill: at low rates a claim otherwise took the one or
		// two clocks that just came within ahead (at 1,600 rings/s, a
		// claim per 5 clocks: 300 round trips of two statements a second).
		// Not more: bigger claims at high rates were slower and made rings
		// later (docs/benchmarks.md).
		// (never past ClaimAheadMax: the lease margin and the firing
		// timeout are sized by it)
		reach := min(ahead+ahead/2, max(ahead, l.cfg.ClaimAheadMax))
		dues := l.q.PopDue(now.Add(ahead), l.cfg.ClaimBatch)
		if n := min(claimFill, l.cfg.ClaimBatch); len(dues) < n {
			dues = append(dues, l.q.PopDue(now.Add(reach), n-len(dues))...)
		}
		if len(dues) == 0 {
			continue
		}
		// A claim that failed meanwhile set the pause before it offered
		// its dues back, so dues popped after that offer see the pause
		// here, with the dispatch: the check at the top came before the pop
		// and cannot (the dues would be claimed again at once, before the
		// lost claim is released).
		l.mu.Lock()
		paused := l.pauseUntil.After(l.clk.Now())
		if !paused {
			l.claiming += len(dues)
			l.claimJobs++
		}
		l.mu.Unlock()
		if paused {
			for _, d := range dues {
				l.feed.Offer(d)
			}
			continue
		}
		select {
		case jobs <- claimJob{dues: dues, now: now, ahead: reach}:
		case <-ctx.Done():
			return // shutting down: the next owner of their shards loads them
		}
	}
}

// reofferMoved offers again the clocks a claim did not take because their
// row is due later than memory had it. Memory can hold an older time than
// the row: two changes of a clock whose commits and offers crossed (two
// PATCHes at once, a failed claim offering back what it popped before a
// PATCH). Dropped, such a clock waited for its shard's next full rescan
// (preload.rescan, 30 s) although due within the window. Clocks missed for
// other reasons (cancelled, rung, claimed elsewhere, the lease) are not
// read back. A claim misses clocks rarely: one more read by primary key.
func (l *Loop) reofferMoved(ctx context.Context, ids []int64, got []alarm.Clock, until time.Time, stamp uint64) {
	took := make(map[int64]bool, len(got))
	for _, c := range got {
		took[c.ID] = true
	}
	missed := make([]int64, 0, len(ids)-len(got))
	for _, id := range ids {
		if !took[id] {
			missed = append(missed, id)
		}
	}
	moved, err := l.store.Waiting(ctx, missed, until)
	if err != nil {
		l.log.Warn("could not read the clocks a claim missed; any moved later waits for its shard's rescan", "clocks", len(missed), "err", err)
		return
	}
	for _, d := range moved {
		l.offerSince(stamp, d)
	}
	l.m.claimMoved.Add(float64(len(moved)))
}

// claimFill is the size a claim is filled up to with clocks due a little
// later (see claimer).
const claimFill = 64

// claimJob is one batch of dues popped at now, due within ahead.
type claimJob struct {
	dues  []alarm.Due
	now   time.Time
	ahead time.Duration
}

// claimWorker claims the batches handed to it. A failed claim pauses the
// claimer (capped backoff, shared by the workers, see claim): when MySQL is
// away, claiming stops instead of trying once per worker.
func (l *Loop) claimWorker(ctx context.Context, jobs <-chan claimJob) {
	for job := range jobs {
		l.claimMu.RLock()
		err := l.claim(ctx, job.dues, job.now, job.ahead)
		l.claimMu.RUnlock()
		l.mu.Lock()
		l.claiming -= len(job.dues)
		l.claimJobs--
		switch {
		case errors.Is(err, errNoLease):
			// MySQL was not asked: neither a failure nor a recovery (found
			// by review: "claims work again" logged, and the failure count
			// reset, in the middle of a MySQL stall whose lease rounds had
			// failed)
			l.mu.Unlock()
		case err != nil:
			n := l.claimFailures // counted by claim, which also set the pause
			l.mu.Unlock()
			if n == 1 || n%100 == 0 {
				l.log.Warn("claim failed; ringing paused until it works", "clocks", len(job.dues), "err", err, "failures", n)
			}
		default:
			n := l.claimFailures
			l.claimFailures = 0
			l.mu.Unlock()
			if n > 0 {
				l.log.Info("claims work again", "after_failures", n)
			}
		}
		signal(l.slots)
		signal(l.claimDone)
	}
}

// claimPause is how long claiming still pauses after a failed claim.
func (l *Loop) claimPause() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pauseUntil.Sub(l.clk.Now())
}

// claim claims dues in MySQL and arms what it got. When MySQL fails, the
// dues are offered back to the feeder (and the claim is remembered as
// lost, see releaseLost). Dues of shards whose lease is not
// valid at the moment are dropped: when the shard is lost its new owner
// loads them; when the local reckoning of the lease lapsed and is renewed,
// the feeder rescans the shard. Offering them back instead would have them
// popped again at once, ahead of the clocks of other shards.
// errNoLease: a claim whose dues are all of shards without a lease long
// enough to publish under; they were dropped, and MySQL was not asked.
var errNoLease = errors.New("no shard of the claim has lease enough left")

func (l *Loop) claim(ctx context.Context, dues []alarm.Due, now time.Time, ahead time.Duration) error {
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
	minLeft := ahead + l.cfg.MinLeaseLeft
	leases := l.feed.Leases(shards)
	held := make(map[int]int64, len(leases))
	kept := leases[:0]
	leaseNow := l.clk.Local()
	for _, ls := range leases {
		if l.feed.ValidUntil(ls.Shard, ls.Epoch).Sub(leaseNow) >= minLeft {
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
		return errNoLease
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	token := rand.Int64()
	// a failed claim offers its dues back, and one that missed clocks
	// offers those moved later: not over a change the API made meanwhile
	// (see record)
	stamp := l.q.BeginLoad()
	defer l.q.AddLoaded(stamp, Live)
	began := l.clk.Now()
	got, err := l.store.Claim(cctx, l.feed.Owner(), leases, ids, token, now.Add(ahead), now)
	took := l.clk.Now().Sub(began)
	l.m.claimDur.Observe(took.Seconds())
	if err == nil {
		l.claimTook(took)
	}
	if err != nil {
		// cut short by the shutdown: not a failure of MySQL (counted, it
		// was logged as "claims work again" as the loop stopped)
		shutdown := errors.Is(err, context.Canceled) && ctx.Err() != nil
		// Claiming pauses (capped backoff) before the dues go back and the
		// claim is remembered as lost: the claimer must see the pause no
		// later than either, or it would claim or release again at once.
		if !shutdown {
			l.mu.Lock()
			l.claimFailures++
			l.pauseUntil = l.clk.Now().Add(min(time.Duration(l.claimFailures)*100*time.Millisecond, 2*time.Second))
			l.mu.Unlock()
		}
		// The claim may have been applied: the claimer releases it before
		// it claims again, else its clocks stay firing until the firing
		// timeout. Until then they wait in memory.
		lc := lostClaim{token: token}
		for _, d := range dues {
			if _, ok := held[d.Shard]; ok {
				lc.dues = append(lc.dues, d)
				l.offerSince(stamp, d)
			}
		}
		l.lostMu.Lock()
		l.lost = append(l.lost, lc)
		l.lostMu.Unlock()
		if shutdown {
			return nil
		}
		return err
	}
	l.feed.Drained(shards)
	l.m.claims.Observe(float64(len(got)))
	if len(got) < len(ids) {
		// after the claimed clocks are armed: the read back must not
		// delay their rings
		defer l.reofferMoved(cctx, ids, got, now.Add(ahead), stamp)
	}
	if len(got) == 0 {
		return nil
	}
	armedAt := l.clk.Now()
	late := 0
	for _, c := range got {
		if armedAt.After(c.NextTryAt) {
			late++
		}
	}
	l.m.claimedLate.Add(float64(late))
	l.mu.Lock()
	for _, c := range got {
		l.clocks[c.ID] = claimed{Clock: c, epoch: held[c.Shard]}
		l.flights[c.ID] = flight{token: token, shard: c.Shard}
		l.perShard[c.Shard]++
		heap.Push(&l.armed, &entry{due: alarm.Due{ID: c.ID, Shard: c.Shard, At: c.NextTryAt}})
	}
	l.mu.Unlock()
	signal(l.armWake)
	return nil
}
