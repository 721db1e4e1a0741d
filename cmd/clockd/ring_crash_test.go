package main

import (
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// clockd killed with SIGKILL mid-storm and started again: every clock is
// delivered; a clock may ring twice (published, then killed before it was
// marked rung), always with its own message_id. The new process is another
// instance (its id is host+pid): it takes the shards over once the old
// leases expire (CLOCKD_LEASE_TTL=3s) and puts back what the old one left
// firing.
func TestRingKilledMidStorm(t *testing.T) {
	t.Parallel()
	const n, spread = 3000, 5 * time.Second
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(nil))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "crash")

	from := time.Now().Add(2 * time.Second)
	clocks := postClocks(t, d, spreadSpecs("crash", "k", n, from, spread))
	time.Sleep(time.Until(from.Add(2 * time.Second)))
	d.Kill()
	killed := time.Now()
	before := cons.Distinct()
	d.Start()
	d.WaitReady(30 * time.Second)
	t.Logf("killed after %d of %d clocks were received; ready again after %v", before, n, time.Since(killed).Round(time.Millisecond))

	if !waitReceived(cons, clocks, time.Until(latest(clocks))+30*time.Second) {
		t.Error("not every clock arrived after the restart")
	}
	time.Sleep(time.Second)
	j := judge(cons, clocks)
	j.check(t)
	t.Logf("%v; back %v after the kill", j, time.Since(killed).Round(time.Millisecond))
	if got := countStatus(t, d, "crash", "pending") + countStatus(t, d, "crash", "firing"); got != 0 {
		t.Errorf("%d clocks still pending or firing after they all arrived", got)
	}
}
