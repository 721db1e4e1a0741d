package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// The link to RabbitMQ stalls for 12 s (a proxy that forwards nothing
// either way: a network partition, a hung node) while clocks with
// max_attempts 2 come due, then recovers. Before, clockd noticed nothing
// until amqp091's heartbeat gave up (about 16 s): /readyz stayed 200,
// nothing was logged, and it kept claiming clocks and publishing them into
// the silent connection, each confirm wait a failed attempt, so every
// clock was dead before the stall ended — and was delivered when the link
// came back. Now a confirm timeout on a connection the broker did not
// block ends the connection: clockd reconnects, says so, stops claiming,
// and the clocks ring once the link is back, having lost at most the one
// attempt that may have reached the broker.
func TestBrokerStallDoesNotKillClocks(t *testing.T) {
	e := newEnv(t)
	e.AMQP = testenv.Vhost(t)
	proxy := testenv.StartProxy(t, amqpHostPort(t, e.AMQP))
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_AMQP_URL": amqpViaProxy(t, e.AMQP, proxy.Addr),
		"CLOCKD_LEASE_TTL": "10s", "CLOCKD_AMQP_CONFIRM_TIMEOUT": "2s"}))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "stall")

	warm := postClocks(t, d, spreadSpecs("stall", "warm", 1, time.Now().Add(300*time.Millisecond), time.Millisecond))
	if !waitReceived(cons, warm, 10*time.Second) {
		t.Fatal("warm-up clock did not ring")
	}
	proxy.Stall()
	stallAt := time.Now()
	specs := spreadSpecs("stall", "s", 10, time.Now().Add(time.Second), 3*time.Second)
	for i := range specs {
		specs[i].Extra = map[string]any{"max_attempts": 2}
	}
	clocks := postClocks(t, d, specs)
	unready := 0
	for time.Since(stallAt) < 12*time.Second {
		if code, _ := d.Ready(); code == http.StatusServiceUnavailable {
			unready++
		}
		time.Sleep(500 * time.Millisecond)
	}
	if unready == 0 {
		t.Error("/readyz answered 200 throughout a 12 s stall of the broker link")
	}
	if !strings.Contains(d.Logs(), "confirm timeout") {
		t.Errorf("nothing logged about the stall; logs:\n%s", d.Logs())
	}
	proxy.Resume()
	if !waitReceived(cons, clocks, 30*time.Second) {
		t.Errorf("%d of %d clocks never rang after the link came back", len(judge(cons, clocks).missing()), len(clocks))
	}
	for _, c := range clocks { // not dead: rung once the link is back
		waitClock(t, d, "stall", c.BusinessID, 10*time.Second, "rung", isRung)
	}
}

// A RabbitMQ memory alarm on a private node while clocks come due: the
// broker blocks clockd's publishing connection. Nothing reaches a queue
// while it lasts, so no clock may become dead or burn attempts for it,
// clockd says so (/readyz 503, one WARN), and once the alarm clears every
// clock rings promptly. It guards the stall's fix: a connection blocked by
// the broker is kept, since a new one would be blocked again at its first
// publish, each time at the cost of an attempt.
func TestBrokerMemoryAlarmBurnsNoAttempts(t *testing.T) {
	node := testenv.StartRabbitNode(t)
	e := newEnv(t)
	e.AMQP = node.URL()
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_RETRY_MIN": "200ms", "CLOCKD_RETRY_MAX": "1s"}))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "alarm")

	warm := postClocks(t, d, spreadSpecs("alarm", "warm", 1, time.Now().Add(300*time.Millisecond), time.Millisecond))
	if !waitReceived(cons, warm, 10*time.Second) {
		t.Fatal("warm-up clock did not ring")
	}
	node.Ctl("set_vm_memory_high_watermark", "0.0000001")
	time.Sleep(2 * time.Second) // the alarm takes effect
	specs := spreadSpecs("alarm", "a", 20, time.Now().Add(time.Second), 2*time.Second)
	for i := range specs {
		specs[i].Extra = map[string]any{"max_attempts": 3}
	}
	clocks := postClocks(t, d, specs)
	time.Sleep(15 * time.Second)

	if code, body := d.Ready(); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz during a memory alarm with rings blocked: %d %s, want 503", code, body)
	}
	for _, c := range clocks {
		g := getClock(t, d, "alarm", c.BusinessID)
		if g.Status != "pending" && g.Status != "firing" || g.Attempts > 1 {
			t.Errorf("%s during the alarm: %s, attempts %d: the block burns attempts", c.BusinessID, g.Status, g.Attempts)
		}
	}
	if n := strings.Count(d.Logs(), "rabbitmq connection blocked by broker"); n != 1 {
		t.Errorf("%d WARN lines about the blocked connection, want 1", n)
	}

	node.Ctl("set_vm_memory_high_watermark", "0.4")
	if !waitReceived(cons, clocks, 30*time.Second) {
		t.Errorf("after the alarm cleared, %d of %d rang within 30 s", cons.Distinct()-1, len(clocks))
	}
	for _, c := range clocks {
		waitClock(t, d, "alarm", c.BusinessID, 10*time.Second, "rung", isRung)
	}
}

func isRung(c httpapi.Clock) bool { return c.Status == "rung" }

// The operator takes clockd's write permission away for 20 s while clocks
// come due, then gives it back. Each publish is refused (403) and closes
// the connection, and clockd reconnects at once: before, a WARN and an INFO
// every 4-5 s for as long as it lasted. A connection that keeps dying soon
// after it was made, for the same reason, is now said once a minute. The
// refused rings are failed attempts (SPEC), and every clock rings once the
// permission is back.
func TestRevokedWritePermissionIsLoggedOnceAMinute(t *testing.T) {
	e := newEnv(t)
	e.AMQP = testenv.Vhost(t)
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_RETRY_MIN": "200ms", "CLOCKD_RETRY_MAX": "1s"}))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "perm")

	testenv.SetPermissions(t, e.AMQP, ".*", "^$", ".*")
	clocks := postClocks(t, d, spreadSpecs("perm", "p", 20, time.Now().Add(time.Second), 5*time.Second))
	unready := false
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if code, _ := d.Ready(); code == http.StatusServiceUnavailable {
			unready = true
		}
	}
	if !unready {
		t.Error("/readyz never answered 503 while every publish was refused")
	}
	if n := strings.Count(d.Logs(), `msg="rabbitmq connection lost"`); n == 0 || n > 2 {
		t.Errorf("%d WARN lines \"rabbitmq connection lost\" in 20 s of refused publishes, want 1 or 2:\n%s", n, d.Logs())
	}
	testenv.SetPermissions(t, e.AMQP, ".*", ".*", ".*")
	if !waitReceived(cons, clocks, 30*time.Second) {
		t.Errorf("after the permission was restored, %d of %d rang", cons.Distinct(), len(clocks))
	}
}

// The broker confirms late: 2.5 s after each publish (a proxy holds what
// RabbitMQ sends), longer than was left of the shard's lease when each
// batch was published (lease_ttl 3 s: renewed every 0.75 s, 2.4 s ahead),
// shorter than amqp.confirm_timeout. The lease is renewed all the while,
// so the wait goes on and every clock rings once, at its first attempt.
// Before, the wait ended at the lease's end as reckoned at the publish:
// every ring counted as a failed attempt, was retried, and was delivered
// again and again (what made TestClusterJoinLeaveStorm ring 64 clocks twice
// once, on a loaded machine).
func TestSlowConfirmsUnderARenewedLeaseRingOnce(t *testing.T) {
	e := newEnv(t)
	e.AMQP = testenv.Vhost(t)
	proxy := testenv.StartProxy(t, amqpHostPort(t, e.AMQP))
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_AMQP_URL": amqpViaProxy(t, e.AMQP, proxy.Addr),
		"CLOCKD_LEASE_TTL": "3s", "CLOCKD_AMQP_CONFIRM_TIMEOUT": "10s",
		"CLOCKD_RETRY_MIN": "200ms", "CLOCKD_RETRY_MAX": "1s"}))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "slow")
	proxy.SetDelay(2500 * time.Millisecond)
	clocks := postClocks(t, d, spreadSpecs("slow", "s", 20, time.Now().Add(time.Second), 2*time.Second))
	if !waitReceived(cons, clocks, 20*time.Second) {
		t.Errorf("%d of %d clocks never rang", len(judge(cons, clocks).missing()), len(clocks))
	}
	time.Sleep(4 * time.Second) // a retry of any would arrive meanwhile
	j := judge(cons, clocks)
	t.Logf("confirms 2.5 s late: %s", j)
	j.check(t)
	if j.dups > 0 {
		t.Errorf("%d duplicate deliveries: slow confirms under a renewed lease were counted as failed attempts", j.dups)
	}
	for _, c := range clocks {
		got := waitClock(t, d, "slow", c.BusinessID, 10*time.Second, "rung", isRung)
		if got.Attempts != 1 {
			t.Errorf("%s: rung after %d attempts, want 1", c.BusinessID, got.Attempts)
		}
	}
	if strings.Contains(d.Logs(), "ring attempts failed") {
		t.Errorf("failed attempts logged:\n%s", d.Logs())
	}
}
