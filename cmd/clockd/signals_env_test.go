package main

// Signals, and start-up with hostile or mistyped settings.

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// SIGHUP (a closed terminal or ssh session, `kill -HUP` out of habit to
// reload the configuration, a supervisor forwarding it) kills clockd on
// the spot: it is not among the signals main catches, so Go's default
// action ends the process with no log line, no drain and no lease release.
// Its shards stay leased to a dead instance until cluster.lease_ttl runs
// out, clocks claimed at that moment are left firing (rung again after
// recovery), and the janitor lease is held too. Reproduce:
//
//	clockd serve & sleep 3; kill -HUP $!
//	-> the process is gone, the log ends at "acquired shards", clock_shard
//	   still names it with a lease in the future
//
// clockd must either ignore SIGHUP (and say so) or shut down gracefully
// on it, as on SIGTERM.
func TestSIGHUPIsNotAHardKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := testenv.Name("hup-")
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_INSTANCE_ID": id, "CLOCKD_LEASE_TTL": "30s"}))
	db := e.openDB(t)
	// wait until it holds its shards
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM clock_shard WHERE owner = ?", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("clockd holds no shard")
		}
		time.Sleep(100 * time.Millisecond)
	}

	d.Signal(syscall.SIGHUP)
	time.Sleep(3 * time.Second)

	resp, err := http.Get(d.URL + "/healthz")
	if err == nil {
		resp.Body.Close()
		t.Logf("clockd ignored SIGHUP and still serves")
		return
	}
	var held int
	if err := db.QueryRow("SELECT COUNT(*) FROM clock_shard WHERE owner = ? AND lease_until > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)", id).Scan(&held); err != nil {
		t.Fatal(err)
	}
	logs := d.Logs()
	if held > 0 || !strings.Contains(logs, "msg=stopped") {
		t.Errorf("SIGHUP killed clockd without a graceful shutdown: it no longer answers, %d shard leases are still held by it "+
			"(until lease_ttl runs out), and its log has no shutdown:\n%s", held, logs)
	}
}

// A huge http.max_concurrent_requests is not refused at start: serve
// panics (exit 2, a goroutine dump instead of a message naming the key)
// after it has already migrated the database. Reproduce:
//
//	CLOCKD_HTTP_MAX_CONCURRENT_REQUESTS=9223372036854775807 clockd serve
//	-> panic: makechan: size out of range (internal/httpapi.newLimiter)
func TestHugeMaxConcurrentRequestsDoesNotPanic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := testenv.LaunchClockd(t, e.vars(map[string]string{"CLOCKD_HTTP_MAX_CONCURRENT_REQUESTS": "9223372036854775807"}))
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		l := d.Logs()
		if strings.Contains(l, "panic:") || strings.Contains(l, "clockd: ") || strings.Contains(l, "clockd serving") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	logs := d.Logs()
	if strings.Contains(logs, "panic:") || !strings.Contains(logs, "http.max_concurrent_requests") {
		t.Errorf("CLOCKD_HTTP_MAX_CONCURRENT_REQUESTS=9223372036854775807: want a refusal naming http.max_concurrent_requests, got:\n%s",
			firstLines(logs, 12))
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// A mistyped variable name is ignored without a word: the YAML file refuses
// unknown keys (KnownFields), but CLOCKD_RETENTON=1h (for CLOCKD_RETENTION)
// or CLOCKD_HISTORY_KEPP=0 start clockd with the defaults (24 h, 720 h) and
// nothing in its log says the variable was not understood. Reproduce:
//
//	CLOCKD_RETENTON=1h clockd serve   # log: nothing about it; retention 24h
//
// clockd must refuse, or at least warn naming the variable, for a CLOCKD_*
// variable it does not know (CLOCKD_CONFIG and the client's CLOCKD_ADDR,
// CLOCKD_TOKEN, CLOCKD_CACERT apart).
func TestMistypedEnvironmentVariableIsReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := testenv.LaunchClockd(t, e.vars(map[string]string{"CLOCKD_RETENTON": "1h"}))
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if l := d.Logs(); strings.Contains(l, "clockd serving") || strings.Contains(l, "clockd: ") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if logs := d.Logs(); !strings.Contains(logs, "CLOCKD_RETENTON") {
		t.Errorf("clockd started with CLOCKD_RETENTON=1h (a typo of CLOCKD_RETENTION) and said nothing about the unknown variable:\n%s",
			firstLines(logs, 8))
	}
}
