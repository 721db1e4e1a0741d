package main

import (
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
