package ring

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/schedule"
)

// Memory may hold an older time than the row: two changes of a clock whose
// commits and offers crossed (two PATCHes at once; a failed claim offering
// back what it popped while a PATCH moved the row). The claim misses such
// a clock; the loop reads the row back and offers it at its new time, so
// it rings then, not at the shard's next full rescan. Clocks a claim missed
// for other reasons (cancelled, rung, another shard's lease) are not
// offered back.
func TestClaimMissOffersAClockMovedLaterAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.add(
			alarm.Clock{ID: 1, Shard: 1, RingAt: t0.Add(time.Second)},
			alarm.Clock{ID: 2, Shard: 1, RingAt: t0.Add(time.Second)},
			alarm.Clock{ID: 3, Shard: 1, RingAt: t0.Add(time.Second)},
		)
		moved := t0.Add(3 * time.Second)
		h.store.with(func(s *fakeStore) {
			s.rows[1].RingAt, s.rows[1].NextTryAt = moved, moved // a PATCH whose offer lost the race
			s.setStatus(s.rows[2], alarm.StatusCancelled)
		})
		h.advance(time.Second)
		if got := h.pub.publishedIDs(); !slices.Equal(got, []int64{3}) {
			t.Fatalf("published %v at 1s, want [3]", got)
		}
		again := h.feed.offered()
		if len(again) != 1 || again[0].ID != 1 || !again[0].At.Equal(moved) {
			t.Fatalf("offered again %+v, want clock 1 at its row's time (3s) and not the cancelled one", again)
		}
		h.advance(2*time.Second - time.Millisecond)
		if got := h.pub.publishedIDs(); slices.Contains(got, 1) {
			t.Fatalf("clock 1 rang before its new time")
		}
		h.advance(time.Millisecond)
		pubs := h.pub.published()
		last := pubs[len(pubs)-1]
		if last.rings[0].Clock.ID != 1 || !last.at.Equal(moved) {
			t.Fatalf("last publish %v at %v, want clock 1 at exactly 3s", last.rings[0].Clock.ID, last.at.Sub(t0))
		}
		if slices.Contains(h.pub.publishedIDs(), 2) {
			t.Error("the cancelled clock rang")
		}
		var m dto.Metric
		if err := h.loop.m.claimMoved.Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
			v := m.GetCounter().GetValue()
			t.Errorf("clockd_ring_claim_moved_total %v, want 1", v)
		}
	})
}

// A clock due when its batch was claimed but whose latest_ring_at passed
// while the batch waited for a publisher slot (every publisher waiting for
// its confirms) is expired, not published late.
func TestExpiredWhileWaitingForAPublishSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Publishers: 1})
		h.pub.gate = make(chan struct{})
		h.add(
			alarm.Clock{ID: 1, Shard: 1, RingAt: t0.Add(time.Second)},
			alarm.Clock{ID: 2, Shard: 2, RingAt: t0.Add(2 * time.Second), LatestRingAt: t0.Add(2500 * time.Millisecond)},
			alarm.Clock{ID: 3, Shard: 3, RingAt: t0.Add(2 * time.Second)},
		)
		h.advance(time.Second) // clock 1 publishing, held: the only slot is taken
		h.advance(time.Second) // clocks 2 and 3 are due and wait for the slot
		h.advance(time.Second) // clock 2's latest_ring_at passes
		h.pub.gate <- struct{}{}
		synctest.Wait()
		h.pub.gate <- struct{}{}
		synctest.Wait()
		if got := h.pub.publishedIDs(); !slices.Equal(got, []int64{1, 3}) {
			t.Fatalf("published %v, want [1 3]: clock 2 rang after its latest_ring_at", got)
		}
		if row := h.store.row(2); row.Status != alarm.StatusExpired || row.Attempts != 0 {
			t.Errorf("clock 2: %s with %d attempts, want expired without an attempt", row.Status, row.Attempts)
		}
		close(h.pub.gate)
	})
}

// hookStore runs after, once, right after an Advance is applied: what an
// API change committed just after the outcome write (its row lock freed)
// does, before the recorder goes on.
type hookStore struct {
	*fakeStore
	once  sync.Once
	after func()
}

func (s *hookStore) Advance(ctx context.Context, advs []alarm.Advance, tokens []int64, now time.Time) error {
	err := s.fakeStore.Advance(ctx, advs, tokens, now)
	if err == nil {
		s.once.Do(s.after)
	}
	return err
}

// The recorder offers a recurring clock's next occurrence after its
// Advance is committed (after every chunk of the round). A PATCH of the
// schedule (or a resume) that commits in between offers the new, earlier
// time first; the recorder's offer must not put the older occurrence back
// (the claim at that time would still take the row, and the new occurrence
// would ring late by the difference).
func TestRecorderOfferDoesNotUndoAPatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock(t0)
		q := NewQueue()
		fs := newFakeStore(clk)
		hs := &hookStore{fakeStore: fs}
		h := &harness{t: t, clk: clk, q: q, store: fs, pub: &fakePub{clk: clk}}
		h.feed = &fakeFeed{q: q, until: t0.Add(24 * time.Hour)}
		patched := t0.Add(2 * time.Second) // the PATCHed schedule's first occurrence
		hs.after = func() {
			// PATCH schedule {"every":"5s","start":t0+2s}: the row moves
			// to its new first occurrence, then Service.Reschedule tells the
			// scheduler (preload.Manager.Scheduled: q.Changed + offer)
			fs.mu.Lock()
			c := fs.rows[1]
			c.RingAt, c.NextTryAt, c.Attempts = patched, patched, 0
			fs.mu.Unlock()
			q.Changed(1)
			h.feed.Offer(alarm.Due{ID: 1, Shard: c.Shard, At: patched})
		}
		cfg := Config{ClaimAhead: claimAhead, ClaimAheadMax: time.Second,
			Retry: Retry{Min: time.Second, Max: time.Minute, Rand: fixed(0.5)}, Clock: clk}
		h.loop = New(cfg, q, hs, h.pub, h.feed)
		ctx, cancel := context.WithCancel(context.Background())
		h.cancel, h.done = cancel, make(chan struct{})
		go func() { defer close(h.done); _ = h.loop.Run(ctx) }()
		t.Cleanup(h.stop)
		synctest.Wait()

		// every 5 s from t0+1s: occurrences t0+1s, t0+6s, ...
		h.add(recurring(t, 1, schedule.Spec{Every: 5 * time.Second, Start: t0.Add(time.Second)}, t0))
		for h.clk.Now().Before(t0.Add(7 * time.Second)) {
			h.advance(50 * time.Millisecond)
		}
		occ, at := ringTimes(h)
		if len(occ) < 2 {
			t.Fatalf("rings %v", occ)
		}
		if !occ[0].Equal(t0.Add(time.Second)) {
			t.Fatalf("first ring %v", occ[0].Sub(t0))
		}
		if !occ[1].Equal(patched) || at[1].Sub(patched) > 100*time.Millisecond {
			t.Errorf("the PATCHed occurrence %v (due at t0+2s) rang at t0+%v: %v late (the stale offer of the old next occurrence, t0+6s, replaced it in memory)",
				occ[1].Sub(t0), at[1].Sub(t0), at[1].Sub(patched))
		}
	})
}
