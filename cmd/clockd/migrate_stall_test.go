package main

import (
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// MySQL stops answering the connection that runs the migrations, in the
// middle of them (a SIGSTOPped or frozen server, a black-holed flow; here
// the proxy holds the statement 00001 sends third). Migrations run on
// connections without a read timeout (README: "so a long index build is not
// cut off"), so clockd waits for ever: it does not listen on HTTP yet, and
// it writes not one line, at any level, for as long as it waits (measured:
// nothing in 150 s, then killed). Before the migrations (the same stall at
// the first connection) it exits after 30 s with "look for database …:
// invalid connection". An operator (or Kubernetes, whose liveness probe then
// kills it, possibly leaving a half-applied migration behind) has no clue
// what it waits for. README "Logs": a server that cannot start "logs
// clockd stopped at ERROR with the error"; failures are logged.
//
// Found by review; now running migrations are said to be running every
// 30 s.
func TestMigrationStalledIsNotSilent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dsn, proxy := proxiedDSN(t, e)
	// the migration's connection takes the schema lock first, then sends
	// 00001's statements: its third is held, the others flow
	// (held a little longer than the test waits: the proxy's cleanup waits
	// for the held statement)
	const limit = 60 * time.Second
	proxy.LateOn("GET_LOCK", "CREATE TABLE clock_shard", limit+2*time.Second)
	d := testenv.LaunchClockd(t, e.vars(map[string]string{"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_LOG_LEVEL": "info"}))
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		logs := d.Logs()
		if strings.Contains(logs, "migrations still running") {
			t.Logf("clockd said:\n%s", logs)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	code, body := d.Ready()
	t.Errorf("%v after its start with MySQL stalled during migration 00001, clockd has logged nothing (log: %q), "+
		"has not exited, and does not answer HTTP (/readyz: %d %s)", limit, d.Logs(), code, body)
}
