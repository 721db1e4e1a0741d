package ring

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// The lease is checked after the publish slot is taken, not before: a batch
// that waited for a slot while its shard's lease lapsed is not published
// (it goes back to pending without an attempt), so no instance publishes a
// ring once its own reckoning of the lease has lapsed.
func TestFenceAfterPublishSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{Publishers: 1})
		h.pub.gate = make(chan struct{})
		h.add(alarm.Clock{ID: 1, Shard: 1, RingAt: t0.Add(time.Second)}, alarm.Clock{ID: 2, Shard: 2, RingAt: t0.Add(2 * time.Second)})
		h.advance(time.Second) // clock 1 publishing, held: the only slot is taken
		h.advance(time.Second) // clock 2 is due and waits for the slot
		if n := len(h.pub.published()); n != 1 {
			t.Fatalf("%d publishes, want 1 (the second waits for the slot)", n)
		}
		h.feed.lose(2) // its lease lapses while it waits
		h.pub.gate <- struct{}{}
		synctest.Wait()
		if got := h.pub.publishedIDs(); !slices.Equal(got, []int64{1}) {
			t.Fatalf("published %v: a ring was sent after its lease lapsed", got)
		}
		if row := h.store.row(2); row.Status != alarm.StatusPending || row.Attempts != 0 {
			t.Errorf("clock 2: %s with %d attempts, want pending with none", row.Status, row.Attempts)
		}
		close(h.pub.gate)
	})
}

// Drain, before a shard is handed over: its armed clocks go back to pending
// at once, its ring in flight is confirmed and recorded before Drain
// returns, and the other shards' clocks are not touched.
func TestDrainShard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{ClaimAhead: time.Second})
		h.pub.gate = make(chan struct{})
		h.add(
			alarm.Clock{ID: 1, Shard: 1, RingAt: t0.Add(time.Second)},             // in flight when drained
			alarm.Clock{ID: 2, Shard: 1, RingAt: t0.Add(1500 * time.Millisecond)}, // armed
			alarm.Clock{ID: 3, Shard: 2, RingAt: t0.Add(1500 * time.Millisecond)}, // another shard
		)
		h.advance(time.Second) // 1 publishing (held), 2 and 3 claimed and armed
		if got := h.store.claimedIDs(); len(got) != 3 {
			t.Fatalf("claimed %v", got)
		}
		// as the preloader does: stop the shard's loader (its lease is no
		// longer valid here, offers are ignored), then drain
		h.feed.lose(1)
		drained := make(chan error, 1)
		go func() { drained <- h.loop.Drain(context.Background(), []int{1}) }()
		synctest.Wait()
		select {
		case err := <-drained:
			t.Fatalf("Drain returned (%v) while a ring of the shard was in flight", err)
		default:
		}
		if row := h.store.row(2); row.Status != alarm.StatusPending || row.Attempts != 0 {
			t.Errorf("armed clock of the drained shard: %s with %d attempts, want pending with none", row.Status, row.Attempts)
		}
		h.pub.gate <- struct{}{}
		synctest.Wait()
		if err := <-drained; err != nil {
			t.Fatalf("Drain: %v", err)
		}
		if row := h.store.row(1); row.Status != alarm.StatusRung {
			t.Errorf("the ring in flight: %s, want rung and recorded before Drain returned", row.Status)
		}
		close(h.pub.gate)
		h.advance(time.Second)
		if got := h.pub.publishedIDs(); !slices.Equal(got, []int64{1, 3}) {
			t.Errorf("published %v, want [1 3]: the drained armed clock is not rung here", got)
		}
	})
}

// Held lists the claim tokens of what the loop holds, and keeps the token of
// a confirmed ring while its outcome cannot be written (MySQL away), so that
// recovery of stale firing clocks never re-rings it.
func TestHeldUntilRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.store.with(func(s *fakeStore) { s.writeErr = errMySQL })
		h.add(alarm.Clock{ID: 1, Shard: 1, RingAt: t0.Add(time.Second)})
		h.advance(time.Second)
		if got := h.pub.publishedIDs(); !slices.Equal(got, []int64{1}) {
			t.Fatalf("published %v", got)
		}
		h.advance(3 * time.Minute) // MySQL stays away
		held := h.loop.Held()
		var tok int64
		h.store.with(func(s *fakeStore) { tok = s.tokens[1] })
		if !slices.Equal(held, []int64{tok}) {
			t.Fatalf("Held() = %v, want the claim token %d of the confirmed, unrecorded ring", held, tok)
		}
		h.store.with(func(s *fakeStore) { s.writeErr = nil })
		h.advance(3 * time.Second)
		if row := h.store.row(1); row.Status != alarm.StatusRung {
			t.Fatalf("after MySQL came back: %s, want rung", row.Status)
		}
		if held := h.loop.Held(); len(held) != 0 {
			t.Errorf("Held() = %v after the outcome was written", held)
		}
	})
}

// rung_at is the time each clock's own confirm arrived, even when the
// outcomes of several publishes are written together.
func TestRungAtIsEachConfirmTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.store.with(func(s *fakeStore) { s.writeErr = errMySQL })
		h.add(alarm.Clock{ID: 1, RingAt: t0.Add(time.Second)}, alarm.Clock{ID: 2, RingAt: t0.Add(1700 * time.Millisecond)})
		h.advance(time.Second)
		h.advance(700 * time.Millisecond)
		h.store.with(func(s *fakeStore) { s.writeErr = nil })
		h.advance(3 * time.Second)
		for id, want := range map[int64]time.Time{1: t0.Add(time.Second), 2: t0.Add(1700 * time.Millisecond)} {
			if row := h.store.row(id); row.Status != alarm.StatusRung || !row.RungAt.Equal(want) {
				t.Errorf("clock %d: %s rung_at %v, want rung at %v", id, row.Status, row.RungAt, want)
			}
		}
	})
}

// skewedClock is a fake loop clock moved off a local clock that runs ahead
// of it (clocksync): the ring times are its Now, the leases are reckoned by
// Local.
type skewedClock struct {
	*fakeClock
	ahead time.Duration
}

func (c *skewedClock) Local() time.Time { return c.Now().Add(c.ahead) }

// A publish starts only while the lease has MinLeaseLeft to run, and its
// wait for confirms ends with the lease. The lease is reckoned by the
// local clock, also when the loop rings by a clock moved off it (clocksync:
// an instance whose clock runs ahead of MySQL's): however far the ring
// clock is behind the local one, no publish is made with too little of the
// lease left by the local clock.
func TestPublishBoundedByLease(t *testing.T) {
	for _, ahead := range []time.Duration{0, 5 * time.Second} {
		synctest.Test(t, func(t *testing.T) {
			cfg := Config{MinLeaseLeft: 200 * time.Millisecond}
			if ahead > 0 {
				cfg.Clock = &skewedClock{ahead: ahead}
			}
			h := newHarness(t, cfg)
			h.feed.setUntil(t0.Add(ahead + time.Second + 150*time.Millisecond))
			h.add(alarm.Clock{ID: 1, Shard: 1, RingAt: t0.Add(time.Second)})
			h.advance(time.Second)
			if n := len(h.pub.published()); n != 0 {
				t.Fatalf("local clock %s ahead: published with 150 ms of lease left (MinLeaseLeft 200 ms)", ahead)
			}
			if row := h.store.row(1); row.Status != alarm.StatusPending || row.Attempts != 0 {
				t.Errorf("clock 1: %s with %d attempts, want pending with none", row.Status, row.Attempts)
			}

			h.feed.setUntil(t0.Add(ahead + 4*time.Second))
			h.add(alarm.Clock{ID: 2, Shard: 1, RingAt: t0.Add(2 * time.Second)})
			h.advance(time.Second)
			pubs := h.pub.published()
			if len(pubs) != 1 || pubs[0].rings[0].Clock.ID != 2 {
				t.Fatalf("local clock %s ahead: publishes %v, want clock 2", ahead, pubs)
			}
			if pubs[0].left <= 0 || pubs[0].left > 2*time.Second {
				t.Errorf("local clock %s ahead: the publish may wait %v for confirms; want at most the 2s of lease left", ahead, pubs[0].left)
			}
		})
	}
}
