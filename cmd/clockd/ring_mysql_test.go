package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/testenv"
)

// MySQL away: clockd talks to MySQL through a proxy the test cuts (every
// connection closed, the port closed) and restores; MySQL itself, shared
// with other tests and sessions, is untouched. While it is cut, /readyz
// answers 503 and ringing pauses (a ring needs its claim); after it is
// restored ringing resumes by itself and nothing is lost.
func TestRingMySQLCut(t *testing.T) {
	t.Parallel()
	const n, spread, cutFor = 1000, 8 * time.Second, 3 * time.Second
	e := newEnv(t)
	cfg, err := mysql.ParseDSN(e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartProxy(t, cfg.Addr)
	cfg.Addr = proxy.Addr
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_MYSQL_DSN": cfg.FormatDSN()}))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "db")

	from := time.Now().Add(1500 * time.Millisecond)
	clocks := postClocks(t, d, spreadSpecs("db", "m", n, from, spread))
	time.Sleep(time.Until(from.Add(2 * time.Second)))
	proxy.Cut()
	cutAt := time.Now()
	before := cons.Distinct()

	// /readyz tells
	ready := 0
	for time.Since(cutAt) < 2*time.Second {
		if ready, _ = d.Ready(); ready == http.StatusServiceUnavailable {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ready != http.StatusServiceUnavailable {
		t.Errorf("/readyz answered %d with MySQL cut, want 503", ready)
	}
	time.Sleep(time.Until(cutAt.Add(cutFor)))
	restoreAt := time.Now()
	proxy.Restore()
	d.WaitReady(20 * time.Second)
	t.Logf("MySQL cut for %v after %d of %d clocks were received; ready %v after the restore",
		cutFor, before, n, time.Since(restoreAt).Round(time.Millisecond))

	if !waitReceived(cons, clocks, time.Until(latest(clocks))+30*time.Second) {
		t.Error("not every clock arrived after MySQL came back")
	}
	time.Sleep(time.Second)
	j := judge(cons, clocks)
	j.check(t)

	// Ringing paused: nothing was received from a moment after the cut
	// (rings claimed just before it may still be published) until MySQL
	// was back.
	paused := 0
	for _, r := range cons.Rings() {
		if r.Received.After(cutAt.Add(time.Second)) && r.Received.Before(restoreAt) {
			paused++
		}
	}
	if paused > 0 {
		t.Errorf("%d rings received while MySQL was cut", paused)
	}
	// Ringing resumed at once: what fell due during the cut rang soon after
	// the restore, not at the loaders' next full rescan (30 s).
	first := map[int64]time.Time{}
	for _, r := range cons.Rings() {
		if f, ok := first[r.ID]; !ok || r.Received.Before(f) {
			first[r.ID] = r.Received
		}
	}
	slow := 0
	for _, c := range clocks {
		at, _ := time.Parse(time.RFC3339Nano, c.RingAt)
		if got, ok := first[c.ID]; ok && got.After(maxTime(at, restoreAt).Add(10*time.Second)) {
			slow++
		}
	}
	if slow > 0 {
		t.Errorf("%d clocks rang more than 10s after MySQL came back (or after their ring_at)", slow)
	}
	t.Logf("%v", j)
	if got := countStatus(t, d, "db", "pending") + countStatus(t, d, "db", "firing"); got != 0 {
		t.Errorf("%d clocks still pending or firing after they all arrived", got)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
