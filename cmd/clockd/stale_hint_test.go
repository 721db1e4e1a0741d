package main

// Found by a review of contention (two instances): a hint sent by an
// instance that does not own a clock's shard reached the owner after a
// later change of the clock made through the owner itself, and put the
// clock's older time back into the owner's memory. A hint now never moves
// a queued clock later (preload.Manager.Hinted).

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// hintPair starts instances a and b (preload window 10 s) and waits until
// they share the shards; with slow, b's broker link delivers 50 ms late,
// so that a's hints reach b after b's own changes (without it the hint
// usually wins the race by a millisecond or two; through the proxy with no
// delay it still lost 5 of 20 clocks in a run). It returns a consumer of
// app and n business ids of app in shards b owns.
func hintPair(t *testing.T, app string, n int, slow bool) (a, b *clusterNode, cons *testenv.Consumer, bids []string) {
	t.Helper()
	e := newEnv(t)
	win := map[string]string{"CLOCKD_PRELOAD_WINDOW": "10s"}
	a = startClusterNode(t, e, "a", win)
	var pb *testenv.Proxy
	if slow {
		b, pb = slowBrokerNode(t, e, "b", win)
	} else {
		b = startClusterNode(t, e, "b", win)
	}
	if v, _, ok := waitCluster(t, a, 30*time.Second, func(v clusterJSON) bool { return v.fair([]string{"a", "b"}) }); !ok {
		t.Fatalf("shards not shared: %s", v)
	}
	if slow {
		pb.SetDelay(50 * time.Millisecond)
	}
	cons = testenv.Consume(t, e.AMQP, e.Exchange, app)
	owners := clusterViewOf(t, b).owners()
	for i := 0; len(bids) < n; i++ {
		bid := fmt.Sprintf("k-%04d", i)
		if owners[alarm.ShardOf(app, bid, clusterShards)] == b.ID {
			bids = append(bids, bid)
		}
	}
	return a, b, cons, bids
}

func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

// A clock created (or moved) through an instance that does not own its
// shard is told to the owner by a hint, through the broker, after the
// change committed and was answered. A PATCH through the owner that comes
// right after, and moves the clock earlier, puts the new time into the
// owner's memory at once; the older hint, arriving afterwards, puts the
// old (later) time back. The row says the new time, the PATCH answered
// 200 with it, but the clock rings at the old time: seconds late
// ("Ringing is punctual: lateness is milliseconds", SPEC).
func TestStaleHintAfterOwnerPatchRingsLate(t *testing.T) {
	// a takes the creates, b (the owner of the keys' shards) the PATCHes
	const app = "rvhint"
	a, b, cons, bids := hintPair(t, app, 30, true)
	t0 := time.Now().Truncate(time.Millisecond)
	oldAt := t0.Add(9 * time.Second) // the create's time: within the window, so hinted
	newAt := t0.Add(3 * time.Second) // the PATCH's
	type result struct {
		id            int64
		patchCode     int
		patchedRingAt string
	}
	res := make([]result, len(bids))
	var wg sync.WaitGroup
	for i, bid := range bids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			var c httpapi.Clock
			code, err := a.Do(ctx, "POST", "/v1/clocks", map[string]any{
				"application": app, "business_id": bid, "payload": bid, "ring_at": rfc3339ms(oldAt),
			}, &c)
			if err != nil || code != http.StatusCreated {
				t.Errorf("create %s via %s: %d %v", bid, a.ID, code, err)
				return
			}
			// then, at once, the client moves it, through the other instance
			var p httpapi.Clock
			pcode, err := b.Do(ctx, "PATCH", "/v1/clocks/"+app+"/"+bid, map[string]any{"ring_at": rfc3339ms(newAt)}, &p)
			if err != nil {
				t.Errorf("patch %s: %v", bid, err)
			}
			res[i] = result{id: c.ID, patchCode: pcode, patchedRingAt: p.RingAt}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	time.Sleep(time.Until(oldAt.Add(3 * time.Second)))

	first := map[int64]testenv.Ring{}
	for _, r := range cons.Rings() {
		if _, ok := first[r.ID]; !ok {
			first[r.ID] = r
		}
	}
	var late []string
	for i, r := range res {
		if r.patchCode != http.StatusOK {
			t.Errorf("PATCH %s answered %d", bids[i], r.patchCode)
			continue
		}
		g, ok := first[r.id]
		if !ok {
			t.Errorf("clock %d (%s) never rang", r.id, bids[i])
			continue
		}
		if lateness := g.Received.Sub(newAt); lateness > time.Second {
			late = append(late, fmt.Sprintf("%s (id %d): PATCH answered 200 ring_at %s (header x-clock-ring-at %s), received %s late",
				bids[i], r.id, r.patchedRingAt, rfc3339ms(g.RingAt), lateness.Round(time.Millisecond)))
		}
	}
	if len(late) > 0 {
		sort.Strings(late)
		t.Errorf("%d of %d clocks moved earlier through the owner right after their create through another instance rang at the create's old time (%s after the PATCHed one), not at the PATCHed time; e.g.:\n%s",
			len(late), len(res), oldAt.Sub(newAt), late[0])
		for _, l := range late[1:min(5, len(late))] {
			t.Log(l)
		}
	}
}

// The same stale hint after two PATCHes, with a latest_ring_at: a client
// moves its clock through one instance, then again (earlier, with a
// latest_ring_at two seconds after it) through the owner. Both answer 200;
// the first PATCH's hint reaches the owner after the second PATCH put the
// clock in its memory, and sets it back to the first PATCH's time, past the
// latest_ring_at: the clock never rings, it expires.
func TestStaleHintExpiresPatchedClock(t *testing.T) {
	const app = "rvhint2"
	a, b, cons, bids := hintPair(t, app, 20, true)
	ctx := context.Background()
	ids := make([]int64, len(bids))
	for i, bid := range bids {
		var c httpapi.Clock
		code, err := b.Do(ctx, "POST", "/v1/clocks", map[string]any{
			"application": app, "business_id": bid, "payload": bid, "delay": "1h",
		}, &c)
		if err != nil || code != http.StatusCreated {
			t.Fatalf("create: %d %v", code, err)
		}
		ids[i] = c.ID
	}
	t0 := time.Now().Truncate(time.Millisecond)
	firstAt := t0.Add(9 * time.Second)
	newAt, latest := t0.Add(3*time.Second), t0.Add(5*time.Second)
	var wg sync.WaitGroup
	for _, bid := range bids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, err := a.Do(ctx, "PATCH", "/v1/clocks/"+app+"/"+bid, map[string]any{"ring_at": rfc3339ms(firstAt)}, nil); err != nil || code != 200 {
				t.Errorf("first PATCH %s via a: %d %v", bid, code, err)
				return
			}
			if code, err := b.Do(ctx, "PATCH", "/v1/clocks/"+app+"/"+bid, map[string]any{"ring_at": rfc3339ms(newAt), "latest_ring_at": rfc3339ms(latest)}, nil); err != nil || code != 200 {
				t.Errorf("second PATCH %s via b: %d %v", bid, code, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	time.Sleep(time.Until(firstAt.Add(2 * time.Second)))
	lost := 0
	var example string
	for i, bid := range bids {
		var g httpapi.Clock
		if code, err := b.Do(ctx, "GET", "/v1/clocks/"+app+"/"+bid, nil, &g); err != nil || code != 200 {
			t.Fatalf("get: %d %v", code, err)
		}
		if g.Status != "rung" || cons.Count(ids[i]) != 1 {
			lost++
			if example == "" {
				example = fmt.Sprintf("%s: ring_at %s latest_ring_at %v: status %s, last_error %v, rings received %d",
					bid, g.RingAt, deref(g.LatestRingAt), g.Status, deref(g.LastError), cons.Count(ids[i]))
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d clocks whose PATCHes answered 200 did not ring once by their latest_ring_at; e.g. %s", lost, len(bids), example)
	}
}

// The other side of Hinted's rule: a hint that moves a clock the owner
// holds later, and is the newest change, is not applied to the owner's
// memory, which keeps the earlier time. That entry corrects itself: the
// claim at the earlier time misses the row, whose time is read back. The
// clock rings at its new time: not early, not late.
func TestHintMovingAClockLaterStillRingsAtItsNewTime(t *testing.T) {
	const app = "rvlater"
	a, b, cons, bids := hintPair(t, app, 20, false)
	clocks := map[int64]clusterClock{}
	t0 := time.Now().Truncate(time.Millisecond)
	oldAt, newAt := t0.Add(3*time.Second), t0.Add(6*time.Second)
	for _, bid := range bids {
		// created through the owner (in its memory at once), moved later
		// through the other instance (a hint)
		p := clusterCreate(t, b, app, bid, oldAt)
		var c httpapi.Clock
		if code, err := a.Do(context.Background(), "PATCH", "/v1/clocks/"+app+"/"+bid, map[string]any{"ring_at": rfc3339ms(newAt)}, &c); err != nil || code != http.StatusOK {
			t.Fatalf("PATCH %s through a: %d %v", bid, code, err)
		}
		p.RingAt = newAt
		clocks[p.ID] = p
	}
	r := clusterWaitRung(cons, clocks, 30*time.Second)
	t.Logf("clocks moved from +3 s to +6 s through the instance that does not own them: %s", r)
	r.check(t, true)
	if r.max() > time.Second {
		t.Errorf("rang up to %v after their new time", r.max().Round(time.Millisecond))
	}
}
