package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/testenv"
)

// Two instances whose preload windows differ, as during a rolling change of
// CLOCKD_PRELOAD_WINDOW: "a" loads 10 s ahead, "b" 2 s. A clock created
// through b, in a shard a owns, due 5 s after its create, lies inside the
// range a has already loaded and outside b's window. b judged "due soon"
// by its own window, did not tell a, and a found the clock only at the
// shard's next full rescan: found by review, all 12 rang up to 13.9 s
// late. b now hints within the largest window of the live instances
// (clock_instance.preload_window_ms, migration 00016); README: a clock
// created through another instance rings punctually.
func TestMixedPreloadWindowsCreateThroughNonOwner(t *testing.T) {
	e := newEnv(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "mixwin")
	a := startClusterNode(t, e, "a", map[string]string{"CLOCKD_PRELOAD_WINDOW": "10s"})
	b := startClusterNode(t, e, "b", map[string]string{"CLOCKD_PRELOAD_WINDOW": "2s"})
	ids := []string{"a", "b"}
	if v, took, ok := waitCluster(t, a, 20*leaseRound, func(v clusterJSON) bool { return v.fair(ids) }); !ok {
		t.Fatalf("shards not shared fairly after %v: %s", took, v)
	}
	// b's heartbeat after a's has read a's window: one more round
	time.Sleep(leaseRound)
	own := clusterViewOf(t, a).owners()

	// 12 clocks in a's shards, created through b one after another, each
	// due 5 s after its create
	const n = 12
	clocks := map[int64]clusterClock{}
	for i := 0; len(clocks) < n; i++ {
		bid := fmt.Sprintf("w-%d", i)
		if own[alarm.ShardOf("mixwin", bid, clusterShards)] != "a" {
			continue
		}
		p := clusterCreate(t, b, "mixwin", bid, time.Now().Add(5*time.Second))
		clocks[p.ID] = p
		time.Sleep(100 * time.Millisecond)
	}
	r := clusterWaitRung(cons, clocks, 50*time.Second)
	t.Logf("clocks due 5 s after their create through b (window 2 s), owned by a (window 10 s): %s", r)
	r.check(t, true)
	if r.max() > time.Second {
		t.Errorf("clocks created through the instance with the shorter window rang up to %v late; want punctual", r.max().Round(time.Millisecond))
	}
}
