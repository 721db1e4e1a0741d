package main

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// RabbitMQ closes every connection mid-storm (rabbitmqctl
// close_all_connections): clockd reconnects and nothing is lost; a clock
// may ring twice, always with its own message_id. The test has a vhost of
// its own, so closing its connections touches no other test or session
// sharing the broker; it can run in parallel.
func TestRingBrokerConnectionsClosed(t *testing.T) {
	t.Parallel()
	const n, spread = 3000, 5 * time.Second
	e := newEnv(t)
	e.AMQP = testenv.Vhost(t)
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_RETRY_MIN": "200ms", "CLOCKD_RETRY_MAX": "1s"}))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "storm")

	from := time.Now().Add(2 * time.Second)
	clocks := postClocks(t, d, spreadSpecs("storm", "b", n, from, spread))
	time.Sleep(time.Until(from.Add(spread / 2)))
	before := cons.Distinct()
	testenv.CloseConnections(t, e.AMQP)
	t.Logf("closed every connection of the vhost after %d of %d clocks were received", before, n)

	if !waitReceived(cons, clocks, time.Until(latest(clocks))+30*time.Second) {
		t.Error("not every clock arrived after the connections were closed")
	}
	time.Sleep(time.Second)
	j := judge(cons, clocks)
	j.check(t)
	if cons.Reconnects == 0 {
		t.Error("the consumer never had to reconnect: were the connections closed?")
	}
	if !strings.Contains(d.Logs(), "rabbitmq reconnected") {
		t.Error("clockd did not log a reconnect")
	}
	t.Logf("%v; consumer reconnects %d", j, cons.Reconnects)
	if got := countStatus(t, d, "storm", "pending") + countStatus(t, d, "storm", "firing"); got != 0 {
		t.Errorf("%d clocks still pending or firing after they all arrived", got)
	}
}

// With RabbitMQ unreachable clockd still starts and serves the API;
// /readyz answers 503 naming RabbitMQ; clocks created meanwhile stay
// pending (nothing is claimed for a broker that is not there). Once the
// broker can be reached, clockd connects by itself and they ring.
func TestReadyzBrokerUnreachable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	proxy := testenv.StartProxy(t, amqpHostPort(t, e.AMQP))
	proxy.Cut() // a closed port
	d := testenv.LaunchClockd(t, e.vars(map[string]string{
		"CLOCKD_AMQP_URL": strings.Replace(e.AMQP, amqpHostPort(t, e.AMQP), proxy.Addr, 1),
	}))
	d.WaitHealthy(30 * time.Second)
	code, body := d.Ready()
	if code != http.StatusServiceUnavailable || !strings.Contains(strings.ToLower(body), "rabbitmq") {
		t.Errorf("/readyz: %d %s, want 503 naming rabbitmq", code, body)
	}
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "wait")
	clocks := postClocks(t, d, spreadSpecs("wait", "w", 20, time.Now().Add(300*time.Millisecond), 200*time.Millisecond))
	time.Sleep(2 * time.Second)
	for _, c := range clocks[:3] {
		if got := getClock(t, d, "wait", c.BusinessID); got.Status != "pending" || got.Attempts != 0 {
			t.Errorf("%s while the broker is unreachable: %s with %d attempts, want pending without attempts", c.BusinessID, got.Status, got.Attempts)
		}
	}
	if code, body := d.Ready(); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz: %d %s, want 503 while the broker is unreachable", code, body)
	}

	proxy.Restore()
	d.WaitReady(30 * time.Second)
	if !waitReceived(cons, clocks, 20*time.Second) {
		t.Error("clocks did not ring once the broker was reachable")
	}
	j := judge(cons, clocks)
	j.check(t)
	var c httpapi.Clock
	if _, err := d.Do(context.Background(), "GET", clockPath("wait", clocks[0].BusinessID), nil, &c); err != nil || c.Status != "rung" && c.Status != "firing" {
		t.Errorf("after the ring: %s %v", c.Status, err)
	}
}

// amqpViaProxy is the AMQP URL url with its host:port replaced by addr.
func amqpViaProxy(t *testing.T, url, addr string) string {
	t.Helper()
	uri, err := amqp.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	uri.Host = host
	uri.Port, _ = strconv.Atoi(port)
	return uri.String()
}

// amqpHostPort is the host:port of an AMQP URL.
func amqpHostPort(t *testing.T, url string) string {
	t.Helper()
	uri, err := amqp.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
}
