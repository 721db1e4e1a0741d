package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// MySQL (a private MariaDB) killed and started again mid-storm, down for
// twice the lease TTL, under a 3-instance cluster: a primary failover as
// it happens in production (10-30 s against the default TTL of 10 s).
// MySQL is killed mid-storm under three instances and comes back after two
// lease TTLs. Every lease and every heartbeat expired meanwhile by the database clock,
// although every instance lived. The first instance whose lease round
// reaches MySQL again sees no other live instance (their heartbeats have
// not been written again yet), takes every shard as its own, recovers the
// clocks the others left firing (rings they published, whose confirms
// arrived, waiting in their memory for their rung mark: README, "kept in
// memory and never put back to pending") and rings them a second time;
// a round later it hands the shards back. Measured here: 8 of 12 shards
// moved away from live instances and back, and 24 duplicate rings, exactly
// the clocks it "recovered" (found by review). No instance died: nothing
// should move, and no ring should repeat.
func TestMySQLRestartUnderAClusterMovesNoShard(t *testing.T) {
	m := testenv.StartMariaDB(t)
	e := env{DSN: m.DSNFor("mysqlrestart"), AMQP: testenv.AMQPURL(t), Exchange: testenv.Name("ring.mysqlrestart.")}
	testenv.DeleteExchangeOnCleanup(t, e.AMQP, e.Exchange)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "myr")
	nodes := startCluster(t, e, 3, nil)
	before := clusterViewOf(t, nodes[0])
	const n, spread = 3000, 10 * time.Second
	from := time.Now().Add(clusterWindow + 1500*time.Millisecond)
	clocks := clusterStorm(t, nodes, "myr", n, from, spread)
	clusterSleepUntil(from.Add(2 * time.Second))
	downAt := time.Now()
	m.Kill()
	time.Sleep(2 * clusterTTL)
	m.Start()
	backAt := time.Now()
	t.Logf("MySQL down %v", backAt.Sub(downAt).Round(time.Millisecond))
	r := clusterWaitRung(cons, clocks, time.Until(from)+spread+30*time.Second)
	time.Sleep(2 * time.Second)
	r = clusterAnalyze(cons, clocks)
	t.Logf("MySQL restart mid-storm: %s", r)
	r.check(t, false)
	var worst time.Duration
	seen := map[int64]bool{}
	for _, g := range cons.Rings() {
		p, ok := clocks[g.ID]
		if !ok || seen[g.ID] {
			continue
		}
		seen[g.ID] = true
		due := p.RingAt
		if backAt.After(due) {
			due = backAt
		}
		worst = max(worst, g.Received.Sub(due))
	}
	t.Logf("worst receipt after max(ring_at, MySQL back): %v", worst.Round(time.Millisecond))
	after := clusterViewOf(t, nodes[0])
	t.Logf("leases before: %s; after: %s", before, after)
	var lostTotal float64
	for _, nd := range nodes {
		l := clusterMetric(t, nd, "clockd_shard_leases_lost_total")
		lostTotal += l
		if l > 0 {
			t.Logf("%s lost %v shard leases although it never stopped; its log:\n%s", nd.ID, l, nd.Logs())
		}
	}
	if lostTotal > 0 {
		t.Errorf("%v shard leases of live instances were taken over after MySQL came back: the first instance back took every shard (no instance died)", lostTotal)
	}
	if r.Duplicates > 0 {
		t.Errorf("%d rings repeated across a MySQL restart in which no clockd instance died", r.Duplicates)
	}
	clusterWaitAllRung(t, clusterDB(t, e), n, 15*time.Second)
}

// A frozen instance (SIGSTOP past its lease) that wakes up finds every one
// of its shards taken over, and said so once per shard (found by review): with 256 shards
// over two instances, 128 WARN lines for one event (clock.shards goes up
// to 4096), while the same round's gains are one line ("acquired shards"
// with the list) and the project rate-limits per-shard load failures for
// this very reason. The survivor's takeover logs a line per shard too
// ("recovered clocks left firing by a previous owner").
func TestLeaseLossLoggedInOneLine(t *testing.T) {
	e := newEnv(t)
	extra := map[string]string{"CLOCKD_SHARDS": "256", "CLOCKD_HEAP_CAP": "20000"}
	a := startClusterNode(t, e, "a", extra)
	victim := startClusterNode(t, e, "b", extra)
	deadline := time.Now().Add(20 * leaseRound)
	for {
		v := clusterViewOf(t, a)
		if len(v.leases("a")) == 128 && len(v.leases("b")) == 128 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not shared: a %d, b %d", len(v.leases("a")), len(v.leases("b")))
		}
		time.Sleep(50 * time.Millisecond)
	}
	victim.Signal(syscall.SIGSTOP)
	time.Sleep(2 * clusterTTL)
	victim.Signal(syscall.SIGCONT)
	time.Sleep(3 * leaseRound)
	logs := victim.Logs()
	lostLines := strings.Count(logs, `msg="shard lease lost"`) + strings.Count(logs, `msg="shard leases lost"`)
	lostMetric := clusterMetric(t, victim, "clockd_shard_leases_lost_total")
	t.Logf("the woken instance lost %v leases (metric) and wrote %d \"shard lease lost\" lines", lostMetric, lostLines)
	if lostMetric < 10 {
		t.Fatalf("the frozen instance lost only %v leases", lostMetric)
	}
	if lostLines > 3 { // a line per lease round at most
		t.Errorf("one lease-loss event (%v shards) wrote %d WARN lines, one per shard; want one line naming the shards (as \"acquired shards\" does)", lostMetric, lostLines)
	}
}
