package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// A second process started under the instance id of a live one refuses to
// start, saying why, and the live one keeps its shards (found by review:
// two replicas with host networking get the same default id, host name +
// pid 1; both ran, counted as one instance, and when one stopped it
// released the other's leases). A process restarted under the id of one
// that was just killed starts, after watching the dead one's heartbeat for
// at most half a TTL.
func TestSecondProcessUnderOneInstanceIDRefused(t *testing.T) {
	e := newEnv(t)
	first := startClusterNode(t, e, "host-1", nil)
	v, _, ok := waitCluster(t, first, 20*leaseRound, func(v clusterJSON) bool { return len(v.leases("host-1")) == clusterShards })
	if !ok {
		t.Fatalf("the first process holds not every shard: %s", v)
	}
	twin := testenv.LaunchClockd(t, e.vars(map[string]string{
		"CLOCKD_SHARDS": strconv.Itoa(clusterShards), "CLOCKD_LEASE_TTL": clusterTTL.String(),
		"CLOCKD_INSTANCE_ID": "host-1", "CLOCKD_PRELOAD_WINDOW": clusterWindow.String(),
	}))
	start := time.Now()
	err := twin.Wait(clusterTTL + 10*time.Second)
	if err == nil {
		t.Fatalf("the second process under instance id host-1 exited 0; want a refusal:\n%s", twin.Logs())
	}
	t.Logf("the second process exited after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if !strings.Contains(twin.Logs(), `another clockd process is live under instance id \"host-1\"`) {
		t.Errorf("the refusal does not say why:\n%s", twin.Logs())
	}
	time.Sleep(2 * leaseRound)
	if v := clusterViewOf(t, first); len(v.leases("host-1")) != clusterShards {
		t.Errorf("the live process lost shards to the refused one: %s", v)
	}
	if strings.Contains(first.Logs(), "shard leases lost") {
		t.Errorf("the live process lost leases:\n%s", first.Logs())
	}

	// killed and restarted at once under the same id: it starts
	first.Kill()
	start = time.Now()
	first.Start()
	first.WaitReady(30 * time.Second)
	took := time.Since(start)
	t.Logf("restarted under the id of a killed process: ready after %v", took.Round(time.Millisecond))
	if limit := clusterTTL/2 + clusterTTL/10 + 5*time.Second; took > limit {
		t.Errorf("restart took %v, want within %v", took, limit)
	}
}

// Two processes started at one moment under one instance id: one runs and
// holds every shard, the other refuses to start, saying why (found by
// review: both found no live heartbeat, since the first lease round writes
// it only later, and both ran, holding each other's leases; when one
// stopped it released the other's). The first heartbeat is now written as
// a claim of the id, before the process serves.
func TestTwinsStartedTogetherOnlyOneRuns(t *testing.T) {
	e := newEnv(t)
	setup := startClusterNode(t, e, "setup", nil) // the schema first: neither waits for migrations
	if err := setup.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	vars := e.vars(map[string]string{
		"CLOCKD_SHARDS": strconv.Itoa(clusterShards), "CLOCKD_LEASE_TTL": clusterTTL.String(),
		"CLOCKD_INSTANCE_ID": "host-1", "CLOCKD_PRELOAD_WINDOW": clusterWindow.String(),
	})
	twins := []*testenv.Clockd{testenv.LaunchClockd(t, vars), testenv.LaunchClockd(t, vars)}
	exited := make(chan int, 2)
	for i, c := range twins {
		go func() {
			if c.Wait(clusterTTL+20*time.Second) != nil {
				exited <- i
			}
		}()
	}
	var refused int
	select {
	case refused = <-exited:
	case <-time.After(clusterTTL + 15*time.Second):
		t.Fatalf("both processes run under instance id host-1:\n%s\n---\n%s", twins[0].Logs(), twins[1].Logs())
	}
	live := twins[1-refused]
	if !strings.Contains(twins[refused].Logs(), `another clockd process is live under instance id \"host-1\"`) {
		t.Errorf("the refusal does not say why:\n%s", twins[refused].Logs())
	}
	live.WaitReady(30 * time.Second)
	node := &clusterNode{Clockd: live, ID: "host-1"}
	if v, _, ok := waitCluster(t, node, 20*leaseRound, func(v clusterJSON) bool { return len(v.leases("host-1")) == clusterShards }); !ok {
		t.Errorf("the process that runs holds not every shard: %s", v)
	}
	time.Sleep(2 * leaseRound)
	if strings.Contains(live.Logs(), "shard leases lost") {
		t.Errorf("the process that runs lost leases:\n%s", live.Logs())
	}
}

// An instance given another CLOCKD_EXCHANGE than the live instances of its
// database refuses to start, naming both (found by review: it took its
// share of the shards and rang their clocks to an exchange no application
// binds: 19 of 48 never reached their queue). Every instance stopped, the
// cluster starts with the new exchange, and says so.
func TestInstanceWithAnotherExchangeRefused(t *testing.T) {
	e := newEnv(t)
	a := startClusterNode(t, e, "a", nil)
	if v, _, ok := waitCluster(t, a, 20*leaseRound, func(v clusterJSON) bool { return len(v.leases("a")) == clusterShards }); !ok {
		t.Fatalf("a holds not every shard: %s", v)
	}
	other := testenv.Name("clock.ring.other-")
	testenv.DeleteExchangeOnCleanup(t, e.AMQP, other)
	c := testenv.LaunchClockd(t, e.vars(map[string]string{
		"CLOCKD_SHARDS": strconv.Itoa(clusterShards), "CLOCKD_LEASE_TTL": clusterTTL.String(),
		"CLOCKD_INSTANCE_ID": "c", "CLOCKD_PRELOAD_WINDOW": clusterWindow.String(), "CLOCKD_EXCHANGE": other,
	}))
	if err := c.Wait(30 * time.Second); err == nil {
		t.Fatalf("an instance with exchange %s beside one with %s exited 0; want a refusal:\n%s", other, e.Exchange, c.Logs())
	}
	if logs := c.Logs(); !strings.Contains(logs, other) || !strings.Contains(logs, e.Exchange) || !strings.Contains(logs, "CLOCKD_EXCHANGE") {
		t.Errorf("the refusal does not name both exchanges and the setting:\n%s", logs)
	}
	if v := clusterViewOf(t, a); len(v.leases("a")) != clusterShards {
		t.Errorf("a lost shards to the refused instance: %s", v)
	}
	// every instance stopped: the cluster moves to the new exchange
	if err := a.Stop(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	c.Start()
	c.WaitReady(30 * time.Second)
	if !strings.Contains(c.Logs(), "ring to a new exchange") {
		t.Errorf("the move to exchange %s is not said:\n%s", other, c.Logs())
	}
}
