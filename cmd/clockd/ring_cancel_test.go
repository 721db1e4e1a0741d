package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// Cancel is final: thousands of clocks, each cancelled at about its ring
// time from concurrent goroutines. A clock whose DELETE answered 200 is
// never received; every other one (409: already firing or rung) arrives.
func TestRingCancelRacesRing(t *testing.T) {
	t.Parallel()
	const n, spread, workers = 3000, 3 * time.Second, 32
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(nil))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "race")

	from := time.Now().Add(2500 * time.Millisecond)
	clocks := postClocks(t, d, spreadSpecs("race", "c", n, from, spread))

	// Each worker cancels its share in ring order, each sent at a random
	// moment in the 400 ms before its ring_at: clockd claims a clock
	// (pending -> firing) CLOCKD_RING_CLAIM_AHEAD (100 ms) to 150 ms before
	// ring_at (up to 1 s while claims are slow),
	// and a DELETE takes tens of milliseconds here under -race, so a good
	// part of the cancels win the race and a good part lose it.
	codes := make([]int, n)
	lag := make([]time.Duration, n) // DELETE answered minus ring_at
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := w; i < n; i += workers {
				at, _ := time.Parse(time.RFC3339Nano, clocks[i].RingAt)
				time.Sleep(time.Until(at.Add(time.Duration(r.IntN(401)-400) * time.Millisecond)))
				var c httpapi.Clock
				code, err := d.Do(context.Background(), "DELETE", clockPath("race", clocks[i].BusinessID), nil, &c)
				if err != nil {
					t.Errorf("DELETE %s: %v", clocks[i].BusinessID, err)
				}
				if code == http.StatusOK && c.Status != "cancelled" {
					t.Errorf("DELETE %s answered 200 with status %s", clocks[i].BusinessID, c.Status)
				}
				codes[i] = code
				lag[i] = time.Since(at)
			}
		})
	}
	wg.Wait()
	var cancelled, conflicts int
	var rest []httpapi.Clock
	for i, code := range codes {
		switch code {
		case http.StatusOK:
			cancelled++
		case http.StatusConflict:
			conflicts++
			rest = append(rest, clocks[i])
		default:
			t.Errorf("DELETE %s answered %d, want 200 or 409", clocks[i].BusinessID, code)
		}
	}
	slices.Sort(lag)
	t.Logf("%d cancelled (200), %d too late (409); DELETE answered at ring_at %+v (p10) %+v (p50) %+v (p90)",
		cancelled, conflicts, lag[n/10].Round(time.Millisecond), lag[n/2].Round(time.Millisecond), lag[n*9/10].Round(time.Millisecond))
	if cancelled == 0 || conflicts == 0 {
		t.Logf("the race was one-sided: the test proves less than it should")
	}

	// judge a few seconds after the last ring time
	if !waitReceived(cons, rest, time.Until(latest(clocks))+15*time.Second) {
		t.Errorf("clocks not cancelled did not all arrive")
	}
	time.Sleep(time.Until(latest(clocks).Add(3 * time.Second)))
	j := judge(cons, clocks)
	var rangAfterCancel []string
	for i, code := range codes {
		if code == http.StatusOK && j.got[clocks[i].ID] > 0 {
			rangAfterCancel = append(rangAfterCancel, clocks[i].BusinessID)
		}
	}
	if len(rangAfterCancel) > 0 {
		t.Errorf("%d clocks rang although their cancel answered 200: %v", len(rangAfterCancel), rangAfterCancel[:min(10, len(rangAfterCancel))])
	}
	jr := judge(cons, rest)
	jr.check(t)
	if len(j.early) > 0 {
		t.Errorf("rang early: %v", j.early[:min(5, len(j.early))])
	}
	t.Logf("received: %v", jr)
}
