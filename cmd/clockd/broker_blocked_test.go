package main

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// blockedBroker starts clockd on a private RabbitMQ node, rings one clock,
// then sets off the node's memory alarm and makes clocks come due, so that
// the broker blocks clockd's publishing connection. It returns once
// /readyz says so.
func blockedBroker(t *testing.T, app string) (*testenv.RabbitNode, *testenv.Clockd, *testenv.Consumer, []httpapi.Clock) {
	t.Helper()
	node := testenv.StartRabbitNode(t)
	e := newEnv(t)
	e.AMQP = node.URL()
	d := testenv.StartClockd(t, e.vars(nil))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, app)
	warm := postClocks(t, d, spreadSpecs(app, "warm", 1, time.Now().Add(300*time.Millisecond), time.Millisecond))
	if !waitReceived(cons, warm, 15*time.Second) {
		t.Fatal("warm-up clock did not ring")
	}
	node.Ctl("set_vm_memory_high_watermark", "0.0000001")
	time.Sleep(2 * time.Second)
	clocks := postClocks(t, d, spreadSpecs(app, "b", 50, time.Now().Add(500*time.Millisecond), time.Second))
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, body := d.Ready()
		if code == http.StatusServiceUnavailable && strings.Contains(body, "blocked") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("/readyz does not say blocked during the memory alarm: %d %s", code, body)
		}
	}
	return node, d, cons, clocks
}

// SIGTERM while a memory alarm on the broker blocks clockd's connection
// ends the process within its bounds (README, Shutdown: connections are
// closed with a 2 s deadline each). amqp091's CloseDeadline alone waited
// for a close-ok the blocked broker never sent, past its deadline, since
// every heartbeat the broker still sent moved the socket's read deadline
// on: the process hung until the supervisor's SIGKILL. Its clocks ring
// once the alarm clears and clockd is started again.
func TestSIGTERMWhileBrokerBlockedExits(t *testing.T) {
	t.Parallel()
	node, d, cons, clocks := blockedBroker(t, "blk")
	start := time.Now()
	d.Signal(syscall.SIGTERM)
	if err := d.Wait(20 * time.Second); err != nil {
		t.Errorf("exit after SIGTERM while the broker blocks: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("SIGTERM while the broker blocks the connection: exited after %v", took.Round(time.Millisecond))
	}
	node.Ctl("set_vm_memory_high_watermark", "0.4")
	d.Start()
	d.WaitReady(60 * time.Second)
	if !waitReceived(cons, clocks, 40*time.Second) {
		t.Errorf("%d of %d clocks never rang", len(judge(cons, clocks).missing()), len(clocks))
	}
}

// A blocked connection rings nothing: /metrics says so
// (clockd_rabbit_blocked 1), so that the ClockdBrokerBlocked alert can
// fire (clockd_rabbit_connected stays 1, and no attempt fails), and says
// so no more once the alarm clears.
func TestBlockedBrokerShowsInMetrics(t *testing.T) {
	t.Parallel()
	node, d, cons, clocks := blockedBroker(t, "blkm")
	if v, ok := scrapeGauge(d, "clockd_rabbit_blocked"); !ok || v != 1 {
		t.Errorf("broker blocks every ring (/readyz 503), but clockd_rabbit_blocked is %v (found %v)", v, ok)
	}
	node.Ctl("set_vm_memory_high_watermark", "0.4")
	if !waitReceived(cons, clocks, 40*time.Second) {
		t.Errorf("%d of %d clocks never rang", len(judge(cons, clocks).missing()), len(clocks))
	}
	if v, _ := scrapeGauge(d, "clockd_rabbit_blocked"); v != 0 {
		t.Errorf("clockd_rabbit_blocked %v after the alarm cleared and the clocks rang", v)
	}
}

// A memory alarm of 9 s and nothing else is no deleted exchange. README
// (Several instances): each instance probes its binding to the hints and
// tokens exchanges; a late probe "from a slow or throttled broker, is
// waited for". A blocked connection (the alarm) sends nothing back: every
// alarm of more than 5 s was reported as "hints: exchange deleted on the
// broker", counted in clockd_hints_rebinds_total, with a rescan of every
// shard and the cached tokens forgotten (found by review).
func TestMemoryAlarmIsNoDeletedHintsExchange(t *testing.T) {
	node := testenv.StartRabbitNode(t)
	e := newEnv(t)
	e.AMQP = node.URL()
	d := testenv.StartClockd(t, e.vars(nil))
	time.Sleep(3 * time.Second) // probes go and come back
	node.Ctl("set_vm_memory_high_watermark", "0.0000001")
	time.Sleep(9 * time.Second) // past the 5 checks a probe is waited for
	node.Ctl("set_vm_memory_high_watermark", "0.4")
	time.Sleep(7 * time.Second) // the probes out come back, new ones go
	for _, l := range strings.Split(d.Logs(), "\n") {
		if strings.Contains(l, "exchange deleted on the broker") {
			t.Errorf("a memory alarm reported as a deleted exchange: %s", l)
		}
	}
	for _, x := range []string{"hints", "tokens"} {
		name := `clockd_hints_rebinds_total{exchange="` + x + `"}`
		if v, ok := scrapeGauge(d, name); !ok || v != 0 {
			t.Errorf("%s = %v (found %v) after a memory alarm, want 0", name, v, ok)
		}
	}
}

// A memory alarm while a hot instant of clocks with large payloads (1 MB,
// clock.max_payload_bytes raised) comes due: their batch is larger than
// the socket buffers, and a broker that blocks reads nothing more. README
// (At least once): a blocked connection "is kept, and costs no attempts
// past the batch that ran into the alarm". The write failed at its
// deadline (the confirm timeout), the connection was cut, the next one
// (not known to be blocked until its first publish) ran into the alarm
// again, an attempt each time: 37-39 of 40 clocks had 2 attempts within
// 40 s, and with a small max_attempts they were dead (found by review).
// Now the write waits for the broker, and the rest of the batch is not
// sent: no clock has a second attempt. A SIGTERM meanwhile ends the
// process within its bounds (the held write hung it until the alarm
// cleared: found by a review of the fix), and every clock rings once the
// alarm clears and clockd is back.
func TestMemoryAlarmWithLargeBatchesBurnsNoAttempts(t *testing.T) {
	node := testenv.StartRabbitNode(t)
	e := newEnv(t)
	e.AMQP = node.URL()
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_RETRY_MIN": "200ms", "CLOCKD_RETRY_MAX": "1s",
		"CLOCKD_MAX_PAYLOAD_BYTES": "1048576"}))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "bigalarm")
	warm := postClocks(t, d, spreadSpecs("bigalarm", "warm", 1, time.Now().Add(300*time.Millisecond), time.Millisecond))
	if !waitReceived(cons, warm, 15*time.Second) {
		t.Fatal("warm-up clock did not ring")
	}
	// created before the alarm, due at one instant once it is in effect
	const n = 24
	payload := `"` + strings.Repeat("x", 1000000) + `"`
	at := time.Now().Add(15 * time.Second)
	specs := spreadSpecs("bigalarm", "b", n, at, time.Millisecond)
	for i := range specs {
		specs[i].Extra = map[string]any{"max_attempts": 2, "payload": payload}
	}
	var clocks []httpapi.Clock
	for lo := 0; lo < n; lo += 4 { // a few per request: MySQL's max_allowed_packet
		clocks = append(clocks, postClocks(t, d, specs[lo:lo+4])...)
	}
	if time.Until(at) < 5*time.Second {
		t.Fatalf("creating the clocks took too long: %v left before their ring time", time.Until(at))
	}
	node.Ctl("set_vm_memory_high_watermark", "0.0000001")
	if time.Until(at) < 2*time.Second {
		t.Fatalf("setting the alarm took too long: %v left before the ring time", time.Until(at))
	}
	time.Sleep(time.Until(at) + 15*time.Second) // three confirm timeouts into the alarm
	var dead, burnt int
	var example string
	for _, c := range clocks {
		g := getClock(t, d, "bigalarm", c.BusinessID)
		if g.Status == "dead" {
			dead++
		}
		if g.Attempts > 1 {
			burnt++
			if example == "" && g.LastError != nil {
				example = fmt.Sprintf("%s: %s, attempts %d, last_error %s", g.BusinessID, g.Status, g.Attempts, *g.LastError)
			}
		}
	}
	if dead > 0 || burnt > 0 {
		t.Errorf("15 s into a memory alarm (the broker only blocks): %d of %d clocks dead, %d with more than one attempt (e.g. %s); "+
			"connection lost %d times", dead, n, burnt, example, strings.Count(d.Logs(), `msg="rabbitmq connection lost"`))
	}
	start := time.Now()
	if err := d.Stop(30 * time.Second); err != nil {
		t.Errorf("SIGTERM during the alarm: %v", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("SIGTERM during the alarm, with a write held: exit after %v, want within the confirm timeout and the closes (15 s)", took.Round(time.Millisecond))
	}
	node.Ctl("set_vm_memory_high_watermark", "0.4")
	d.Start()
	d.WaitReady(30 * time.Second)
	if !waitReceived(cons, clocks, 60*time.Second) {
		t.Errorf("after the alarm cleared, %d of %d clocks never rang", len(judge(cons, clocks).missing()), n)
	}
}
