package ring

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/schedule"
)

// recurring is a pending recurring clock on its first occurrence.
func recurring(t *testing.T, id int64, sp schedule.Spec, now time.Time) alarm.Clock {
	t.Helper()
	sc, err := schedule.Parse(sp)
	if err != nil {
		t.Fatal(err)
	}
	spec := sc.Spec()
	first, ok := sc.First(now)
	if !ok {
		t.Fatal("no first occurrence")
	}
	return alarm.Clock{ID: id, Shard: int(id % 4), RingAt: first, Schedule: &spec}
}

// ringTimes lists the occurrence (RingAt) and publish time of every ring.
func ringTimes(h *harness) (occ, at []time.Time) {
	for _, c := range h.pub.published() {
		for _, r := range c.rings {
			occ = append(occ, r.Clock.RingAt)
			at = append(at, c.at)
		}
	}
	return occ, at
}

// Each occurrence rings at its time, exactly, one after another: the row
// moves on when the occurrence is recorded, and the next is offered to the
// queue directly.
func TestRecurringRingsEachOccurrenceOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		c := recurring(t, 1, schedule.Spec{Every: 2 * time.Second, Start: t0.Add(time.Second)}, t0)
		h.add(c)
		h.step(t0.Add(10*time.Second), time.Millisecond, func(time.Time) {
			if h.store.maxFiring > 1 {
				t.Fatalf("two occurrences in flight")
			}
		})
		occ, at := ringTimes(h)
		if len(occ) != 5 {
			t.Fatalf("%d rings in 10 s of an every-2s clock, want 5: %v", len(occ), occ)
		}
		for i := range occ {
			want := t0.Add(time.Second + time.Duration(i)*2*time.Second)
			if !occ[i].Equal(want) || !at[i].Equal(want) {
				t.Errorf("ring %d: occurrence %v published at %v, want both %v", i, occ[i].Sub(t0), at[i].Sub(t0), want.Sub(t0))
			}
		}
		if got := h.store.row(1); got.Occurrences != 5 || got.Status != alarm.StatusPending || !got.RingAt.Equal(t0.Add(11*time.Second)) {
			t.Errorf("row after 5 occurrences: %+v", got)
		}
	})
}

// Daylight saving with the fake clock: "30 2 * * *" in Berlin rings once
// in the night the clocks go forward (at 03:00, the change) and once in
// the night they go back (the first 02:30).
func TestRecurringAcrossDaylightSaving(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		h.feed.setUntil(t0.AddDate(2, 0, 0)) // the test spans months
		// t0 is 2030-01-01; the changes of 2030 are on March 31 and October 27
		c := recurring(t, 1, schedule.Spec{Cron: "30 2 * * *", TimeZone: "Europe/Berlin",
			Start: time.Date(2030, 3, 30, 0, 0, 0, 0, berlin)}, t0)
		h.add(c)
		for range 3 {
			h.advance(h.store.row(1).NextTryAt.Sub(h.clk.Now()))
		}
		occ, at := ringTimes(h)
		want := []time.Time{
			time.Date(2030, 3, 30, 2, 30, 0, 0, berlin),
			time.Date(2030, 3, 31, 1, 0, 0, 0, time.UTC), // 03:00 CEST: 02:30 does not exist
			time.Date(2030, 4, 1, 2, 30, 0, 0, berlin),
		}
		if len(occ) != len(want) {
			t.Fatalf("rings %v, want %v", occ, want)
		}
		for i := range want {
			if !occ[i].Equal(want[i]) || !at[i].Equal(want[i]) {
				t.Errorf("ring %d: occurrence %v at %v, want %v", i, occ[i].In(berlin), at[i].In(berlin), want[i].In(berlin))
			}
		}
		// autumn: 02:30 happens twice on October 27, rings once
		h.clk.Advance(time.Date(2030, 10, 26, 12, 0, 0, 0, time.UTC).Sub(h.clk.Now()))
		synctest.Wait()
		before := len(h.pub.published())
		end := time.Date(2030, 10, 28, 12, 0, 0, 0, time.UTC)
		for h.clk.Now().Before(end) {
			h.advance(min(15*time.Minute, end.Sub(h.clk.Now())))
		}
		occ, _ = ringTimes(h)
		var autumn []string
		for _, o := range occ[before:] {
			if o.After(time.Date(2030, 10, 26, 12, 0, 0, 0, time.UTC)) {
				autumn = append(autumn, o.In(berlin).Format("01-02 15:04 MST"))
			}
		}
		if len(autumn) != 2 || autumn[0] != "10-27 02:30 CEST" || autumn[1] != "10-28 02:30 CET" {
			t.Errorf("rings around the autumn change: %v, want [10-27 02:30 CEST 10-28 02:30 CET]", autumn)
		}
	})
}

// A simulated outage: the broker is away for ten minutes of a one-minute
// schedule. skip rings the pending occurrence once, late, then the next
// future one on time; catch_up rings the pending one and the latest
// catch_up_limit missed ones at once, then goes on on time.
func TestRecurringMisfireAfterOutage(t *testing.T) {
	tests := []struct {
		name string
		spec schedule.Spec
		want []time.Duration // occurrences rung when the broker is back (after t0)
	}{
		{"skip", schedule.Spec{Cron: "* * * * *"}, []time.Duration{time.Minute, 11 * time.Minute}},
		{"catch_up 3", schedule.Spec{Cron: "* * * * *", Misfire: schedule.MisfireCatchUp, CatchUpLimit: 3},
			[]time.Duration{time.Minute, 8 * time.Minute, 9 * time.Minute, 10 * time.Minute, 11 * time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, Config{})
				h.pub.setReady(errors.New("broker away"))
				h.add(recurring(t, 1, tt.spec, t0.Add(time.Second)))
				for range 10 * 60 {
					h.advance(time.Second)
				}
				if n := len(h.pub.published()); n != 0 {
					t.Fatalf("%d publishes while the broker was away", n)
				}
				h.pub.setReady(nil) // back at 10:10:30 + ...
				h.advance(30 * time.Second)
				for h.clk.Now().Before(t0.Add(11*time.Minute + 500*time.Millisecond)) {
					h.advance(100 * time.Millisecond)
				}
				occ, at := ringTimes(h)
				if len(occ) != len(tt.want) {
					t.Fatalf("rang %v, want occurrences %v", occ, tt.want)
				}
				for i, w := range tt.want {
					if !occ[i].Equal(t0.Add(w)) {
						t.Errorf("ring %d: occurrence %v, want %v", i, occ[i].Sub(t0), w)
					}
				}
				if last := at[len(at)-1]; !last.Equal(t0.Add(11 * time.Minute)) {
					t.Errorf("the first occurrence after the outage rang at %v, want on time", last.Sub(t0))
				}
			})
		})
	}
}

// An occurrence that keeps failing is given up at its occurrence_deadline
// and the clock moves on to the next one, which rings.
func TestRecurringOccurrenceDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{})
		failing := true
		h.pub.mu.Lock()
		h.pub.result = func(r Ring) error {
			if failing && r.Clock.RingAt.Equal(t0.Add(time.Minute)) {
				return errBroker
			}
			return nil
		}
		h.pub.mu.Unlock()
		h.add(recurring(t, 1, schedule.Spec{Cron: "* * * * *", OccurrenceDeadline: 10 * time.Second}, t0.Add(time.Second)))
		for h.clk.Now().Before(t0.Add(2*time.Minute + time.Second)) {
			h.advance(100 * time.Millisecond)
		}
		h.store.mu.Lock()
		advs := append([]alarm.Advance(nil), h.store.advanced...)
		h.store.mu.Unlock()
		if len(advs) != 2 || advs[0].Status != alarm.StatusExpired || !advs[0].Occurrence.Equal(t0.Add(time.Minute)) ||
			advs[1].Status != alarm.StatusRung || !advs[1].Occurrence.Equal(t0.Add(2*time.Minute)) {
			t.Fatalf("occurrences recorded: %+v", advs)
		}
		if got := h.store.row(1); got.Occurrences != 1 || !got.RingAt.Equal(t0.Add(3*time.Minute)) {
			t.Errorf("row: %+v", got)
		}
	})
}
