package main

import (
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// MySQL stalls while clocks fall due. A claim sent as the stall begins
// fails after its 10 s timeout: "claim failed; ringing paused until it
// works". Its clocks go back to memory; by then the shard leases have
// lapsed (the lease rounds fail too), so the next claim drops them without
// asking MySQL and returns no error, and the claim worker logs "claims work
// again" at INFO, while MySQL still answers nothing. The next failure logs
// "claim failed" as failures=1 again. An operator reading the log during
// the outage is told that ringing resumed when it did not. (README: logs
// say "connection losses and recoveries".)
//
// Found by review; now a claim that asked MySQL nothing (errNoLease) is
// neither a failure nor a recovery.
func TestNoClaimRecoveryLoggedWhileMySQLStalls(t *testing.T) {
	e := newEnv(t)
	dsn, proxy := proxiedDSN(t, e)
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_LOG_LEVEL": "info"}))
	_ = testenv.Consume(t, e.AMQP, e.Exchange, "cl")
	// clocks due every 20 ms, over the stall
	from := time.Now().Add(2 * time.Second)
	postClocks(t, d, spreadSpecs("cl", "c", 1500, from, 30*time.Second))
	time.Sleep(time.Until(from.Add(2 * time.Second)))
	mark := len(d.Logs())
	proxy.Stall()
	time.Sleep(16 * time.Second)
	during := d.Logs()[mark:]
	proxy.Resume()
	d.WaitReady(30 * time.Second)
	if !strings.Contains(during, `msg="claim failed`) {
		t.Fatalf("no claim failed during a 16 s MySQL stall:\n%s", during)
	}
	if strings.Contains(during, `msg="claims work again"`) {
		var lines []string
		for line := range strings.Lines(during) {
			if strings.Contains(line, "claim") {
				lines = append(lines, strings.TrimSpace(line))
			}
		}
		t.Errorf("\"claims work again\" logged while MySQL was still stalled:\n%s", strings.Join(lines, "\n"))
	}
}
