package main

import (
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// Many clocks with ring times spread over a few seconds all arrive, none
// before its ring_at. Not parallel: the lateness it logs is the figure the
// issue asks for, which other tests competing for the CPU would blur.
func TestRingManyClocksSpread(t *testing.T) {
	const n, spread = 2000, 5 * time.Second
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(nil))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "storm")

	from := time.Now().Add(2 * time.Second)
	clocks := postClocks(t, d, spreadSpecs("storm", "s", n, from, spread))
	if time.Now().After(from) {
		t.Logf("creating %d clocks took longer than the 2s head start", n)
	}
	if !waitReceived(cons, clocks, time.Until(from.Add(spread))+20*time.Second) {
		t.Errorf("not every clock arrived within 20s after the last ring time")
	}
	time.Sleep(time.Second) // duplicates, if any
	j := judge(cons, clocks)
	j.check(t)
	if j.dups > 0 {
		t.Errorf("%d duplicates without any failure", j.dups)
	}
	t.Logf("lateness (receipt - ring_at): %v", j)
	if got := countStatus(t, d, "storm", "pending") + countStatus(t, d, "storm", "firing"); got != 0 {
		t.Errorf("%d clocks still pending or firing after they all arrived", got)
	}
}
