package ring

import (
	"errors"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// The timer gate: claim at At-ClaimAhead, publish at At, never before,
// checked at every millisecond around both edges.
func TestGateClaimsAheadAndPublishesOnTime(t *testing.T) {
	tests := []struct {
		name  string
		clock alarm.Clock
		at    time.Time // when it must be published: NextTryAt
	}{
		{"first attempt", clockAt(1, t0.Add(1500*time.Millisecond)), t0.Add(1500 * time.Millisecond)},
		{"retry: next_try_at after ring_at", alarm.Clock{ID: 2, RingAt: t0.Add(-time.Minute), NextTryAt: t0.Add(700 * time.Millisecond), Attempts: 3}, t0.Add(700 * time.Millisecond)},
		{"due within the claim-ahead at start", clockAt(3, t0.Add(40*time.Millisecond)), t0.Add(40 * time.Millisecond)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, Config{})
				h.add(tt.clock)
				claimAt := tt.at.Add(-claimAhead)
				h.step(tt.at.Add(50*time.Millisecond), time.Millisecond, func(now time.Time) {
					claims, pubs := h.store.claimCalls(), h.pub.published()
					switch {
					case now.Before(claimAt) && len(claims) > 0:
						t.Fatalf("claimed at %v, %v before At-ClaimAhead", now.Sub(t0), claimAt.Sub(now))
					case !now.Before(claimAt) && len(h.store.claimedIDs()) != 1:
						t.Fatalf("at %v (At-ClaimAhead passed): claims %+v, want one", now.Sub(t0), claims)
					case now.Before(tt.at) && len(pubs) > 0:
						t.Fatalf("published at %v, %v before its time", pubs[0].at.Sub(t0), tt.at.Sub(pubs[0].at))
					case !now.Before(tt.at) && len(pubs) != 1:
						t.Fatalf("at %v: %d publishes, want 1", now.Sub(t0), len(pubs))
					}
				})
				if len(h.store.claimCalls()) != 1 {
					t.Errorf("%d claim round trips, want 1", len(h.store.claimCalls()))
				}
				p := h.pub.published()[0]
				if !p.at.Equal(tt.at) {
					t.Errorf("published at %v, want exactly %v", p.at.Sub(t0), tt.at.Sub(t0))
				}
				if p.rings[0].Attempt != tt.clock.Attempts+1 {
					t.Errorf("attempt %d, want %d", p.rings[0].Attempt, tt.clock.Attempts+1)
				}
				if got := h.store.row(tt.clock.ID); got.Status != alarm.StatusRung || got.Attempts != tt.clock.Attempts+1 {
					t.Errorf("row after a confirmed ring: %s, %d attempts", got.Status, got.Attempts)
				}
			})
		})
	}
}

func TestGateWakesForAnEarlierClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.add(clockAt(1, t0.Add(time.Hour)))
		h.advance(time.Second)
		if n := len(h.store.claimCalls()); n != 0 {
			t.Fatalf("%d claims for a clock due in an hour", n)
		}
		// the gate sleeps until an hour away; a new clock due in 2s wakes it
		h.add(clockAt(2, h.clk.Now().Add(2*time.Second)))
		h.advance(2*time.Second - claimAhead - time.Millisecond)
		if n := len(h.store.claimCalls()); n != 0 {
			t.Fatalf("claimed %v early", claimAhead)
		}
		h.advance(time.Millisecond)
		if got := h.store.claimedIDs(); !slices.Equal(got, []int64{2}) {
			t.Fatalf("claimed %v, want [2]", got)
		}
		h.advance(claimAhead)
		if got := h.pub.publishedIDs(); !slices.Equal(got, []int64{2}) {
			t.Fatalf("published %v, want [2]", got)
		}
		// a clock added while the firer waits for an armed one further away
		h.add(clockAt(3, h.clk.Now().Add(10*time.Second)))
		h.advance(10*time.Second - claimAhead)
		h.add(clockAt(4, h.clk.Now().Add(50*time.Millisecond)))
		h.advance(50 * time.Millisecond)
		if got := h.pub.publishedIDs(); !slices.Equal(got, []int64{2, 4}) {
			t.Fatalf("published %v, want [2 4]", got)
		}
		h.advance(50 * time.Millisecond)
		if got := h.pub.publishedIDs(); !slices.Equal(got, []int64{2, 4, 3}) {
			t.Fatalf("published %v, want [2 4 3]", got)
		}
		if slices.Contains(h.store.claimedIDs(), 1) {
			t.Error("the clock due in an hour was claimed")
		}
	})
}

func TestGatePublishesDueClocksTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		at := t0.Add(time.Second)
		var want []int64
		for id := int64(1); id <= 50; id++ {
			h.add(clockAt(id, at))
			want = append(want, id)
		}
		h.add(clockAt(51, at.Add(30*time.Millisecond))) // claimed with them, published later
		h.advance(time.Second - claimAhead)
		if n := len(h.store.claimCalls()); n != 1 {
			t.Errorf("%d claim round trips for 51 clocks due together, want 1", n)
		}
		h.advance(claimAhead)
		pubs := h.pub.published()
		if len(pubs) != 1 || len(pubs[0].rings) != 50 {
			t.Fatalf("publishes %d (first of %d rings), want one batch of 50", len(pubs), len(pubs[0].rings))
		}
		got := h.pub.publishedIDs()
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("published %v", got)
		}
		h.advance(30 * time.Millisecond)
		if pubs := h.pub.published(); len(pubs) != 2 || pubs[1].rings[0].Clock.ID != 51 || !pubs[1].at.Equal(at.Add(30*time.Millisecond)) {
			t.Errorf("the clock due 30ms later: %+v", pubs)
		}
		h.store.with(func(s *fakeStore) {
			if len(s.rung) != 51 {
				t.Errorf("%d marked rung, want 51", len(s.rung))
			}
		})
	})
}

func TestGateBatchesLargeDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{ClaimBatch: 100})
		for id := int64(1); id <= 250; id++ {
			h.add(clockAt(id, t0.Add(time.Second)))
		}
		h.advance(time.Second)
		if n := len(h.store.claimCalls()); n != 3 {
			t.Errorf("%d claims for 250 clocks in batches of 100, want 3", n)
		}
		pubs := h.pub.published()
		var sizes []int
		for _, p := range pubs {
			sizes = append(sizes, len(p.rings))
		}
		slices.Sort(sizes)
		if !slices.Equal(sizes, []int{50, 100, 100}) {
			t.Errorf("publish batches %v, want [50 100 100]", sizes)
		}
	})
}

// A failed publish is a failed attempt: the retry policy decides, the row
// records it, and a retried clock is offered back and rings at its next try.
func TestFailedPublish(t *testing.T) {
	tests := []struct {
		name      string
		clock     alarm.Clock
		status    alarm.Status
		nextTry   time.Duration // after the failure, for pending
		republish bool
	}{
		{"retried after the backoff", clockAt(1, t0.Add(time.Second)), alarm.StatusPending, 750 * time.Millisecond, true},
		{"second failure of max_attempts 2: dead", alarm.Clock{ID: 2, RingAt: t0.Add(time.Second), Attempts: 1, MaxAttempts: 2}, alarm.StatusDead, 0, false},
		{"max_attempts 1: dead", alarm.Clock{ID: 3, RingAt: t0.Add(time.Second), MaxAttempts: 1}, alarm.StatusDead, 0, false},
		{"next try after latest_ring_at: the last try shortly before it", alarm.Clock{ID: 4, RingAt: t0.Add(time.Second), LatestRingAt: t0.Add(1500 * time.Millisecond)}, alarm.StatusPending, 500*time.Millisecond - alarm.LastTryLead, true},
		{"failed within the lead of latest_ring_at: expired", alarm.Clock{ID: 7, RingAt: t0.Add(time.Second), LatestRingAt: t0.Add(time.Second + alarm.LastTryLead/2)}, alarm.StatusExpired, 0, false},
		{"latest_ring_at when it fails: expired", alarm.Clock{ID: 6, RingAt: t0.Add(time.Second), LatestRingAt: t0.Add(time.Second)}, alarm.StatusExpired, 0, false},
		{"next try before latest_ring_at: retried", alarm.Clock{ID: 5, RingAt: t0.Add(time.Second), LatestRingAt: t0.Add(2 * time.Second)}, alarm.StatusPending, 750 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, Config{})
				fails := 1
				h.pub.result = func(r Ring) error {
					if fails > 0 {
						fails--
						return errBroker
					}
					return nil
				}
				h.add(tt.clock)
				h.advance(time.Second)
				failedAt := h.clk.Now()
				row := h.store.row(tt.clock.ID)
				if row.Status != tt.status || row.Attempts != tt.clock.Attempts+1 || row.LastError != errBroker.Error() {
					t.Fatalf("row after the failure: status %s attempts %d last_error %q; want %s, %d, %q",
						row.Status, row.Attempts, row.LastError, tt.status, tt.clock.Attempts+1, errBroker)
				}
				offers := h.feed.offered()
				if !tt.republish {
					if len(offers) != 0 {
						t.Errorf("a %s clock was offered back: %v", tt.status, offers)
					}
					h.advance(time.Hour)
					if n := len(h.pub.published()); n != 1 {
						t.Errorf("published %d times, want once", n)
					}
					return
				}
				next := failedAt.Add(tt.nextTry)
				if !row.NextTryAt.Equal(next) {
					t.Errorf("next_try_at %v, want %v", row.NextTryAt.Sub(t0), next.Sub(t0))
				}
				if len(offers) != 1 || offers[0].ID != tt.clock.ID || !offers[0].At.Equal(next) {
					t.Fatalf("offered back %+v, want the clock at %v", offers, next.Sub(t0))
				}
				h.step(next, time.Millisecond, func(now time.Time) {
					if n := len(h.pub.published()); now.Before(next) && n != 1 {
						t.Fatalf("retry published at %v, before its next try %v", now.Sub(t0), next.Sub(t0))
					}
				})
				pubs := h.pub.published()
				if len(pubs) != 2 || !pubs[1].at.Equal(next) || pubs[1].rings[0].Attempt != tt.clock.Attempts+2 {
					t.Fatalf("retry: %d publishes; want the second at %v with attempt %d", len(pubs), next.Sub(t0), tt.clock.Attempts+2)
				}
				if row := h.store.row(tt.clock.ID); row.Status != alarm.StatusRung || row.Attempts != tt.clock.Attempts+2 {
					t.Errorf("after the retry: %s with %d attempts", row.Status, row.Attempts)
				}
			})
		})
	}
}

// A batch where some rings fail and others succeed records each on its own.
func TestFailedPublishPartOfBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.pub.result = func(r Ring) error {
			if r.Clock.ID%2 == 0 && r.Attempt == 1 {
				return errBroker
			}
			return nil
		}
		for id := int64(1); id <= 10; id++ {
			h.add(clockAt(id, t0.Add(time.Second)))
		}
		h.advance(time.Second)
		for id := int64(1); id <= 10; id++ {
			want := alarm.StatusRung
			if id%2 == 0 {
				want = alarm.StatusPending
			}
			if got := h.store.row(id).Status; got != want {
				t.Errorf("clock %d: %s, want %s", id, got, want)
			}
		}
		h.advance(750 * time.Millisecond)
		for id := int64(1); id <= 10; id++ {
			if got := h.store.row(id).Status; got != alarm.StatusRung {
				t.Errorf("clock %d after the retry: %s", id, got)
			}
		}
		if n := len(h.pub.published()); n != 2 {
			t.Errorf("%d publishes, want 2 (the 5 retries together)", n)
		}
	})
}

// Clocks whose latest_ring_at passed before their turn (a backlog after
// downtime) are expired, never published; the others of the batch ring.
func TestExpiredNotPublished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.add(
			alarm.Clock{ID: 1, RingAt: t0.Add(-10 * time.Second), LatestRingAt: t0.Add(-5 * time.Second)},
			alarm.Clock{ID: 2, RingAt: t0.Add(-10 * time.Second)},
			alarm.Clock{ID: 3, RingAt: t0.Add(-10 * time.Second), LatestRingAt: t0.Add(time.Minute)},
			alarm.Clock{ID: 4, RingAt: t0.Add(-10 * time.Second), LatestRingAt: t0}, // exactly now: still allowed
		)
		h.advance(time.Millisecond)
		got := h.pub.publishedIDs()
		slices.Sort(got)
		if !slices.Equal(got, []int64{2, 3, 4}) {
			t.Errorf("published %v, want [2 3 4]", got)
		}
		if row := h.store.row(1); row.Status != alarm.StatusExpired || row.Attempts != 0 {
			t.Errorf("clock 1: %s with %d attempts, want expired without an attempt", row.Status, row.Attempts)
		}
		h.advance(time.Hour)
		if slices.Contains(h.pub.publishedIDs(), 1) {
			t.Error("the expired clock was published")
		}
	})
}

// A lease lost between claim and deadline: the clock is not published but
// put back to pending (no attempt); the shard's new owner rings it.
func TestLeaseLostUnclaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.add(alarm.Clock{ID: 1, Shard: 1, RingAt: t0.Add(time.Second)}, alarm.Clock{ID: 2, Shard: 2, RingAt: t0.Add(time.Second)})
		h.advance(time.Second - claimAhead)
		if got := h.store.claimedIDs(); len(got) != 2 {
			t.Fatalf("claimed %v", got)
		}
		h.feed.lose(1)
		h.advance(claimAhead)
		if got := h.pub.publishedIDs(); !slices.Equal(got, []int64{2}) {
			t.Errorf("published %v, want only the clock of the shard still held", got)
		}
		if row := h.store.row(1); row.Status != alarm.StatusPending || row.Attempts != 0 {
			t.Errorf("clock of the lost shard: %s with %d attempts, want pending without an attempt", row.Status, row.Attempts)
		}
		h.advance(10 * time.Second)
		if slices.Contains(h.pub.publishedIDs(), 1) {
			t.Error("a clock of a lost shard was published")
		}
		if n := len(h.store.claimCalls()); n != 1 {
			t.Errorf("%d claims; the lost shard's clock must not be claimed again", n)
		}
	})
}

// A shard whose lease is not valid at claim time: its clocks are neither
// claimed nor kept (the feeder rescans the shard once its lease is valid
// again, or its new owner loads them), and they do not hold up the clocks
// of other shards.
func TestLeaseNotValidAtClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{ClaimBatch: 10})
		h.feed.lose(1)
		for id := int64(1); id <= 40; id++ {
			h.add(alarm.Clock{ID: id, Shard: 1, RingAt: t0.Add(900 * time.Millisecond)})
		}
		h.add(alarm.Clock{ID: 100, Shard: 2, RingAt: t0.Add(time.Second)})
		h.advance(time.Second)
		if got := h.pub.publishedIDs(); !slices.Equal(got, []int64{100}) {
			t.Fatalf("published %v, want [100]", got)
		}
		if got := h.store.claimedIDs(); !slices.Equal(got, []int64{100}) {
			t.Fatalf("claimed %v, want [100]", got)
		}
		if p := h.pub.published()[0]; !p.at.Equal(t0.Add(time.Second)) {
			t.Errorf("the clock of the valid shard rang at %v, want on time", p.at.Sub(t0))
		}
		if h.q.Len() != 0 {
			t.Errorf("%d clocks of the shard without a valid lease kept in memory", h.q.Len())
		}
		if row := h.store.row(1); row.Status != alarm.StatusPending {
			t.Errorf("clock of the shard without a valid lease: %s", row.Status)
		}
	})
}

func TestPublisherNotReadyClaimsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.pub.setReady(errors.New("rabbitmq: not connected"))
		h.add(clockAt(1, t0.Add(time.Second)), clockAt(2, t0.Add(2*time.Second)))
		h.step(t0.Add(5*time.Second), 10*time.Millisecond, func(time.Time) {
			if n := len(h.store.claimCalls()); n != 0 {
				t.Fatalf("claimed while the publisher is not ready")
			}
		})
		if len(h.pub.published()) != 0 || h.store.row(1).Status != alarm.StatusPending {
			t.Fatal("published or changed while the publisher is not ready")
		}
		h.pub.setReady(nil)
		h.advance(50 * time.Millisecond)
		got := h.pub.publishedIDs()
		slices.Sort(got)
		if !slices.Equal(got, []int64{1, 2}) {
			t.Errorf("after the publisher is ready: published %v", got)
		}
		if pubs := h.pub.published(); len(pubs) != 1 {
			t.Errorf("%d publishes, want the two overdue clocks in one", len(pubs))
		}
	})
}

func TestMaxInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{ClaimBatch: 2, MaxInFlight: 4})
		h.pub.gate = make(chan struct{})
		for id := int64(1); id <= 10; id++ {
			h.add(clockAt(id, t0.Add(time.Second)))
		}
		h.advance(time.Second)
		h.advance(time.Second)
		if got := len(h.store.claimedIDs()); got != 4 {
			t.Fatalf("%d claimed while publishes hang, want MaxInFlight 4", got)
		}
		for released := 0; len(h.pub.publishedIDs()) < 10 || released < len(h.pub.published()); released++ {
			h.pub.gate <- struct{}{}
			synctest.Wait()
			h.advance(time.Millisecond)
		}
		h.store.with(func(s *fakeStore) {
			if s.maxFiring > 4 {
				t.Errorf("%d clocks firing at once, MaxInFlight is 4", s.maxFiring)
			}
			if len(s.rung) != 10 {
				t.Errorf("%d rung, want 10", len(s.rung))
			}
		})
	})
}

// MySQL down: the claim fails, the clocks stay with the feeder, claims
// resume with backoff. A claim whose answer was lost but which MySQL
// applied is released before the next claim, so its clocks ring on time
// instead of staying firing until the firing timeout.
func TestClaimFailure(t *testing.T) {
	for _, applied := range []bool{false, true} {
		name := map[bool]string{false: "not applied", true: "applied, answer lost"}[applied]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, Config{})
				h.store.with(func(s *fakeStore) { s.claimErr, s.applyOnErr = errors.New("invalid connection"), applied })
				h.add(clockAt(1, t0.Add(time.Second)), clockAt(2, t0.Add(time.Second)))
				h.advance(time.Second - claimAhead)
				if n := len(h.store.claimCalls()); n != 1 {
					t.Fatalf("%d claims", n)
				}
				h.advance(claimAhead)
				if n := len(h.pub.published()); n != 0 {
					t.Fatal("published without a claim")
				}
				h.advance(5 * time.Second) // MySQL stays down: claims retry with backoff
				n := len(h.store.claimCalls())
				if n < 3 || n > 20 {
					t.Errorf("%d claim attempts in 5s of MySQL down: want a few, with backoff", n)
				}
				h.store.with(func(s *fakeStore) { s.claimErr = nil })
				h.advance(2 * time.Second)
				got := h.pub.publishedIDs()
				slices.Sort(got)
				if !slices.Equal(got, []int64{1, 2}) {
					t.Fatalf("after MySQL is back: published %v, want [1 2]", got)
				}
				for _, id := range []int64{1, 2} {
					if row := h.store.row(id); row.Status != alarm.StatusRung || row.Attempts != 1 {
						t.Errorf("clock %d: %s with %d attempts", id, row.Status, row.Attempts)
					}
				}
			})
		})
	}
}

// MySQL down while recording outcomes: the recorder retries; nothing is
// lost and in-flight stays counted until recorded.
func TestRecordRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.store.with(func(s *fakeStore) { s.writeErr = errors.New("connection refused") })
		h.add(clockAt(1, t0.Add(time.Second)))
		h.advance(time.Second)
		h.advance(10 * time.Second)
		if got := h.store.row(1).Status; got != alarm.StatusFiring {
			t.Fatalf("status %s while MySQL is down, want firing", got)
		}
		h.store.with(func(s *fakeStore) { s.writeErr = nil })
		h.advance(3 * time.Second)
		if got := h.store.row(1).Status; got != alarm.StatusRung {
			t.Fatalf("status %s after MySQL is back, want rung", got)
		}
		if n := len(h.pub.published()); n != 1 {
			t.Errorf("published %d times, want once", n)
		}
	})
}

// Run returns after ctx is cancelled: armed clocks go back to pending, a
// publish in flight finishes and is recorded, and no goroutine is left
// (synctest.Test fails when one outlives the bubble).
func TestShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.pub.gate = make(chan struct{})
		h.add(clockAt(1, t0.Add(500*time.Millisecond)), clockAt(2, t0.Add(time.Second)), clockAt(3, t0.Add(time.Hour)))
		h.advance(time.Second - claimAhead) // 1 is publishing (held at the gate), 2 is armed
		if got := h.store.claimedIDs(); len(got) != 2 {
			t.Fatalf("claimed %v", got)
		}
		h.cancel()
		synctest.Wait()
		select {
		case <-h.done:
			t.Fatal("Run returned while a publish was in flight")
		default:
		}
		h.pub.gate <- struct{}{}
		synctest.Wait()
		select {
		case <-h.done:
		default:
			t.Fatal("Run did not return after the publish in flight finished")
		}
		for id, want := range map[int64]alarm.Status{1: alarm.StatusRung, 2: alarm.StatusPending, 3: alarm.StatusPending} {
			if got := h.store.row(id).Status; got != want {
				t.Errorf("clock %d after shutdown: %s, want %s", id, got, want)
			}
		}
		if got := h.pub.publishedIDs(); !slices.Equal(got, []int64{1}) {
			t.Errorf("published %v", got)
		}
		if h.clk.Armed() != 0 {
			t.Errorf("%d timers left armed", h.clk.Armed())
		}
	})
}

func TestShutdownIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.cancel()
		synctest.Wait()
		select {
		case <-h.done:
		default:
			t.Fatal("Run did not return")
		}
	})
}

// A claim of unknown outcome not yet released when Run stops is released
// on the way out.
func TestShutdownReleasesLostClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.store.with(func(s *fakeStore) { s.claimErr, s.applyOnErr = errors.New("invalid connection"), true })
		h.add(clockAt(1, t0.Add(time.Second)))
		h.advance(time.Second)
		if got := h.store.row(1).Status; got != alarm.StatusFiring {
			t.Fatalf("status %s after the applied claim, want firing", got)
		}
		h.stop()
		if got := h.store.row(1).Status; got != alarm.StatusPending {
			t.Errorf("status %s after shutdown, want pending", got)
		}
		if n := len(h.pub.published()); n != 0 {
			t.Errorf("published %d", n)
		}
	})
}

// Outcomes are written fenced by claim token: when the shard moved and its
// new owner re-claimed the clock (after recovering it), what this loop
// records late changes nothing.
func TestStaleOutcomeIsFenced(t *testing.T) {
	reclaim := func(s *fakeStore) { s.tokens[1] = 999 } // another instance's claim
	t.Run("unclaim after the lease was lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Config{})
			h.add(clockAt(1, t0.Add(time.Second)))
			h.advance(time.Second - claimAhead)
			h.feed.lose(1)
			h.store.with(reclaim)
			h.advance(claimAhead)
			if n := len(h.pub.published()); n != 0 {
				t.Fatal("published for a lost shard")
			}
			if row := h.store.row(1); row.Status != alarm.StatusFiring {
				t.Errorf("the new owner's claim was overwritten: %s", row.Status)
			}
		})
	})
	t.Run("rung recorded after the shard moved", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Config{})
			h.pub.gate = make(chan struct{})
			h.add(clockAt(1, t0.Add(time.Second)))
			h.advance(time.Second) // publishing, held
			h.store.with(reclaim)
			h.pub.gate <- struct{}{}
			synctest.Wait()
			if row := h.store.row(1); row.Status != alarm.StatusFiring || row.Attempts != 1 {
				t.Errorf("the new owner's claim was overwritten: %s, %d attempts (want firing, the 1 its claim counted)", row.Status, row.Attempts)
			}
		})
	})
}

// A claim of unknown outcome is released even when its clocks were dropped
// from memory meanwhile (the lease lapsed while MySQL was away): a rescan
// of the shard finds them pending, not firing until the firing timeout.
func TestLostClaimReleasedAfterLeaseLapse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		down := errors.New("connection refused")
		h.store.with(func(s *fakeStore) { s.claimErr, s.applyOnErr = errors.New("invalid connection"), true })
		h.add(clockAt(1, t0.Add(time.Second)))
		h.advance(time.Second - claimAhead)
		if got := h.store.row(1).Status; got != alarm.StatusFiring {
			t.Fatalf("status %s after the applied claim", got)
		}
		// MySQL stays away, the local lease reckoning lapses
		h.store.with(func(s *fakeStore) { s.claimErr, s.writeErr = down, down })
		h.feed.lose(1)
		h.advance(3 * time.Second)
		// MySQL is back before the lease is renewed
		h.store.with(func(s *fakeStore) { s.claimErr, s.writeErr = nil, nil })
		h.advance(3 * time.Second)
		if got := h.store.row(1).Status; got != alarm.StatusPending {
			t.Fatalf("status %s once MySQL is back: the lost claim was not released", got)
		}
		if n := len(h.pub.published()); n != 0 {
			t.Fatalf("published %d without a valid lease", n)
		}
		// the lease is renewed: the feeder's rescan finds the clock pending
		h.feed.regain(1)
		h.feed.Offer(alarm.Due{ID: 1, Shard: 1, At: t0.Add(time.Second)})
		h.advance(time.Millisecond)
		if got := h.pub.publishedIDs(); !slices.Equal(got, []int64{1}) {
			t.Errorf("published %v after the rescan, want [1]", got)
		}
	})
}

// A ring that never left the process (broker not connected) is no attempt:
// the clock goes back to pending with its attempts unchanged, so a broker
// outage cannot make a max_attempts clock dead, and it rings once the
// broker is back.
func TestNotSentIsNoAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errNotSent := errors.New("not connected")
		h := newHarness(t, Config{NotSent: func(err error) bool { return errors.Is(err, errNotSent) }})
		down := true
		h.pub.result = func(Ring) error {
			if down {
				// the connection dropped after the claimer saw it ready
				h.pub.setReady(errNotSent)
				return errNotSent
			}
			return nil
		}
		c := alarm.Clock{ID: 7, RingAt: t0.Add(time.Second), MaxAttempts: 1}
		h.add(c)
		h.advance(time.Second)
		row := h.store.row(7)
		if row.Status != alarm.StatusPending || row.Attempts != 0 || row.LastError != "" {
			t.Fatalf("after a not-sent publish: %s, %d attempts, last_error %q; want pending, 0, none", row.Status, row.Attempts, row.LastError)
		}
		// The claimer checks that the broker is ready before it claims, not
		// in one step with the claim: one that saw it ready just before the
		// publish failed may claim the clock offered back once more, and
		// that publish is not sent either (one more offer, no attempt).
		// Then it sees the broker down and claims nothing until it is back.
		offers := h.feed.offered()
		if len(offers) == 0 || len(offers) > 2 || slices.ContainsFunc(offers, func(d alarm.Due) bool { return d.ID != 7 }) {
			t.Fatalf("offered back %+v, want clock 7, once or twice", offers)
		}
		if n := len(h.pub.published()); n != len(offers) {
			t.Fatalf("published %d times while the broker was down, want %d (once per offer back)", n, len(offers))
		}
		down = false
		h.pub.setReady(nil)
		h.advance(100 * time.Millisecond)
		if row := h.store.row(7); row.Status != alarm.StatusRung || row.Attempts != 1 {
			t.Fatalf("once the broker is back: %s with %d attempts, want rung with 1", row.Status, row.Attempts)
		}
	})
}

// Busy tells the janitor when to leave MySQL to the rings: from `within`
// before a clock is due until its ring is recorded, and not otherwise.
func TestBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		if h.loop.Busy(time.Second) {
			t.Fatal("busy with an empty queue")
		}
		at := t0.Add(3 * time.Second)
		h.add(clockAt(1, at))
		h.step(at.Add(time.Second), 10*time.Millisecond, func(now time.Time) {
			rung := h.store.row(1).Status == alarm.StatusRung
			busy := h.loop.Busy(time.Second)
			switch {
			case now.Before(at.Add(-time.Second)) && busy:
				t.Fatalf("busy at %v, more than 1s before the clock is due", now.Sub(t0))
			case !now.Before(at.Add(-time.Second)) && !rung && !busy:
				t.Fatalf("not busy at %v, the clock due at %v not rung yet", now.Sub(t0), at.Sub(t0))
			}
		})
		if h.store.row(1).Status != alarm.StatusRung {
			t.Fatal("the clock did not ring")
		}
		if h.loop.Busy(time.Second) {
			t.Error("still busy after the only clock rang and was recorded")
		}
	})
}

// Slow claims: a claim that ends after the clock's time makes its ring
// late, so the loop claims earlier while claims are slow (twice the
// slowest recent claim, up to ClaimAheadMax), and never earlier than
// ClaimAhead once they are quick again.
func TestClaimAheadFollowsSlowClaims(t *testing.T) {
	for _, tt := range []struct {
		name     string
		aheadMax time.Duration
		claimAt  [2]time.Duration // of the second clock, before its time: at least, at most
		pubLate  time.Duration    // its publish after its time
	}{
		// 5 s later, the 300 ms claim is remembered as 212 ms: claimed
		// about 424 ms ahead, in time
		{"adapting", time.Second, [2]time.Duration{400 * time.Millisecond, 450 * time.Millisecond}, 0},
		{"claim_ahead_max = claim_ahead", claimAhead, [2]time.Duration{claimAhead, claimAhead}, 200 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, Config{ClaimAheadMax: tt.aheadMax})
				h.store.mu.Lock()
				h.store.claimTakes = 300 * time.Millisecond
				h.store.mu.Unlock()
				first, second := t0.Add(5*time.Second), t0.Add(10*time.Second)
				h.add(clockAt(1, first), clockAt(2, second))
				h.step(second.Add(time.Second), 10*time.Millisecond, func(time.Time) {})
				claims, pubs := h.store.claimCalls(), h.pub.published()
				if len(claims) != 2 || len(pubs) != 2 {
					t.Fatalf("claims %+v, publishes %d; want 2 of each", claims, len(pubs))
				}
				// the first claim, 100 ms ahead, ends 200 ms late
				if !claims[0].at.Equal(first.Add(-claimAhead)) || !pubs[0].at.Equal(first.Add(200*time.Millisecond)) {
					t.Fatalf("first clock claimed at %v, published at %v", claims[0].at.Sub(t0), pubs[0].at.Sub(t0))
				}
				if got := second.Sub(claims[1].at); got < tt.claimAt[0] || got > tt.claimAt[1] {
					t.Errorf("second clock claimed %v before its time, want %v to %v", got, tt.claimAt[0], tt.claimAt[1])
				}
				if got := pubs[1].at.Sub(second); got != tt.pubLate {
					t.Errorf("second clock published %v after its time, want %v", got, tt.pubLate)
				}
			})
		})
	}
	// a slow claim is forgotten with time, not with the count of quick
	// claims after it: it halves every slowHalfLife
	clk := newFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(Config{ClaimAhead: claimAhead, ClaimAheadMax: time.Second, Clock: clk}, NewQueue(), nil, nil, nil)
	if got := l.ahead(); got != claimAhead {
		t.Fatalf("ahead before any claim: %v, want %v", got, claimAhead)
	}
	l.claimTook(400 * time.Millisecond)
	if got := l.ahead(); got != 800*time.Millisecond {
		t.Fatalf("ahead after a 400 ms claim: %v, want 800ms", got)
	}
	for range 60 { // a second of quick claims
		clk.Advance(time.Second / 60)
		l.claimTook(time.Millisecond)
	}
	if got, want := l.ahead(), time.Duration(float64(800*time.Millisecond)*math.Exp2(-float64(time.Second)/float64(slowHalfLife))); got < want-time.Millisecond || got > want+time.Millisecond {
		t.Fatalf("ahead a second after a 400 ms claim: %v, want %v", got, want)
	}
	l.claimTook(2 * time.Second)
	if got := l.ahead(); got != time.Second {
		t.Fatalf("ahead after a 2 s claim: %v, want the 1s cap", got)
	}
	clk.Advance(slowHalfLife)
	if got := l.ahead(); got != time.Second {
		t.Fatalf("ahead a half-life after a 2 s claim: %v, want the 1s cap (twice 1 s)", got)
	}
	clk.Advance(10 * slowHalfLife) // no claim meanwhile: forgotten all the same
	if got := l.ahead(); got != claimAhead {
		t.Fatalf("ahead long after the slow claims: %v, want %v", got, claimAhead)
	}
}

// A claim covers a slice of time: the clocks due within half of the claim
// lead again come with the first, instead of a claim per clock or two.
func TestClaimTakesASliceOfTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		for i := range 20 {
			h.add(clockAt(int64(i+1), t0.Add(time.Second+time.Duration(i)*10*time.Millisecond)))
		}
		h.step(t0.Add(1500*time.Millisecond), time.Millisecond, func(time.Time) {})
		claims := h.store.claimCalls()
		if len(claims) == 0 || !claims[0].at.Equal(t0.Add(time.Second-claimAhead)) {
			t.Fatalf("claims %+v; want the first at %v", claims, time.Second-claimAhead)
		}
		// due from 1.00 s to 1.05 s: within 150 ms of 0.90 s
		if len(claims[0].got) != 6 {
			t.Errorf("the first claim took %v, want the 6 clocks due within 150 ms", claims[0].got)
		}
		if len(claims) > 4 {
			t.Errorf("%d claims for 20 clocks 10 ms apart, want at most 4", len(claims))
		}
		for i, p := range h.pub.published() {
			for _, r := range p.rings {
				if !p.at.Equal(r.Clock.NextTryAt) {
					t.Errorf("publish %d: clock %d at %v, due %v", i, r.Clock.ID, p.at.Sub(t0), r.Clock.NextTryAt.Sub(t0))
				}
			}
		}
		if n := len(h.pub.publishedIDs()); n != 20 {
			t.Errorf("%d published, want 20", n)
		}
	})
}

// A few rings a millisecond apart are marked rung together, within
// RecordGap of the previous mark; many at once are marked at once. With no
// gap, every ring is a mark of its own.
func TestRecorderGathersFewRungMarks(t *testing.T) {
	for _, tt := range []struct {
		gap       time.Duration
		wantCalls int
	}{
		{0, 10},
		{10 * time.Millisecond, 2}, // the first at once, the next 9 at +10 ms
	} {
		t.Run(tt.gap.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, Config{RecordGap: tt.gap})
				at := t0.Add(time.Second)
				for i := range 10 {
					h.add(clockAt(int64(i+1), at.Add(time.Duration(i)*time.Millisecond)))
				}
				h.advance(time.Second)
				for range 9 {
					h.advance(time.Millisecond)
				}
				h.store.with(func(s *fakeStore) {
					if tt.gap > 0 && len(s.rung) != 1 {
						t.Errorf("%d marked rung 9 ms after the first ring, want only it (the rest wait for the gap)", len(s.rung))
					}
				})
				h.advance(tt.gap)
				h.store.with(func(s *fakeStore) {
					if len(s.rung) != 10 || s.rungCalls != tt.wantCalls {
						t.Errorf("%d marked rung in %d round trips, want 10 in %d", len(s.rung), s.rungCalls, tt.wantCalls)
					}
				})
			})
		})
	}
	t.Run("many", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Config{RecordGap: time.Second})
			at := t0.Add(time.Second)
			h.add(clockAt(1, at))
			for id := int64(2); id <= 101; id++ {
				h.add(clockAt(id, at.Add(2*time.Millisecond)))
			}
			h.advance(time.Second)
			h.advance(2 * time.Millisecond)
			h.store.with(func(s *fakeStore) {
				if len(s.rung) != 101 || s.rungCalls != 2 {
					t.Errorf("%d marked rung in %d round trips, want 101 in 2: 100 rings are not a few to wait for", len(s.rung), s.rungCalls)
				}
			})
		})
	})
}
