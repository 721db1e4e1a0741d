package rabbit

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/testenv"
)

// proxiedAMQP returns a proxy in front of the test broker and the URL that
// goes through it.
func proxiedAMQP(t *testing.T) (*testenv.Proxy, string) {
	t.Helper()
	raw := testenv.AMQPURL(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.StartProxy(t, u.Host)
	u.Host = p.Addr
	return p, u.String()
}

// A broker link that stalls (a network black hole, a broker that stopped
// reading its socket: a memory alarm blocks publishing connections) makes
// the probe late; the check then heals, and heal's ExchangeDeclare and
// QueueBind are synchronous RPCs with no deadline, run on the session's
// goroutine. The session no longer saw ctx: the shutdown waited until
// amqp091's heartbeat gave up (3 x 10 s; found by review). hintsession.go says the
// opposite ("a slow or stalled broker link must not hold up the
// shutdown"), and the hints loop before this change returned at once.
func TestHintsShutdownIsNotHeldByAStalledBrokerDuringAHeal(t *testing.T) {
	t.Parallel()
	px, u := proxiedAMQP(t)
	exchange := testenv.Name("clockd_test_hints_")
	const every = 200 * time.Millisecond
	h := NewHints(HintConfig{URL: u, Exchange: exchange, InstanceID: testenv.Name("a")})
	h.checkEvery = every
	connected := make(chan struct{}, 10)
	h.onConnected = func() { connected <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-connected:
	case <-time.After(10 * time.Second):
		t.Fatal("not connected")
	}
	time.Sleep(3 * every) // a few probe rounds come back
	px.Stall()
	defer px.Resume()
	time.Sleep((probeLost + 2) * every) // a probe is lost: the check heals, and its bind waits for the broker
	cancel()
	start := time.Now()
	select {
	case <-done:
		t.Logf("Run returned %v after cancel", time.Since(start).Round(time.Millisecond))
	case <-time.After(closeTimeout + 3*time.Second):
		t.Fatalf("Run did not return within %v of its context's cancel with the broker link stalled: the session waits in a heal's bind RPC, which has no deadline (shutdown held for up to 3 heartbeats)",
			closeTimeout+3*time.Second)
	}
}

// A broker that is slow but has lost nothing (its answers come 1.5 s late:
// flow control, a loaded node, a slow link) was taken every other check for
// one whose exchanges were deleted (found by review): the probe published one check ago is
// not back yet. Each such "heal" logs a WARN that the exchange was deleted,
// counts a rebind and calls OnConnected, which in clockd rescans every
// shard owned here and forgets every cached token: a load storm every two
// seconds on MySQL for as long as the broker is slow.
func TestASlowBrokerIsNotTakenForADeletedExchange(t *testing.T) {
	t.Parallel()
	px, u := proxiedAMQP(t)
	exchange := testenv.Name("clockd_test_hints_")
	reg := prometheus.NewRegistry()
	var logs logBuffer
	b := startHints(t, u, exchange, testenv.Name("b"), func(h *Hints) {
		h.log = logs.logger()
		reg.MustRegister(h.dropped, h.rebinds)
	})
	waitFor(t, "connected", func() bool { _, n := b.state(); return n == 1 })
	time.Sleep(2 * bindCheckEvery)
	px.SetDelay(1500 * time.Millisecond) // everything the broker sends arrives 1.5 s late
	time.Sleep(7 * time.Second)
	px.SetDelay(0)
	_, n := b.state()
	hints := testenv.Metric(t, reg, "clockd_hints_rebinds_total", "exchange", "hints")
	tokens := testenv.Metric(t, reg, "clockd_hints_rebinds_total", "exchange", "tokens")
	if n != 1 || hints+tokens != 0 {
		t.Errorf("nothing was deleted or unbound, the broker was only slow; yet OnConnected was called %d times (want 1) and clockd_hints_rebinds_total is hints=%v tokens=%v (want 0); WARNs: %d",
			n, hints, tokens, len(logs.records(t, "WARN", "deleted on the broker")))
	}
}
