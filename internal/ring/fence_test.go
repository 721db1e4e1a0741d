package ring

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/testenv"
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

// Two drains at once (hand-overs run beside the lease rounds, so a second
// may start while a first waits for slow confirms) both return once their
// shards' rings are recorded: the landing signal wakes one waiter only.
func TestConcurrentDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{ClaimAhead: time.Second})
		h.pub.gate = make(chan struct{})
		h.add(
			alarm.Clock{ID: 1, Shard: 1, RingAt: t0.Add(time.Second)},
			alarm.Clock{ID: 2, Shard: 2, RingAt: t0.Add(time.Second + time.Millisecond)},
		)
		h.advance(time.Second)
		h.advance(time.Millisecond) // both publishing, in two batches
		h.feed.lose(1)
		h.feed.lose(2)
		drained := make(chan error, 2)
		for _, sh := range []int{1, 2} {
			go func() { drained <- h.loop.Drain(context.Background(), []int{sh}) }()
		}
		synctest.Wait()
		close(h.pub.gate)
		for range 5 {
			h.advance(20 * time.Millisecond)
		}
		for range 2 {
			select {
			case err := <-drained:
				if err != nil {
					t.Fatalf("Drain: %v", err)
				}
			default:
				t.Fatal("a drain still waits after its shard's ring was recorded")
			}
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

			// the confirms do not come: the wait ends with the lease
			h.pub.gate = make(chan struct{})
			h.feed.setUntil(t0.Add(ahead + 4*time.Second))
			h.add(alarm.Clock{ID: 2, Shard: 1, RingAt: t0.Add(2 * time.Second)})
			h.advance(time.Second)
			pubs := h.pub.published()
			if len(pubs) != 1 || pubs[0].rings[0].Clock.ID != 2 {
				t.Fatalf("local clock %s ahead: publishes %v, want clock 2", ahead, pubs)
			}
			h.advance(2*time.Second - time.Millisecond)
			if err := h.pub.published()[0].ended; err != nil {
				t.Fatalf("local clock %s ahead: the wait for confirms ended with 1 ms of lease left: %v", ahead, err)
			}
			h.advance(time.Millisecond)
			if err := h.pub.published()[0].ended; !errors.Is(err, errLeaseEnded) {
				t.Fatalf("local clock %s ahead: the wait for confirms at the lease's end: %v; want it ended by the lease", ahead, err)
			}
			h.advance(100 * time.Millisecond)
			if row := h.store.row(2); row.Status != alarm.StatusPending || row.Attempts != 1 {
				t.Errorf("clock 2: %s with %d attempts, want pending with one (failed, retried)", row.Status, row.Attempts)
			}
		})
	}
}

// A confirm slower than the lease as reckoned at the publish, while the
// lease is renewed meanwhile: the wait goes on as long as the lease does.
// It ended at the lease's end as first reckoned, and a ring the broker
// was about to confirm was counted failed, retried, and delivered twice.
func TestPublishWaitFollowsLeaseRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := confirmHeld(t, t0.Add(3*time.Second))
		// renewed every 750 ms, 2.4 s ahead, as the lease keeper does
		for range 8 {
			h.feed.setUntil(h.clk.Now().Add(2400 * time.Millisecond))
			h.advance(750 * time.Millisecond)
		}
		if err := h.pub.published()[0].ended; err != nil {
			t.Fatalf("the wait for confirms ended %v after the publish although the lease was renewed: %v", 6*time.Second, err)
		}
		close(h.pub.gate)
		synctest.Wait()
		h.advance(100 * time.Millisecond)
		if row := h.store.row(1); row.Status != alarm.StatusRung || row.Attempts != 1 {
			t.Errorf("clock 1: %s with %d attempts, want rung at the first", row.Status, row.Attempts)
		}
		// and once renewals stop, the wait ends with the lease
		h.pub.gate = make(chan struct{})
		h.add(alarm.Clock{ID: 2, Shard: 1, RingAt: h.clk.Now().Add(time.Second)})
		h.advance(time.Second)
		h.advance(1400*time.Millisecond + time.Millisecond)
		if err := h.pub.published()[1].ended; !errors.Is(err, errLeaseEnded) {
			t.Fatalf("the wait for confirms past the lease's end: %v; want it ended by the lease", err)
		}
	})
}

// A failed ring attempt, which may have reached the broker and may be
// delivered twice, is logged: once per result every 10 s, the next line
// counting those held back. It went unlogged.
func TestFailedAttemptsAreLoggedSparingly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testenv.SyncBuffer
		h := newHarness(t, Config{
			Logger:      slog.New(slog.NewJSONHandler(&buf, nil)),
			ResultLabel: func(error) string { return "timeout" },
		})
		h.pub.result = func(Ring) error { return errors.New("no confirm") }
		for i := range 50 {
			h.add(alarm.Clock{ID: int64(i + 1), Shard: 1, RingAt: h.clk.Now().Add(time.Duration(i+1) * 100 * time.Millisecond)})
		}
		h.advance(5 * time.Second)
		if n := strings.Count(buf.String(), "ring attempts failed"); n != 1 {
			t.Fatalf("%d lines for 50 failed attempts within 5 s, want 1:\n%s", n, buf.String())
		}
		// the retries fail too, each at its own time: held back for 10 s
		// (at 5.8, 7.3 and 10.3 s), then logged again with the next (16.3 s)
		h.step(h.clk.Now().Add(12*time.Second), 100*time.Millisecond, func(time.Time) {})
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 2 || !strings.Contains(lines[1], `"result":"timeout"`) || !strings.Contains(lines[1], `"like_failures_not_logged":`) {
			t.Fatalf("10 s after the first line, want a second line counting those held back:\n%s", buf.String())
		}
		if strings.Contains(lines[1], `"like_failures_not_logged":0`) {
			t.Errorf("the second line counts none held back:\n%s", lines[1])
		}
	})
}

// When a hand-over releases a shard whose ring is still in flight (its
// drain timed out), the hold ends at once (preload sets the hand-over's
// until to the release time), and the wait for that ring's confirm ends
// within leaseLook. Before, it went on to the reckoning seen at its last
// timer (up to 0.8 of the TTL), holding a publisher slot while the next
// owner already rang the clock (found by review).
func TestPublishWaitEndsWhenTheHoldEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := confirmHeld(t, t0.Add(8*time.Second))
		h.advance(time.Second)
		h.feed.setUntil(h.clk.Now()) // released: the hold ends now
		h.advance(leaseLook)
		if err := h.pub.published()[0].ended; !errors.Is(err, errLeaseEnded) {
			t.Errorf("%v after the hold on the shard ended, the wait for the confirm goes on (ended: %v)", leaseLook, err)
		}
		close(h.pub.gate)
	})
}

// confirmHeld is a harness whose shard 1 is leased until until, with clock
// 1 of it published at t0 + 1 s and its confirm held (h.pub.gate).
func confirmHeld(t *testing.T, until time.Time) *harness {
	t.Helper()
	h := newHarness(t, Config{MinLeaseLeft: 200 * time.Millisecond})
	h.pub.gate = make(chan struct{})
	h.feed.setUntil(until)
	h.add(alarm.Clock{ID: 1, Shard: 1, RingAt: t0.Add(time.Second)})
	h.advance(time.Second)
	if n := len(h.pub.published()); n != 1 {
		t.Fatalf("%d publishes, want 1", n)
	}
	return h
}
