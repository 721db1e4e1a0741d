package ring

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

func (l *Loop) report(f func(r *results)) {
	l.doneMu.Lock()
	f(&l.done)
	l.doneMu.Unlock()
	signal(l.doneSig)
}

// recorder writes outcomes to MySQL in batches: rung, failed, expired and
// unclaimed clocks, retrying while MySQL is away. What it has not written
// stays in flight (held: recovery leaves it alone), however long MySQL is
// away: a confirmed ring is never put back to pending to ring again.
func (l *Loop) recorder(ctx context.Context) {
	var last time.Time // when the previous write began
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.doneSig:
		}
		if gap := l.cfg.RecordGap; gap > 0 {
			if wait := gap - l.clk.Now().Sub(last); wait > 0 && l.fewRung() {
				l.gather(ctx, wait)
			}
		}
		l.doneMu.Lock()
		r := l.done
		l.done = results{}
		l.doneMu.Unlock()
		if r.empty() {
			continue
		}
		last = l.clk.Now()
		for attempt := 1; ; attempt++ {
			err := l.record(ctx, &r)
			if err == nil {
				break
			}
			if attempt == 1 || attempt%50 == 0 {
				l.log.Warn("recording ring outcomes failed; retrying", "err", err, "attempt", attempt)
			}
			if !l.sleep(ctx, min(time.Duration(attempt)*100*time.Millisecond, 2*time.Second)) {
				return
			}
		}
	}
}

// recordFew: fewer rung outcomes than this (and nothing else) wait for
// more, up to RecordGap after the previous write began.
const recordFew = 64

// fewRung tells whether the outcomes waiting are only a few rings.
func (l *Loop) fewRung() bool {
	l.doneMu.Lock()
	defer l.doneMu.Unlock()
	d := &l.done
	return len(d.failed)+len(d.expired)+len(d.unclaim) == 0 && len(d.rung)+len(d.advance) < recordFew
}

// gather waits up to d for outcomes to be more than a few.
func (l *Loop) gather(ctx context.Context, d time.Duration) {
	t := l.clk.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			return
		case <-l.doneSig:
			if !l.fewRung() {
				return
			}
		}
	}
}

// recordChunk is the most clocks one outcome write carries.
const recordChunk = 500

// record writes r, removing from it what is written, so a retry resumes.
//
// The clocks it moves on (a retry, a recurring clock's next occurrence,
// an unclaimed one) are offered to the feeder after their write. An API
// change (a PATCH, a resume) may commit in between, once the write freed
// the row, and offer the clock's new time first: the writes' offers would
// put the older time back, and the clock would ring late. So record takes
// a stamp before its writes (as a load does) and leaves out the clocks the
// API changed since.
func (l *Loop) record(ctx context.Context, r *results) error {
	now := l.clk.Now()
	stamp := l.q.BeginLoad()
	defer l.q.AddLoaded(stamp, Live) // ends it, adding nothing
	if err := l.writeRung(ctx, r); err != nil {
		return err
	}
	if err := l.writeAdvance(ctx, r, now, stamp); err != nil {
		return err
	}
	err := l.write(idsOf(r.failed, outcomeID), func(ids, toks []int64) error {
		return l.store.Fail(ctx, r.failed[:len(ids)], toks, now)
	}, func(n int) {
		for i, o := range r.failed[:n] {
			if o.Status == alarm.StatusPending {
				l.offerSince(stamp, alarm.Due{ID: o.ID, Shard: r.failCls[i].Shard, At: o.NextTryAt})
			}
		}
		r.failed, r.failCls = r.failed[n:], r.failCls[n:]
	})
	if err != nil {
		return err
	}
	err = l.write(r.expired, func(ids, toks []int64) error {
		return l.store.Expire(ctx, ids, toks, now)
	}, func(n int) { r.expired = r.expired[n:] })
	if err != nil {
		return err
	}
	return l.write(idsOf(r.unclaim, clockID), func(ids, toks []int64) error {
		return l.store.Unclaim(ctx, ids, toks, now)
	}, func(n int) {
		for _, c := range r.unclaim[:n] {
			l.offerSince(stamp, alarm.Due{ID: c.ID, Shard: c.Shard, At: c.NextTryAt})
		}
		r.unclaim = r.unclaim[n:]
	})
}

// offerSince offers d to the feeder unless the API changed its clock since
// stamp (see record).
func (l *Loop) offerSince(stamp uint64, d alarm.Due) {
	if l.q.ChangedSince(stamp, d.ID) {
		return
	}
	l.feed.Offer(d)
}

// writeRung records confirmed rings in chunks, Recorders of them at once
// (one after another they capped the ring rate: each is a round trip of
// tens of milliseconds under load); r.rung keeps what failed, for the retry.
func (l *Loop) writeRung(ctx context.Context, r *results) error {
	failed, _, err := writeChunks(l, r.rung, rungID, func(c []alarm.Rung, toks []int64) error {
		return l.store.MarkRung(ctx, c, toks)
	})
	r.rung = failed
	return err
}

// writeAdvance records the occurrences of recurring clocks that rang or
// were given up, in chunks, Recorders at once (like writeRung: each is a
// transaction of a few statements), and offers each clock's next
// occurrence to the feeder (due at once when it was missed); r.advance
// keeps what failed, for the retry.
func (l *Loop) writeAdvance(ctx context.Context, r *results, now time.Time, stamp uint64) error {
	failed, written, err := writeChunks(l, r.advance, advanceID, func(c []alarm.Advance, toks []int64) error {
		return l.store.Advance(ctx, c, toks, now)
	})
	for _, a := range written {
		if !a.Next.IsZero() {
			l.offerSince(stamp, alarm.Due{ID: a.ID, Shard: a.Shard, At: a.NextTryAt})
		}
	}
	r.advance = failed
	return err
}

// writeChunks writes items in chunks of recordChunk, Recorders of them at
// once, each fenced by the claim tokens of its clocks, and returns the
// items of the chunks that failed and of those written.
func writeChunks[T any](l *Loop, items []T, id func(T) int64, write func(chunk []T, toks []int64) error) (failed, written []T, err error) {
	var chunks [][]T
	for rest := items; len(rest) > 0; {
		n := min(len(rest), recordChunk)
		chunks = append(chunks, rest[:n])
		rest = rest[n:]
	}
	done := make([]bool, len(chunks))
	errs := make([]error, len(chunks))
	sem := make(chan struct{}, l.cfg.Recorders)
	var wg sync.WaitGroup
	for i, c := range chunks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ids := idsOf(c, id)
			toks, used := l.tokensOf(ids)
			if errs[i] = write(c, toks); errs[i] == nil {
				l.forget(ids, used)
				done[i] = true
			}
		})
	}
	wg.Wait()
	for i, c := range chunks {
		if done[i] {
			written = append(written, c...)
		} else {
			failed = append(failed, c...)
		}
	}
	return failed, written, errors.Join(errs...)
}

// write records outcomes of ids in chunks, fenced by their claim tokens;
// written(n) is told after each chunk so that a retry resumes after it.
func (l *Loop) write(ids []int64, store func(ids, toks []int64) error, written func(n int)) error {
	for len(ids) > 0 {
		n := min(len(ids), recordChunk)
		toks, used := l.tokensOf(ids[:n])
		if err := store(ids[:n], toks); err != nil {
			return err
		}
		l.forget(ids[:n], used)
		written(n)
		ids = ids[n:]
	}
	return nil
}

// idsOf lists the clock ids of xs.
func idsOf[T any](xs []T, id func(T) int64) []int64 {
	ids := make([]int64, len(xs))
	for i, x := range xs {
		ids[i] = id(x)
	}
	return ids
}

func rungID(r alarm.Rung) int64       { return r.ID }
func outcomeID(o alarm.Outcome) int64 { return o.ID }
func advanceID(a alarm.Advance) int64 { return a.ID }
func clockID(c alarm.Clock) int64     { return c.ID }

// tokensOf returns the distinct claim tokens of ids, and each id's token.
func (l *Loop) tokensOf(ids []int64) (distinct, each []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	each = make([]int64, len(ids))
	seen := map[int64]bool{}
	for i, id := range ids {
		tok := l.flights[id].token
		each[i] = tok
		if !seen[tok] {
			seen[tok] = true
			distinct = append(distinct, tok)
		}
	}
	return distinct, each
}

// forget ends the flight of recorded clocks (unless the clock was claimed
// again meanwhile) and frees their in-flight places.
func (l *Loop) forget(ids, used []int64) {
	l.mu.Lock()
	for i, id := range ids {
		if f, ok := l.flights[id]; ok && f.token == used[i] {
			delete(l.flights, id)
			l.perShard[f.shard]--
			if l.perShard[f.shard] <= 0 {
				delete(l.perShard, f.shard)
			}
		}
	}
	l.mu.Unlock()
	signal(l.slots)
	signal(l.landed)
}
