package main

// Shard moves and shutdown while the broker confirms late (a
// testenv.Proxy with SetDelay on each instance's own link to RabbitMQ),
// from a review of the ring path: before, a move under 2-2.5 s confirms
// rang 25 to 544 clocks twice (the shards handed over were reckoned by the
// round before's renewal, a batch mixing kept and moved shards was cut
// short with them, and the drain stopped at half the TTL), and a stalled
// link held a shutdown up for 13 s (the hints connection closed without a
// deadline).

import (
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// slowBrokerNode starts a cluster node whose broker link goes through
// its own proxy (no delay yet: the connection is made promptly).
func slowBrokerNode(t *testing.T, e env, id string, extra map[string]string) (*clusterNode, *testenv.Proxy) {
	t.Helper()
	p := testenv.StartProxy(t, amqpHostPort(t, e.AMQP))
	vars := map[string]string{
		"CLOCKD_AMQP_URL":             amqpViaProxy(t, e.AMQP, p.Addr),
		"CLOCKD_AMQP_CONFIRM_TIMEOUT": "10s",
		"CLOCKD_RETRY_MIN":            "200ms", "CLOCKD_RETRY_MAX": "1s",
	}
	for k, v := range extra {
		vars[k] = v
	}
	return startClusterNode(t, e, id, vars), p
}

// Graceful rebalance under slow confirms: two instances, both of whose
// brokers confirm 2 s late (shorter than amqp.confirm_timeout, shorter than
// the lease TTL of 3 s; nothing else is wrong), ring a storm; a third
// instance joins mid-storm, so each of the two hands shards over (Drain,
// then ReleaseLeases). No process crashes, no lease lapses: every clock
// should ring exactly once.
func TestClusterJoinUnderSlowConfirmsRingsOnce(t *testing.T) {
	e := newEnv(t)
	e.AMQP = testenv.Vhost(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "slowjoin")
	a, pa := slowBrokerNode(t, e, "a", nil)
	b, pb := slowBrokerNode(t, e, "b", nil)
	nodes := []*clusterNode{a, b}
	if v, took, ok := waitCluster(t, a, 20*leaseRound, func(v clusterJSON) bool { return v.fair(clusterIDs(nodes)) }); !ok {
		t.Fatalf("not fair after %v: %s", took, v)
	}
	const n, spread = 2000, 6 * time.Second
	from := time.Now().Add(clusterWindow + 1500*time.Millisecond)
	clocks := clusterStorm(t, nodes, "slowjoin", n, from, spread)
	pa.SetDelay(2 * time.Second)
	pb.SetDelay(2 * time.Second)
	clusterSleepUntil(from.Add(1500 * time.Millisecond))
	c, pc := slowBrokerNode(t, e, "c", nil)
	pc.SetDelay(2 * time.Second)
	nodes = append(nodes, c)
	if v, took, ok := waitCluster(t, a, 20*leaseRound, func(v clusterJSON) bool { return v.fair(clusterIDs(nodes)) }); !ok {
		t.Errorf("not rebalanced after %v: %s", took, v)
	}
	r := clusterWaitRung(cons, clocks, time.Until(from)+spread+20*time.Second)
	time.Sleep(4 * time.Second) // a repeat arrives meanwhile
	r = clusterAnalyze(cons, clocks)
	t.Logf("join under 2 s confirms: %s", r)
	logRepeats(t, cons, clocks)
	for _, nd := range nodes {
		for _, l := range strings.Split(nd.Logs(), "\n") {
			if strings.Contains(l, "handed over before") || strings.Contains(l, "ring attempts failed") ||
				strings.Contains(l, "recovered clocks left firing") || strings.Contains(l, "released shards") {
				t.Logf("%s: %s", nd.ID, l)
			}
		}
	}
	r.check(t, true)
}

// Rolling restart under slow confirms: three instances whose brokers
// confirm 2.5 s late; each in turn is stopped with SIGTERM mid-storm and
// started again. A stopping instance waits for its rings in flight (its
// leases are still renewed) before it releases its shards: every clock
// should ring exactly once, and each instance should exit well within its
// shutdown timeout.
func TestClusterRollingRestartUnderSlowConfirms(t *testing.T) {
	e := newEnv(t)
	e.AMQP = testenv.Vhost(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "roll")
	var nodes []*clusterNode
	var proxies []*testenv.Proxy
	for _, id := range []string{"a", "b", "c"} {
		n, p := slowBrokerNode(t, e, id, nil)
		nodes, proxies = append(nodes, n), append(proxies, p)
	}
	if v, took, ok := waitCluster(t, nodes[0], 20*leaseRound, func(v clusterJSON) bool { return v.fair(clusterIDs(nodes)) }); !ok {
		t.Fatalf("not fair after %v: %s", took, v)
	}
	const n, spread = 3000, 12 * time.Second
	from := time.Now().Add(clusterWindow + 1500*time.Millisecond)
	clocks := clusterStorm(t, nodes, "roll", n, from, spread)
	for _, p := range proxies {
		p.SetDelay(2500 * time.Millisecond)
	}
	clusterSleepUntil(from.Add(time.Second))
	for i, id := range []string{"a", "b", "c"} {
		stopped := time.Now()
		err := nodes[i].Stop(30 * time.Second)
		t.Logf("%s exited %v after SIGTERM (err %v)", id, time.Since(stopped).Round(time.Millisecond), err)
		for _, l := range strings.Split(nodes[i].Logs(), "\n") {
			if strings.Contains(l, "WARN") {
				t.Logf("%s: %s", id, l)
			}
		}
		if err != nil {
			t.Errorf("%s: exit %v", id, err)
		}
		proxies[i].SetDelay(0) // connect promptly, then confirm late again
		nodes[i].Start()
		nodes[i].WaitReady(20 * time.Second)
		proxies[i].SetDelay(2500 * time.Millisecond)
		time.Sleep(500 * time.Millisecond)
	}
	r := clusterWaitRung(cons, clocks, time.Until(from)+spread+20*time.Second)
	time.Sleep(4 * time.Second)
	r = clusterAnalyze(cons, clocks)
	t.Logf("rolling restart under 2.5 s confirms: %s", r)
	logRepeats(t, cons, clocks)
	for _, nd := range nodes {
		for _, l := range strings.Split(nd.Logs(), "\n") {
			if strings.Contains(l, "shutting down") || strings.Contains(l, "stopped") || strings.Contains(l, "WARN") ||
				strings.Contains(l, "recovered clocks") || strings.Contains(l, "released shards") || strings.Contains(l, "acquired shards") {
				t.Logf("%s: %s", nd.ID, l)
			}
		}
	}
	r.check(t, true)
}

// logRepeats logs, per second of receipt, how many repeats arrived,
// with the attempt headers and shards of the repeats, so that each
// duplicate can be put next to the instances' logs.
func logRepeats(t *testing.T, cons *testenv.Consumer, clocks map[int64]clusterClock) {
	t.Helper()
	type key struct {
		sec     string
		attempt int
	}
	seen := map[int64]time.Time{}
	per := map[key]int{}
	shards := map[string]map[int]int{}
	gap := map[string]time.Duration{}
	var keys []key
	for _, g := range cons.Rings() {
		first, ok := seen[g.ID]
		if !ok {
			seen[g.ID] = g.Received
			continue
		}
		if g.Delivery.Redelivered {
			continue
		}
		k := key{g.Received.UTC().Format("15:04:05"), attemptOf(g.Delivery)}
		if per[k] == 0 {
			keys = append(keys, k)
		}
		per[k]++
		if shards[k.sec] == nil {
			shards[k.sec] = map[int]int{}
		}
		shards[k.sec][clocks[g.ID].Shard]++
		gap[k.sec] = max(gap[k.sec], g.Received.Sub(first))
	}
	for _, k := range keys {
		t.Logf("repeats received at %s: %d with x-clock-attempt %d (shards %v, max %v after the first receipt)",
			k.sec, per[k], k.attempt, shards[k.sec], gap[k.sec].Round(time.Millisecond))
	}
}

// SIGTERM while the broker answers nothing (its link stalled: a broker
// that hangs, a network that drops packets) and nothing is in flight: the
// publisher closes its connection with a 2 s deadline (rabbit closeTimeout);
// the process should exit within a few seconds, not wait on the broker.
func TestShutdownWithStalledBrokerExitsPromptly(t *testing.T) {
	e := newEnv(t)
	e.AMQP = testenv.Vhost(t)
	a, pa := slowBrokerNode(t, e, "a", nil)
	a.WaitReady(20 * time.Second)
	time.Sleep(time.Second)
	pa.Stall()
	defer pa.Resume()
	stopped := time.Now()
	err := a.Stop(60 * time.Second)
	exited := time.Since(stopped)
	t.Logf("exited %v after SIGTERM (err %v)", exited.Round(time.Millisecond), err)
	for _, l := range strings.Split(a.Logs(), "\n") {
		if strings.Contains(l, "WARN") || strings.Contains(l, "shutting down") || strings.Contains(l, "stopped") || strings.Contains(l, "ERROR") {
			t.Logf("%.300s", l)
		}
	}
	if exited > 9*time.Second {
		t.Errorf("took %v to exit with the broker stalled, want a few seconds (its connections closed with a 2 s deadline each)", exited.Round(time.Millisecond))
	}
}
