package main

// Logs while MySQL is away: one line per state change, not one per
// attempt. The janitor logged a WARN on every lease renewal attempt
// (cluster.lease_ttl / 3): with the default TTL about 1,100 lines an hour
// per instance for one outage.

import (
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

func TestMySQLOutageLogsOncePerStateChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dsn, proxy := proxiedDSN(t, e)
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_MYSQL_DSN": dsn})) // lease TTL 3 s
	// the janitor lease is taken at start
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(d.Logs(), `msg="janitor lease"`); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the janitor never took its lease")
		}
	}
	time.Sleep(time.Second)
	from := len(d.Logs())
	proxy.Cut()
	time.Sleep(9 * time.Second) // an outage of three lease TTLs
	proxy.Restore()
	d.WaitReady(30 * time.Second)
	time.Sleep(time.Second)
	during := d.Logs()[from:]

	// Count the lines per message: a message repeated for one outage is a
	// log per attempt.
	per := map[string]int{}
	for line := range strings.Lines(during) {
		i := strings.Index(line, "msg=")
		if i < 0 || !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			continue
		}
		msg := line[i:]
		if j := strings.Index(msg, `" `); j > 0 {
			msg = msg[:j+1]
		}
		if strings.Contains(line, "shard=") { // one loader per shard: one line each is fine
			continue
		}
		if strings.Contains(msg, "mysql driver") { // one per pooled connection that died
			continue
		}
		per[msg]++
	}
	for msg, n := range per {
		if n > 2 {
			t.Errorf("%d WARN/ERROR lines %s during one 9 s MySQL outage; want one when it starts (and one when it ends)", n, msg)
		}
	}
	if t.Failed() {
		t.Logf("log lines during the outage:\n%s", during)
	}
}
