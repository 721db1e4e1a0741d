package main

// Scale-out tests (issue 4): several clockd processes share one MySQL
// database and one exchange, i.e. one cluster. Every instance is a real
// clockd process (testenv.StartClockd), killed, paused, stopped and started
// as an operator or a crash would. The tests run one after another (not
// t.Parallel): they measure takeover times and lateness, which other
// processes competing for the CPU would blur.

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

const (
	clusterShards = 12
	clusterTTL    = 3 * time.Second
	leaseRound    = clusterTTL / 4 // the lease keeper's period
	// clusterWindow is the preload window of most cluster tests: short, so
	// that a storm created up front (due later than the window) is found
	// by every owner's regular loading whatever instance took the create.
	clusterWindow = 2 * time.Second
)

// clusterNode is one clockd process of a cluster.
type clusterNode struct {
	*testenv.Clockd
	ID string
}

func startClusterNode(t *testing.T, e env, id string, extra map[string]string) *clusterNode {
	t.Helper()
	vars := e.vars(map[string]string{
		"CLOCKD_SHARDS": strconv.Itoa(clusterShards), "CLOCKD_LEASE_TTL": clusterTTL.String(),
		"CLOCKD_INSTANCE_ID": id, "CLOCKD_PRELOAD_WINDOW": clusterWindow.String(),
	})
	for k, v := range extra {
		vars[k] = v
	}
	return &clusterNode{Clockd: testenv.StartClockd(t, vars), ID: id}
}

// startCluster starts n instances ("a", "b", ...) and waits until they
// share the shards fairly.
func startCluster(t *testing.T, e env, n int, extra map[string]string) []*clusterNode {
	t.Helper()
	var nodes []*clusterNode
	for i := 0; i < n; i++ {
		nodes = append(nodes, startClusterNode(t, e, string(rune('a'+i)), extra))
	}
	ids := clusterIDs(nodes)
	v, took, ok := waitCluster(t, nodes[0], 20*leaseRound, func(v clusterJSON) bool { return v.fair(ids) })
	if !ok {
		t.Fatalf("shards not shared fairly by %v after %s: %s", ids, took, v)
	}
	t.Logf("%d instances share the shards fairly %v after the last one was ready (lease round %v): %s",
		n, took.Round(time.Millisecond), leaseRound, v)
	// the others release at their next round, the last one acquires at its
	// next: two rounds, plus slack
	if limit := 4 * leaseRound; took > limit {
		t.Errorf("fair share reached %v after the last instance was ready, want within %v", took, limit)
	}
	return nodes
}

func clusterIDs(nodes []*clusterNode) []string {
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.ID)
	}
	return ids
}

// clusterJSON is GET /v1/cluster.
type clusterJSON struct {
	Now        string `json:"now"`
	ShardCount int    `json:"shard_count"`
	Instances  []struct {
		InstanceID string      `json:"instance_id"`
		Live       bool        `json:"live"`
		Rings      bool        `json:"rings"`
		Shards     []leaseJSON `json:"shards"`
	} `json:"instances"`
	Unowned []int `json:"unowned_shards"`
}

type leaseJSON struct {
	Shard      int    `json:"shard"`
	Epoch      int64  `json:"epoch"`
	LeaseUntil string `json:"lease_until"`
}

// rings is what the instance's heartbeat says: it can publish.
func (v clusterJSON) rings(id string) bool {
	for _, i := range v.Instances {
		if i.InstanceID == id {
			return i.Rings
		}
	}
	return false
}

// owners maps each owned shard to its owner and lease.
func (v clusterJSON) owners() map[int]string {
	m := map[int]string{}
	for _, in := range v.Instances {
		for _, s := range in.Shards {
			m[s.Shard] = in.InstanceID
		}
	}
	return m
}

func (v clusterJSON) leases(id string) []leaseJSON {
	for _, in := range v.Instances {
		if in.InstanceID == id {
			return in.Shards
		}
	}
	return nil
}

// ownedBy reports whether every shard is owned, by the given instances only.
func (v clusterJSON) ownedBy(ids []string) bool {
	own := v.owners()
	if len(own) != clusterShards || len(v.Unowned) != 0 {
		return false
	}
	for _, o := range own {
		if !slices.Contains(ids, o) {
			return false
		}
	}
	return true
}

// fair reports whether the given instances own every shard, each its fair
// share (shards/len(ids), one more for the first shards%len(ids)).
func (v clusterJSON) fair(ids []string) bool {
	if !v.ownedBy(ids) {
		return false
	}
	for _, id := range ids {
		if n := len(v.leases(id)); n < clusterShards/len(ids) || n > (clusterShards+len(ids)-1)/len(ids) {
			return false
		}
	}
	return true
}

func (v clusterJSON) String() string {
	var b strings.Builder
	for _, in := range v.Instances {
		var ss []string
		for _, s := range in.Shards {
			ss = append(ss, fmt.Sprintf("%d@%d", s.Shard, s.Epoch))
		}
		fmt.Fprintf(&b, "%s(live=%v):[%s] ", in.InstanceID, in.Live, strings.Join(ss, " "))
	}
	fmt.Fprintf(&b, "unowned:%v", v.Unowned)
	return b.String()
}

func getCluster(n *clusterNode) (clusterJSON, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var v clusterJSON
	code, err := n.Do(ctx, "GET", "/v1/cluster", nil, &v)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET /v1/cluster: %d", code)
	}
	return v, err
}

func clusterViewOf(t *testing.T, n *clusterNode) clusterJSON {
	t.Helper()
	v, err := getCluster(n)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitCluster polls n's cluster view every 20 ms until cond holds; it
// returns the view, the time it took and whether cond held.
func waitCluster(t *testing.T, n *clusterNode, limit time.Duration, cond func(clusterJSON) bool) (clusterJSON, time.Duration, bool) {
	t.Helper()
	start := time.Now()
	var v clusterJSON
	for time.Since(start) < limit {
		var err error
		if v, err = getCluster(n); err == nil && cond(v) {
			return v, time.Since(start), true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return v, time.Since(start), false
}

// clusterClock is a clock a test created.
type clusterClock struct {
	ID     int64
	BID    string
	Shard  int
	RingAt time.Time
}

// clusterStorm creates n clocks of app due evenly over [from, from+spread],
// in batches of 100 sent round-robin through the nodes (concurrently, one
// stream per node). A clock is never due sooner than the preload window
// after its create, so that the owner of its shard loads it in its regular
// pass whichever instance took the create (the near-term create through a
// non-owner is TestClusterCreateThroughNonOwner's subject).
func clusterStorm(t *testing.T, nodes []*clusterNode, app string, n int, from time.Time, spread time.Duration) map[int64]clusterClock {
	t.Helper()
	const batch = 100
	type job struct {
		first, n int
	}
	perNode := make([][]job, len(nodes))
	for i, k := 0, 0; i < n; i, k = i+batch, k+1 {
		perNode[k%len(nodes)] = append(perNode[k%len(nodes)], job{i, min(batch, n-i)})
	}
	var mu sync.Mutex
	out := map[int64]clusterClock{}
	var errs []error
	var wg sync.WaitGroup
	for ni, jobs := range perNode {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, j := range jobs {
				earliest := time.Now().Add(clusterWindow + 500*time.Millisecond)
				var clocks []map[string]any
				var plan []clusterClock
				for i := j.first; i < j.first+j.n; i++ {
					at := from.Add(spread * time.Duration(i) / time.Duration(n))
					if at.Before(earliest) {
						at = earliest
					}
					at = at.UTC().Truncate(time.Millisecond)
					bid := fmt.Sprintf("%s-%05d", app, i)
					clocks = append(clocks, map[string]any{
						"application": app, "business_id": bid, "payload": bid, "ring_at": at.Format(time.RFC3339Nano),
					})
					plan = append(plan, clusterClock{BID: bid, Shard: alarm.ShardOf(app, bid, clusterShards), RingAt: at})
				}
				var res struct {
					Results []httpapi.BatchResult `json:"results"`
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				code, err := nodes[ni].Do(ctx, "POST", "/v1/clocks/batch", map[string]any{"clocks": clocks}, &res)
				cancel()
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case code != http.StatusOK || len(res.Results) != len(plan):
					errs = append(errs, fmt.Errorf("batch create via %s: %d, %d results", nodes[ni].ID, code, len(res.Results)))
				default:
					for i, r := range res.Results {
						if r.Status != http.StatusCreated || r.Clock == nil {
							errs = append(errs, fmt.Errorf("create %s: %d %+v", plan[i].BID, r.Status, r.Error))
							continue
						}
						plan[i].ID = r.Clock.ID
						out[r.Clock.ID] = plan[i]
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d create errors, first: %v", len(errs), errs[0])
	}
	return out
}

// clusterCreate creates one clock through n.
func clusterCreate(t *testing.T, n *clusterNode, app, bid string, at time.Time) clusterClock {
	t.Helper()
	at = at.UTC().Truncate(time.Millisecond)
	var c httpapi.Clock
	code, err := n.Do(context.Background(), "POST", "/v1/clocks", map[string]any{
		"application": app, "business_id": bid, "payload": bid, "ring_at": at.Format(time.RFC3339Nano),
	}, &c)
	if err != nil || code != http.StatusCreated {
		t.Fatalf("create %s via %s: %d %v", bid, n.ID, code, err)
	}
	return clusterClock{ID: c.ID, BID: bid, Shard: alarm.ShardOf(app, bid, clusterShards), RingAt: at}
}

// clusterRings is what a consumer received of a set of clocks.
type clusterRings struct {
	Clocks, Distinct, Deliveries, Duplicates int
	Redelivered                              int // broker redeliveries after a consumer reconnect: not clockd's
	Missing                                  []int64
	Foreign, Mismatched, Early               int
	// FirstAttemptTwice counts clocks delivered more than once with
	// x-clock-attempt 1: a repeat (a retry, a re-ring after a takeover)
	// must say 2 or more, so that consumers can tell it from a first ring.
	FirstAttemptTwice int
	Lateness          []time.Duration // first receipt - x-clock-ring-at, sorted
}

// clusterAnalyze compares what cons received with the clocks created. Lateness is
// the first receipt of each clock minus its x-clock-ring-at header. A
// message the broker delivers again after the consumer reconnected
// (Redelivered, already received) is not a duplicate ring.
func clusterAnalyze(cons *testenv.Consumer, clocks map[int64]clusterClock) clusterRings {
	r := clusterRings{Clocks: len(clocks)}
	first := map[int64]time.Time{}
	firstAttempts := map[int64]int{}
	for _, g := range cons.Rings() {
		if _, seen := first[g.ID]; seen && g.Delivery.Redelivered {
			r.Redelivered++
			continue
		}
		r.Deliveries++
		if attemptOf(g.Delivery) == 1 {
			if firstAttempts[g.ID]++; firstAttempts[g.ID] == 2 {
				r.FirstAttemptTwice++
			}
		}
		p, ok := clocks[g.ID]
		if !ok {
			r.Foreign++
			continue
		}
		if g.BusinessID != p.BID || !g.RingAt.Equal(p.RingAt) {
			r.Mismatched++ // a message_id must always name the same clock
		}
		if g.Received.Before(p.RingAt) {
			r.Early++
		}
		if _, seen := first[g.ID]; seen {
			r.Duplicates++
			continue
		}
		first[g.ID] = g.Received
		r.Lateness = append(r.Lateness, g.Received.Sub(g.RingAt))
	}
	r.Distinct = len(first)
	for id := range clocks {
		if _, ok := first[id]; !ok {
			r.Missing = append(r.Missing, id)
		}
	}
	slices.Sort(r.Missing)
	slices.Sort(r.Lateness)
	return r
}

func (r clusterRings) pct(p float64) time.Duration {
	if len(r.Lateness) == 0 {
		return 0
	}
	i := int(p * float64(len(r.Lateness)-1))
	return r.Lateness[i]
}

func (r clusterRings) max() time.Duration {
	if len(r.Lateness) == 0 {
		return 0
	}
	return r.Lateness[len(r.Lateness)-1]
}

func (r clusterRings) String() string {
	return fmt.Sprintf("clocks %d, rung %d, deliveries %d, duplicates %d (+%d broker redeliveries), missing %d, early %d; lateness p50 %v p99 %v max %v",
		r.Clocks, r.Distinct, r.Deliveries, r.Duplicates, r.Redelivered, len(r.Missing), r.Early,
		r.pct(.5).Round(100*time.Microsecond), r.pct(.99).Round(100*time.Microsecond), r.max().Round(100*time.Microsecond))
}

// check fails the test unless every clock rang at or after its time and
// every delivery is of a created clock under its own message_id; with
// exactlyOnce, also unless there are no duplicates.
func (r clusterRings) check(t *testing.T, exactlyOnce bool) {
	t.Helper()
	if len(r.Missing) > 0 {
		t.Errorf("%d clocks never rang, e.g. %v", len(r.Missing), r.Missing[:min(10, len(r.Missing))])
	}
	if r.Foreign > 0 || r.Mismatched > 0 {
		t.Errorf("%d deliveries of unknown message_ids, %d whose message_id names another clock", r.Foreign, r.Mismatched)
	}
	if r.Early > 0 {
		t.Errorf("%d rings before ring_at", r.Early)
	}
	if r.FirstAttemptTwice > 0 {
		t.Errorf("%d clocks were delivered twice with x-clock-attempt 1; a repeat must say 2 or more", r.FirstAttemptTwice)
	}
	if exactlyOnce && r.Duplicates > 0 {
		t.Errorf("%d duplicate deliveries without any crash", r.Duplicates)
	}
}

// clusterWaitRung waits until every clock rang once or the limit passes.
func clusterWaitRung(cons *testenv.Consumer, clocks map[int64]clusterClock, limit time.Duration) clusterRings {
	deadline := time.Now().Add(limit)
	for {
		r := clusterAnalyze(cons, clocks)
		if len(r.Missing) == 0 || time.Now().After(deadline) {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterMetric reads one sample of n's /metrics; name includes the labels as
// exposed, e.g. `clockd_rings_total{result="rung"}`. Absent means 0.
func clusterMetric(t *testing.T, n *clusterNode, name string) float64 {
	t.Helper()
	resp, err := http.Get(n.URL + "/metrics")
	if err != nil {
		t.Fatalf("metrics of %s: %v", n.ID, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			return f
		}
	}
	return 0
}

const clusterRungMetric = `clockd_rings_total{result="rung"}`

func clusterDB(t *testing.T, e env) *sql.DB {
	t.Helper()
	db := e.openDB(t)
	return db
}

// clusterStatuses counts the test's clocks per status in MySQL.
func clusterStatuses(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	rows, err := db.Query("SELECT status, COUNT(*) FROM clock GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out[s] = n
	}
	return out
}

// clusterWaitAllRung waits until MySQL records every clock as rung (the rings are
// confirmed and recorded, nothing is left pending or firing).
func clusterWaitAllRung(t *testing.T, db *sql.DB, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		st := clusterStatuses(t, db)
		if st["rung"] == n {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("clocks by status after the storm: %v, want %d rung", st, n)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func clusterSleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// Three instances share the 12 shards 4 each; a storm of clocks over every
// shard, created round-robin through all three, rings completely, each
// clock once, and every instance rings its part.
func TestClusterSpreadsShardsAndClocks(t *testing.T) {
	e := newEnv(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "spread")
	nodes := startCluster(t, e, 3, nil)

	const n = 3000
	from := time.Now().Add(clusterWindow + 1500*time.Millisecond)
	clocks := clusterStorm(t, nodes, "spread", n, from, 5*time.Second)
	perShard := map[int]int{}
	for _, p := range clocks {
		perShard[p.Shard]++
	}
	if len(perShard) != clusterShards {
		t.Fatalf("clocks fall in %d shards, want all %d", len(perShard), clusterShards)
	}
	clusterWaitRung(cons, clocks, time.Until(from)+5*time.Second+15*time.Second)
	time.Sleep(500 * time.Millisecond) // late duplicates, if any, arrive
	r := clusterAnalyze(cons, clocks)
	t.Logf("3 instances, %d clocks over 5 s: %s", n, r)
	r.check(t, true)
	total := 0.0
	for _, nd := range nodes {
		v := clusterMetric(t, nd, clusterRungMetric)
		if v == 0 {
			t.Errorf("instance %s rang nothing", nd.ID)
		}
		t.Logf("instance %s rang %.0f clocks", nd.ID, v)
		total += v
	}
	if int(total) != n {
		t.Errorf("instances rang %.0f clocks in all, want %d", total, n)
	}
	clusterWaitAllRung(t, clusterDB(t, e), n, 10*time.Second)
}

// SIGKILL one instance of three in the middle of a storm: its shards are
// taken over within the lease TTL plus one lease round, every clock still
// rings, and a repeated ring (the crash window) carries the same
// message_id.
func TestClusterInstanceKilledMidStorm(t *testing.T) {
	e := newEnv(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "kill")
	nodes := startCluster(t, e, 3, nil)
	a, victim := nodes[0], nodes[2]
	before := clusterViewOf(t, a)
	lost := before.leases(victim.ID)

	const n, spread = 3000, 6 * time.Second
	from := time.Now().Add(clusterWindow + 1500*time.Millisecond)
	clocks := clusterStorm(t, nodes, "kill", n, from, spread)

	clusterSleepUntil(from.Add(2 * time.Second)) // a third into the storm
	killedAt := time.Now()
	victim.Kill()
	survivors := clusterIDs(nodes[:2])
	v, took, ok := waitCluster(t, a, 3*clusterTTL, func(v clusterJSON) bool { return v.ownedBy(survivors) })
	if !ok {
		t.Fatalf("survivors did not take the shards of the killed instance over within %s: %s", took, v)
	}
	takeover := time.Since(killedAt)
	t.Logf("takeover after SIGKILL: %v (lease TTL %v, round %v); shards of %s %v now %s",
		takeover.Round(time.Millisecond), clusterTTL, leaseRound, victim.ID, lost, v)
	// the lease expires at most a TTL after the kill, a survivor's next
	// round (at most a round later) takes it; slack for -race on a busy box
	takeoverLimit := clusterTTL + leaseRound + time.Second
	if takeover > takeoverLimit {
		t.Errorf("takeover took %v, want at most %v (TTL + one lease round + slack)", takeover, takeoverLimit)
	}
	if len(lost) != clusterShards/3 {
		t.Fatalf("the killed instance held %v", lost)
	}

	clusterWaitRung(cons, clocks, time.Until(from)+spread+clusterTTL+15*time.Second)
	time.Sleep(500 * time.Millisecond)
	r := clusterAnalyze(cons, clocks)
	t.Logf("SIGKILL mid-storm: %s", r)
	r.check(t, false)
	// A clock of the killed instance's shards waits for the takeover, not
	// longer: it rings by max(ring_at, kill + takeover limit) + slack.
	victimShards := map[int]bool{}
	for _, l := range lost {
		victimShards[l.Shard] = true
	}
	var worst, worstLate time.Duration
	seen := map[int64]bool{}
	for _, g := range cons.Rings() {
		p, ok := clocks[g.ID]
		if !ok || !victimShards[p.Shard] || seen[g.ID] {
			continue
		}
		seen[g.ID] = true
		worstLate = max(worstLate, g.Received.Sub(p.RingAt))
		due := p.RingAt
		if t := killedAt.Add(takeoverLimit); t.After(due) {
			due = t
		}
		worst = max(worst, g.Received.Sub(due))
	}
	t.Logf("clocks of the killed instance's shards: worst lateness %v; worst receipt after max(ring_at, kill + %v): %v",
		worstLate.Round(time.Millisecond), takeoverLimit, worst.Round(time.Millisecond))
	if worst > time.Second {
		t.Errorf("a clock of a taken-over shard rang %v after max(ring_at, kill + %v), want at most 1 s", worst, takeoverLimit)
	}
	clusterWaitAllRung(t, clusterDB(t, e), n, 10*time.Second)
}

// SIGSTOP one instance past its lease, then SIGCONT it: it must not ring
// the clocks of the shards it lost (fencing), although it holds them in
// memory when it wakes up with timers long overdue.
//
// What proves it: (1) every clock rings exactly once; (2) the paused
// instance's own counter clockd_rings_total{result="rung"} grows after the
// pause only by rings that MySQL attributes to leases it acquired again
// after it woke up — each rung clock keeps claim_epoch, the lease epoch
// under which it was claimed, and the claim only succeeds for the shard's
// current owner and epoch; (3) no rung clock carries the epoch the paused
// instance held before the pause. Together: the instance had the clocks in
// memory (clockd_heap_clocks), they fell due, and it rang none of them
// under the leases it had lost.
func TestClusterPausedInstanceIsFenced(t *testing.T) {
	e := newEnv(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "pause")
	// a 10 s window: the victim loads every test clock before the pause
	nodes := startCluster(t, e, 3, map[string]string{"CLOCKD_PRELOAD_WINDOW": "10s"})
	a, victim := nodes[0], nodes[1]
	before := clusterViewOf(t, a)
	oldEpoch := map[int]int64{}
	for _, l := range before.leases(victim.ID) {
		oldEpoch[l.Shard] = l.Epoch
	}

	// clocks only in the victim's shards, created through the victim (so
	// they go into its memory at once), due from 0.5 s after the pause to
	// 0.3 s after the resume: some before the takeover, most after it
	const n = 300
	pause := 5 * time.Second // TTL + 2 s
	pausedAt := time.Now().Add(1500 * time.Millisecond)
	var clocks []map[string]any
	var plan []clusterClock
	for i := 0; len(plan) < n; i++ {
		bid := fmt.Sprintf("p-%d", i)
		s := alarm.ShardOf("pause", bid, clusterShards)
		if _, ok := oldEpoch[s]; !ok {
			continue
		}
		at := pausedAt.Add(500*time.Millisecond + (pause-200*time.Millisecond)*time.Duration(len(plan))/n).UTC().Truncate(time.Millisecond)
		clocks = append(clocks, map[string]any{"application": "pause", "business_id": bid, "payload": bid, "ring_at": at.Format(time.RFC3339Nano)})
		plan = append(plan, clusterClock{BID: bid, Shard: s, RingAt: at})
	}
	var res struct {
		Results []httpapi.BatchResult `json:"results"`
	}
	if code, err := victim.Do(context.Background(), "POST", "/v1/clocks/batch", map[string]any{"clocks": clocks}, &res); err != nil || code != http.StatusOK {
		t.Fatalf("batch create: %d %v", code, err)
	}
	byID := map[int64]clusterClock{}
	for i, r := range res.Results {
		if r.Status != http.StatusCreated {
			t.Fatalf("create %s: %d %+v", plan[i].BID, r.Status, r.Error)
		}
		plan[i].ID = r.Clock.ID
		byID[r.Clock.ID] = plan[i]
	}
	if time.Now().After(pausedAt) {
		t.Fatalf("creating %d clocks took too long", n)
	}
	clusterSleepUntil(pausedAt)
	inMemory := clusterMetric(t, victim, "clockd_heap_clocks")
	rungBefore := clusterMetric(t, victim, clusterRungMetric)
	if inMemory < n {
		t.Fatalf("the victim holds %.0f clocks in memory before the pause, want all %d", inMemory, n)
	}
	victim.Signal(syscall.SIGSTOP)
	stoppedAt := time.Now()
	others := []string{nodes[0].ID, nodes[2].ID}
	v, took, ok := waitCluster(t, a, pause-200*time.Millisecond, func(v clusterJSON) bool { return v.ownedBy(others) })
	if !ok {
		t.Fatalf("the paused instance's shards were not taken over within %v: %s", took, v)
	}
	t.Logf("takeover after SIGSTOP: %v: %s", time.Since(stoppedAt).Round(time.Millisecond), v)
	clusterSleepUntil(stoppedAt.Add(pause))
	victim.Signal(syscall.SIGCONT)
	t.Logf("resumed the victim after %v", time.Since(stoppedAt).Round(time.Millisecond))

	clusterWaitRung(cons, byID, 15*time.Second)
	// let the victim rejoin and anything it might wrongly ring arrive
	if _, _, ok := waitCluster(t, a, 20*leaseRound, func(v clusterJSON) bool { return v.fair(clusterIDs(nodes)) }); !ok {
		t.Errorf("the resumed instance did not get its share back: %s", clusterViewOf(t, a))
	}
	time.Sleep(2 * leaseRound)
	r := clusterAnalyze(cons, byID)
	t.Logf("SIGSTOP/SIGCONT: %s", r)
	r.check(t, true) // each clock exactly once: none missing, no duplicate

	after := clusterViewOf(t, a)
	newEpoch := map[int]int64{}
	for _, l := range after.leases(victim.ID) {
		newEpoch[l.Shard] = l.Epoch
	}
	db := clusterDB(t, e)
	rows, err := db.Query("SELECT id, shard, COALESCE(claim_epoch, 0) FROM clock WHERE status = 'rung'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var rungN, stale, byVictimAgain int
	for rows.Next() {
		var id, epoch int64
		var shard int
		if err := rows.Scan(&id, &shard, &epoch); err != nil {
			t.Fatal(err)
		}
		rungN++
		if epoch <= oldEpoch[shard] {
			stale++
			t.Errorf("clock %d of shard %d rung under epoch %d, the lease the paused instance had lost (%d)", id, shard, epoch, oldEpoch[shard])
		}
		if ne, ok := newEpoch[shard]; ok && ne == epoch {
			byVictimAgain++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if rungN != n {
		t.Errorf("%d clocks rung in MySQL, want %d", rungN, n)
	}
	delta := clusterMetric(t, victim, clusterRungMetric) - rungBefore
	t.Logf("the paused instance held %.0f clocks in memory; after resuming it rang %.0f (rings MySQL attributes to leases it re-acquired: %d); rung under a lost epoch: %d",
		inMemory, delta, byVictimAgain, stale)
	if int(delta) != byVictimAgain {
		t.Errorf("the resumed instance rang %.0f clocks, but only %d were claimed under leases it acquired after resuming", delta, byVictimAgain)
	}
	if !strings.Contains(victim.Logs(), "shard leases lost") {
		t.Errorf("the resumed instance did not log that it lost its leases")
	}
}

// A fourth instance joins three in the middle of a storm: the shards
// rebalance to three each, no clock is lost, none is later than the lease
// TTL (plus slack), none rings twice.
func TestClusterInstanceJoins(t *testing.T) {
	e := newEnv(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "join")
	nodes := startCluster(t, e, 3, nil)

	const n, spread = 3000, 6 * time.Second
	from := time.Now().Add(clusterWindow + 1500*time.Millisecond)
	clocks := clusterStorm(t, nodes, "join", n, from, spread)
	clusterSleepUntil(from.Add(1500 * time.Millisecond))
	joinedAt := time.Now()
	d := startClusterNode(t, e, "d", nil)
	ready := time.Since(joinedAt)
	nodes = append(nodes, d)
	v, took, ok := waitCluster(t, nodes[0], 20*leaseRound, func(v clusterJSON) bool { return v.fair(clusterIDs(nodes)) })
	if !ok {
		t.Fatalf("shards not rebalanced to 3 each within %v: %s", took, v)
	}
	if limit := 4 * leaseRound; took > limit {
		t.Errorf("rebalance done %v after the new instance was ready, want within %v", took, limit)
	}
	t.Logf("fourth instance ready after %v; shards 3 each %v after it was ready: %s", ready.Round(time.Millisecond), took.Round(time.Millisecond), v)

	clusterWaitRung(cons, clocks, time.Until(from)+spread+15*time.Second)
	time.Sleep(500 * time.Millisecond)
	r := clusterAnalyze(cons, clocks)
	t.Logf("fourth instance joins mid-storm: %s", r)
	r.check(t, true)
	if limit := clusterTTL + 2*time.Second; r.max() >= limit {
		t.Errorf("max lateness %v during the rebalance, want under %v", r.max(), limit)
	}
	if clusterMetric(t, d, clusterRungMetric) == 0 {
		t.Errorf("the new instance rang nothing")
	}
	clusterWaitAllRung(t, clusterDB(t, e), n, 10*time.Second)
}

// SIGTERM one instance of three during a storm: it releases its leases on
// the way out, so the survivors own its shards within a lease round or two
// (not after the TTL); it exits 0; no clock is lost or rung twice.
func TestClusterGracefulShutdownHandsOver(t *testing.T) {
	e := newEnv(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "term")
	nodes := startCluster(t, e, 3, nil)
	a, leaving := nodes[0], nodes[2]

	const n, spread = 1500, 5 * time.Second
	from := time.Now().Add(clusterWindow + 1500*time.Millisecond)
	clocks := clusterStorm(t, nodes, "term", n, from, spread)
	clusterSleepUntil(from.Add(2 * time.Second))

	survivors := clusterIDs(nodes[:2])
	stoppedAt := time.Now()
	exit := make(chan error, 1)
	go func() { exit <- leaving.Stop(20 * time.Second) }()
	v, _, ok := waitCluster(t, a, 3*clusterTTL, func(v clusterJSON) bool { return v.ownedBy(survivors) })
	handover := time.Since(stoppedAt)
	if !ok {
		t.Fatalf("survivors did not own every shard %v after SIGTERM: %s", handover, v)
	}
	err := <-exit
	exited := time.Since(stoppedAt)
	t.Logf("graceful shutdown: exited %v after SIGTERM (err %v); survivors own its shards %v after SIGTERM: %s",
		exited.Round(time.Millisecond), err, handover.Round(time.Millisecond), v)
	if err != nil {
		t.Errorf("clockd exited with %v after SIGTERM, want 0", err)
	}
	if limit := 2*leaseRound + 500*time.Millisecond; handover > limit {
		t.Errorf("hand-over took %v, want at most %v (two lease rounds + slack; the TTL is %v)", handover, limit, clusterTTL)
	}

	clusterWaitRung(cons, clocks, time.Until(from)+spread+15*time.Second)
	time.Sleep(500 * time.Millisecond)
	r := clusterAnalyze(cons, clocks)
	t.Logf("graceful shutdown mid-storm: %s", r)
	r.check(t, true)
	clusterWaitAllRung(t, clusterDB(t, e), n, 10*time.Second)
}

// A clock created through an instance that does not own its shard, due in
// about a second, rings punctually: the owner must learn of near-term
// creates at once, not at its next full rescan.
func TestClusterCreateThroughNonOwner(t *testing.T) {
	e := newEnv(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "cross")
	// the default preload window (10 s): a clock due in 1 s is inside the
	// range the owner has already loaded
	nodes := startCluster(t, e, 3, map[string]string{"CLOCKD_PRELOAD_WINDOW": "10s"})
	own := clusterViewOf(t, nodes[0]).owners()
	const n = 12
	clocks := map[int64]clusterClock{}
	for i := 0; len(clocks) < n; i++ {
		bid := fmt.Sprintf("x-%d", i)
		owner := own[alarm.ShardOf("cross", bid, clusterShards)]
		// through another instance than the owner, in turn
		var via *clusterNode
		for k := 0; k < len(nodes); k++ {
			cand := nodes[(i+k)%len(nodes)]
			if cand.ID != owner {
				via = cand
				break
			}
		}
		p := clusterCreate(t, via, "cross", bid, time.Now().Add(time.Second))
		clocks[p.ID] = p
		time.Sleep(time.Duration(50+rand.IntN(50)) * time.Millisecond)
	}
	r := clusterWaitRung(cons, clocks, 40*time.Second)
	t.Logf("clocks created through a non-owner, due in 1 s: %s", r)
	r.check(t, true)
	if r.max() >= 500*time.Millisecond {
		t.Errorf("a clock created through a non-owner rang %v late (p50 %v), want well under 1 s", r.max(), r.pct(.5))
	}
}

// An instance killed and restarted at once under the same instance id
// (a supervisor restarting it, a StatefulSet pod) finds its leases still
// valid in MySQL. The clocks its previous process left firing must still
// ring promptly, not after the firing timeout (minutes).
func TestClusterInstanceRestartedWithSameID(t *testing.T) {
	e := newEnv(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "restart")
	nodes := startCluster(t, e, 3, nil)
	victim := nodes[2]

	const n, spread = 3000, 5 * time.Second
	from := time.Now().Add(clusterWindow + 1500*time.Millisecond)
	clocks := clusterStorm(t, nodes, "restart", n, from, spread)
	clusterSleepUntil(from.Add(2 * time.Second))
	victim.Kill()
	victim.Start()
	victim.WaitReady(30 * time.Second)

	clusterWaitRung(cons, clocks, time.Until(from)+spread+clusterTTL+10*time.Second)
	time.Sleep(500 * time.Millisecond)
	r := clusterAnalyze(cons, clocks)
	t.Logf("restart with the same id mid-storm: %s", r)
	r.check(t, false)
	if limit := clusterTTL + 2*time.Second; r.max() > limit {
		t.Errorf("max lateness %v across the restart, want at most %v", r.max(), limit)
	}
	clusterWaitAllRung(t, clusterDB(t, e), n, 10*time.Second)
}

// SIGSTOP one instance a little longer than its local reckoning of the
// lease (80 % of the TTL) but shorter than the lease in MySQL, then SIGCONT
// it: nobody took its shards over, it renews them under the same epochs,
// and the clocks that fell due meanwhile (in its memory, overdue when it
// wakes up) ring at once, not at the next full rescan of their shards.
func TestClusterShortPauseLosesNoClock(t *testing.T) {
	e := newEnv(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "nap")
	nodes := startCluster(t, e, 3, map[string]string{"CLOCKD_PRELOAD_WINDOW": "10s"})
	a, victim := nodes[0], nodes[1]
	held := clusterViewOf(t, a).leases(victim.ID)
	mine := map[int]bool{}
	for _, l := range held {
		mine[l.Shard] = true
	}
	const n = 200
	const pause = 2600 * time.Millisecond // > 0.8 TTL (local validity), < TTL
	from := time.Now().Add(2500 * time.Millisecond)
	var clocks []map[string]any
	var plan []clusterClock
	for i := 0; len(plan) < n; i++ {
		bid := fmt.Sprintf("n-%d", i)
		s := alarm.ShardOf("nap", bid, clusterShards)
		if !mine[s] {
			continue
		}
		at := from.Add(3 * time.Second * time.Duration(len(plan)) / n).UTC().Truncate(time.Millisecond)
		clocks = append(clocks, map[string]any{"application": "nap", "business_id": bid, "payload": bid, "ring_at": at.Format(time.RFC3339Nano)})
		plan = append(plan, clusterClock{BID: bid, Shard: s, RingAt: at})
	}
	var res struct {
		Results []httpapi.BatchResult `json:"results"`
	}
	if code, err := victim.Do(context.Background(), "POST", "/v1/clocks/batch", map[string]any{"clocks": clocks}, &res); err != nil || code != http.StatusOK {
		t.Fatalf("batch create: %d %v", code, err)
	}
	byID := map[int64]clusterClock{}
	for i, r := range res.Results {
		if r.Status != http.StatusCreated {
			t.Fatalf("create %s: %d %+v", plan[i].BID, r.Status, r.Error)
		}
		plan[i].ID = r.Clock.ID
		byID[r.Clock.ID] = plan[i]
	}
	// pause right after a renewal, so that the lease in MySQL outlives the pause
	clusterSleepUntil(from.Add(-1200 * time.Millisecond))
	first := clusterViewOf(t, a).leases(victim.ID)
	if _, _, ok := waitCluster(t, a, 2*leaseRound, func(v clusterJSON) bool {
		l := v.leases(victim.ID)
		return len(l) > 0 && len(first) > 0 && l[0].LeaseUntil != first[0].LeaseUntil
	}); !ok {
		t.Fatal("no lease renewal seen")
	}
	victim.Signal(syscall.SIGSTOP)
	stoppedAt := time.Now()
	time.Sleep(pause)
	victim.Signal(syscall.SIGCONT)
	resumedAt := time.Now()

	clusterWaitRung(cons, byID, 40*time.Second)
	time.Sleep(300 * time.Millisecond)
	r := clusterAnalyze(cons, byID)
	t.Logf("paused %v after a renewal, resumed: %s", resumedAt.Sub(stoppedAt).Round(time.Millisecond), r)
	after := clusterViewOf(t, a).leases(victim.ID)
	if len(after) != len(held) || after[0].Epoch != held[0].Epoch {
		t.Fatalf("the pause cost the instance its leases (%v -> %v): the premise of the test failed", held, after)
	}
	r.check(t, true)
	// due during the pause: at most the pause late; after it: punctual
	var worst time.Duration
	seen := map[int64]bool{}
	for _, g := range cons.Rings() {
		p, ok := byID[g.ID]
		if !ok || seen[g.ID] {
			continue
		}
		seen[g.ID] = true
		due := p.RingAt
		if due.Before(resumedAt) {
			due = resumedAt
		}
		worst = max(worst, g.Received.Sub(due))
	}
	t.Logf("worst receipt after max(ring_at, resume): %v", worst.Round(time.Millisecond))
	if worst > time.Second {
		t.Errorf("a clock rang %v after max(ring_at, resume), want at most 1 s", worst)
	}
}

// An instance that cannot publish holds no shard, so that the others ring
// its clocks: one started with an unreachable broker takes none, and one
// that loses its broker gives its shards up after the lease TTL (sooner
// would move every shard at each broker node restart). With the broker
// back it takes its share again. No clock is lost or rung twice, and none
// waits much longer than the TTL.
func TestClusterInstanceWithoutBroker(t *testing.T) {
	e := newEnv(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "nobroker")
	amqp, err := url.Parse(e.AMQP)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartProxy(t, amqp.Host)
	viaProxy := *amqp
	viaProxy.Host = proxy.Addr
	dead := *amqp
	dead.Host = testenv.FreeAddr(t) // nobody listens there
	nodes := startCluster(t, e, 2, map[string]string{"CLOCKD_AMQP_URL": viaProxy.String()})
	a, b := nodes[0], nodes[1]

	// c starts without a broker: it serves the API but takes no shard.
	c := &clusterNode{Clockd: testenv.LaunchClockd(t, e.vars(map[string]string{
		"CLOCKD_SHARDS": strconv.Itoa(clusterShards), "CLOCKD_LEASE_TTL": clusterTTL.String(),
		"CLOCKD_INSTANCE_ID": "c", "CLOCKD_PRELOAD_WINDOW": clusterWindow.String(),
		"CLOCKD_AMQP_URL": dead.String(),
	})), ID: "c"}
	c.WaitHealthy(30 * time.Second)
	time.Sleep(4 * leaseRound) // c's first rounds, and the others' after them
	if v := clusterViewOf(t, a); !v.fair([]string{"a", "b"}) || len(v.leases("c")) != 0 || v.rings("c") {
		t.Fatalf("with c unable to publish, want a and b to share every shard, c none and not ringing: %s", v)
	}

	// The console says so.
	page := func(n *clusterNode) string {
		resp, err := http.Get(n.URL + "/ui/cluster")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		if _, err := bufio.NewReader(resp.Body).WriteTo(&b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if p := page(a); strings.Count(p, "cannot publish to RabbitMQ") != 1 {
		t.Errorf("the console's cluster page does not tell the one instance unable to publish:\n%s", p)
	}

	// Clocks created through c, due over the next seconds: a and b ring them.
	const n, spread = 600, 3 * time.Second
	from := time.Now().Add(clusterWindow + time.Second)
	clocks := clusterStorm(t, []*clusterNode{c}, "nobroker", n, from, spread)
	r := clusterWaitRung(cons, clocks, time.Until(from)+spread+10*time.Second)
	t.Logf("created through the instance without a broker: %s", r)
	r.check(t, true)
	if limit := time.Second; r.max() >= limit {
		t.Errorf("max lateness %v, want under %v: the instances able to publish own every shard", r.max(), limit)
	}
	// Clocks due within the preload window, which their owners have read
	// already: c cannot hint them, so it stamps their shards and the
	// owners rescan at their next lease round, not at the full rescan
	// (30 s).
	consSoon := testenv.Consume(t, e.AMQP, e.Exchange, "nobroker-soon")
	soon := map[int64]clusterClock{}
	for i := range 24 {
		cc := clusterCreate(t, c, "nobroker-soon", fmt.Sprintf("soon-%02d", i), time.Now().Add(300*time.Millisecond))
		soon[cc.ID] = cc
	}
	r = clusterWaitRung(consSoon, soon, 10*time.Second)
	t.Logf("due 300 ms after their create through the instance without a broker: %s", r)
	r.check(t, true)
	if limit := 2*leaseRound + time.Second; r.max() >= limit {
		t.Errorf("max lateness %v, want under %v (a lease round of the owner, and its rescan)", r.max(), limit)
	}
	if asked := clusterMetric(t, a, "clockd_shard_rescans_asked_total") + clusterMetric(t, b, "clockd_shard_rescans_asked_total"); asked == 0 {
		t.Error("no owner rescanned a shard at another instance's request")
	}

	// a and b lose their broker (the proxy refuses, their connections
	// close): with no instance able to ring, nobody gives anything up.
	proxy.Cut()
	time.Sleep(clusterTTL + 3*leaseRound)
	if v := clusterViewOf(t, c); !v.fair([]string{"a", "b"}) {
		t.Errorf("with no instance able to publish, want the shards to stay where they were: %s", v)
	}
	// Restart c with the broker: it takes every shard once a and b say
	// they cannot ring, and rings what comes due meanwhile.
	c.Kill()
	c = startClusterNode(t, e, "c", nil)
	v, took, ok := waitCluster(t, c, clusterTTL+8*leaseRound, func(v clusterJSON) bool { return v.ownedBy([]string{"c"}) })
	if !ok {
		t.Fatalf("c (the only instance able to publish) does not own every shard %v after its start: %s", took, v)
	}
	t.Logf("c owns every shard %v after its start: %s", took.Round(time.Millisecond), v)
	from = time.Now().Add(clusterWindow + time.Second)
	clocks2 := clusterStorm(t, []*clusterNode{a, b}, "nobroker2", n, from, spread)
	cons2 := testenv.Consume(t, e.AMQP, e.Exchange, "nobroker2")
	r = clusterWaitRung(cons2, clocks2, time.Until(from)+spread+10*time.Second)
	t.Logf("created through the instances that lost their broker: %s", r)
	r.check(t, true)

	// The broker is back for a and b: the shards are shared by the three.
	proxy.Restore()
	if v, took, ok := waitCluster(t, c, 12*leaseRound, func(v clusterJSON) bool { return v.fair([]string{"a", "b", "c"}) }); !ok {
		t.Errorf("shards not shared by a, b and c %v after a's and b's broker came back: %s", took, v)
	}
	clusterWaitAllRung(t, clusterDB(t, e), 2*n+len(soon), 10*time.Second)
}
