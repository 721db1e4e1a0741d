package main

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// Rescheduling moves a loaded clock in the heap: one moved later never
// rings at its old time, one moved earlier rings at its new time.
func TestRingReschedule(t *testing.T) {
	t.Parallel()
	const n = 200 // per direction
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(nil))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "move")

	// All inside the preload window (10s): in memory from their create on.
	t0 := time.Now()
	later := postClocks(t, d, spreadSpecs("move", "later", n, t0.Add(6*time.Second), 500*time.Millisecond))
	earlier := postClocks(t, d, spreadSpecs("move", "earlier", n, t0.Add(9200*time.Millisecond), 500*time.Millisecond))
	newLater := spreadSpecs("move", "later", n, t0.Add(8500*time.Millisecond), 500*time.Millisecond)
	newEarlier := spreadSpecs("move", "earlier", n, t0.Add(7*time.Second), 500*time.Millisecond)

	patch := func(specs []ringSpec) []httpapi.Clock {
		out := make([]httpapi.Clock, len(specs))
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i, s := range specs {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				var c httpapi.Clock
				code, err := d.Do(context.Background(), "PATCH", clockPath(s.App, s.BusinessID),
					map[string]any{"ring_at": s.RingAt.UTC().Format(time.RFC3339Nano)}, &c)
				if err != nil || code != http.StatusOK {
					t.Errorf("PATCH %s: %d %v", s.BusinessID, code, err)
					return
				}
				if at, _ := time.Parse(time.RFC3339Nano, c.RingAt); !at.Equal(s.RingAt) || c.NextTryAt != c.RingAt {
					t.Errorf("PATCH %s: ring_at %s next_try_at %s, want %v", s.BusinessID, c.RingAt, c.NextTryAt, s.RingAt)
				}
				out[i] = c
			})
		}
		wg.Wait()
		return out
	}
	movedLater := patch(newLater)
	if time.Since(t0) > 6*time.Second {
		t.Fatalf("moving %d clocks later took %v: they reached their old ring time first", n, time.Since(t0))
	}
	movedEarlier := patch(newEarlier)
	if time.Since(t0) > 7*time.Second {
		t.Fatalf("moving %d clocks earlier took until %v: their new ring time passed first", n, time.Since(t0))
	}
	all := append(append([]httpapi.Clock{}, movedLater...), movedEarlier...)
	if !waitReceived(cons, all, time.Until(latest(all))+15*time.Second) {
		t.Error("not every rescheduled clock arrived")
	}
	// wait past the old ring times of those moved earlier
	time.Sleep(time.Until(latest(earlier).Add(time.Second)))

	// Judged against the new ring times: each delivery carries its new
	// x-clock-ring-at and arrives at or after it, once (so a clock moved
	// later did not ring at its old time).
	j := judge(cons, all)
	j.check(t)
	if j.dups > 0 {
		t.Errorf("%d duplicates", j.dups)
	}
	// those moved earlier rang at the new time, well before the old one
	old := map[int64]time.Time{}
	for _, c := range append(later, earlier...) {
		old[c.ID], _ = time.Parse(time.RFC3339Nano, c.RingAt)
	}
	for _, r := range cons.Rings() {
		if r.Received.After(old[r.ID].Add(-time.Second)) && r.RingAt.Before(old[r.ID]) {
			t.Errorf("%s moved earlier to %v rang at %v, near its old time %v", r.BusinessID, r.RingAt, r.Received, old[r.ID])
		}
	}
	t.Logf("moved later and earlier: %v", j)
}
