package main

// High availability of the dependencies (issue 14): clockd on a
// three-node RabbitMQ cluster (quorum queues, CLOCKD_AMQP_URL naming the
// three nodes) and on a MariaDB primary with a semi-synchronous replica
// behind an endpoint, started here on this machine. During a storm of
// 20,000 clocks one dependency is killed with SIGKILL; every clock whose
// create was acknowledged must reach the consumer. The figures are logged
// for docs/ha.md.

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clockd/clockd/client/consume"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

const (
	haClocks = 20000
	// haTrickle of them are created one by one (POST /v1/clocks) all
	// through the storm, so that creates meet the fault; the others in
	// batches of haBatch, four requests at a time, from the start.
	haTrickle    = 1000
	haTrickleFor = 16 * time.Second
	haBatch      = 500
	// The batch-created clocks ring over haSpread, from haLead after the
	// storm begins; a trickled clock rings haTrickleLead after its create.
	haLead        = 4 * time.Second
	haSpread      = 20 * time.Second
	haTrickleLead = 2 * time.Second
	// haFaultAt is when the fault strikes, after the storm begins: rings
	// are flowing and creates are being posted.
	haFaultAt = 8 * time.Second
)

// haWorld is the cluster the three fault tests share: it starts once.
type haWorld struct {
	rc       *testenv.RabbitCluster
	db       *testenv.ReplicatedMariaDB
	d        *testenv.Clockd
	exchange string
	figures  []string // one line per fault, for the summary
}

// TestHA starts the clusters once and runs the three faults in turn, each
// during its own storm, on its own application and quorum queue.
func TestHA(t *testing.T) {
	begin := time.Now()
	w := &haWorld{exchange: testenv.Name("clock.ring.ha-")}
	w.rc = testenv.StartRabbitCluster(t, 3)
	w.db = testenv.StartReplicatedMariaDB(t)
	w.d = testenv.StartClockd(t, map[string]string{
		"CLOCKD_MYSQL_DSN": w.db.DSN() + "clock",
		"CLOCKD_AMQP_URL":  w.rc.URLs(),
		"CLOCKD_EXCHANGE":  w.exchange,
		"CLOCKD_SHARDS":    "8",
		// The storm is more than this shared two-core machine serves in
		// time (clockd under -race, three brokers, two databases): confirms
		// queue up behind each other, and with the default 5s many would
		// time out and ring again, blurring the figures of the faults.
		"CLOCKD_AMQP_CONFIRM_TIMEOUT": "15s",
		// A clock left firing by a lost MySQL write is put back within
		// seconds, not the default two minutes.
		"CLOCKD_FIRING_TIMEOUT": "30s",
	})
	if p := os.Getenv("CLOCKD_HA_LOG"); p != "" {
		t.Cleanup(func() { _ = os.WriteFile(p, []byte(w.d.Logs()), 0o644) })
	}
	t.Logf("fixtures up in %s: RabbitMQ %s; MariaDB primary %s, replica %s, endpoint %s",
		time.Since(begin).Round(100*time.Millisecond), w.rc.URLs(), w.db.Primary.Addr(), w.db.Replica.Addr(), w.db.Endpoint.Addr)

	if os.Getenv("CLOCKD_HA_BASELINE") != "" {
		// The same storm without a fault: what the machine gives anyway.
		t.Run("NoFault", func(t *testing.T) {
			cons := testenv.ConsumeQuorum(t, w.rc.URLList(1), w.exchange, "ha-none")
			w.report(t, "no fault (baseline)", w.storm(t, "ha-none", cons, true, func() {}), cons)
		})
	}
	t.Run("RabbitMQNodeOfClockdKilled", w.brokerNodeKilled)
	t.Run("QueueLeaderKilled", w.queueLeaderKilled)
	t.Run("MySQLPrimaryKilled", w.mysqlPrimaryKilled)
	t.Run("ClientKitOnCluster", w.clientKit)

	t.Logf("HA figures (%d clocks per storm, ring times over %s, fault %s into the storm; total %s):\n%s",
		haClocks, haSpread, haFaultAt, time.Since(begin).Round(time.Second), strings.Join(w.figures, "\n"))
}

// (1) kill -9 the RabbitMQ node clockd publishes to: clockd moves to the
// next node of its list; rings whose confirms were lost with the node are
// published again (same message_id); /readyz stays green.
func (w *haWorld) brokerNodeKilled(t *testing.T) {
	node := w.clockdNode(t)
	other := w.rc.Nodes[(node.Index+1)%len(w.rc.Nodes)]
	// The consumer and the queue's leader are on another node: this fault
	// is clockd's alone.
	cons := testenv.ConsumeQuorum(t, w.rc.URLList(other.Index), w.exchange, "ha-node")
	r := w.storm(t, "ha-node", cons, true, func() {
		node.Kill()
	})
	t.Logf("killed %s, the node clockd was connected to; clockd now on %v", node, w.clockdNode(t))
	w.report(t, "RabbitMQ node of clockd killed", r, cons)
	w.restart(t, node)
}

// (2) kill -9 the node that leads the application queue's quorum (not
// clockd's node): the queue elects a new leader among the two others; the
// consumer reconnects to a surviving node.
func (w *haWorld) queueLeaderKilled(t *testing.T) {
	cn := w.clockdNode(t)
	leader := w.rc.Nodes[(cn.Index+1)%len(w.rc.Nodes)]
	// A quorum queue is led by the node it was declared on.
	cons := testenv.ConsumeQuorum(t, w.rc.URLList(leader.Index), w.exchange, "ha-leader")
	if got := w.rc.QueueLeader(cons.Queue, 30*time.Second); got != leader {
		t.Logf("queue %s led by %s, not %s where it was declared; killing its leader", cons.Queue, got, leader)
		leader = got
	}
	if leader == cn {
		t.Logf("the queue's leader %s is also clockd's node", leader)
	}
	r := w.storm(t, "ha-leader", cons, true, func() {
		leader.Kill()
	})
	t.Logf("killed %s, the leader of %s; new leader %s; consumer reconnected %d times",
		leader, cons.Queue, w.rc.QueueLeader(cons.Queue, 30*time.Second), cons.Reconnects)
	w.report(t, "quorum leader of the queue killed", r, cons)
	w.restart(t, leader)
}

// (3) kill -9 the MySQL primary; after 2 s (a failover tool noticing) the
// replica is promoted (relay log applied, STOP SLAVE, RESET SLAVE ALL,
// read_only off) and the endpoint moves to it. Creates meanwhile answer
// 503; no create answered 2xx is lost.
func (w *haWorld) mysqlPrimaryKilled(t *testing.T) {
	cons := testenv.ConsumeQuorum(t, w.rc.URLList(0), w.exchange, "ha-mysql")
	var promoted time.Duration
	r := w.storm(t, "ha-mysql", cons, false, func() {
		on, yes, no := w.db.SemiSync()
		if !on || no != 0 {
			t.Errorf("before the kill: semi-sync on=%v, transactions acknowledged by the replica %d, not %d: the primary fell back to asynchronous", on, yes, no)
		}
		t.Logf("before the kill: %d transactions acknowledged by the replica, %d not", yes, no)
		w.db.Primary.Kill()
		time.Sleep(2 * time.Second)
		promoted = w.db.Promote()
	})
	t.Logf("primary killed; replica promoted in %s (2 s after the kill); endpoint now %s", promoted.Round(time.Millisecond), w.db.Endpoint.Target())
	w.report(t, "MySQL primary killed, replica promoted", r, cons)
	// The fault must meet creates: some were under way while the primary
	// was down. Those whose commit was in flight at the kill answer 503;
	// those that arrive later wait for MySQL within their deadline, so
	// the switch need not produce a 503 (with few commits in flight at
	// once, often none is at the kill).
	if n := r.during(r.faultAt, r.faultAt.Add(r.faultTook)); n == 0 {
		t.Error("no create request was under way while the primary was down: the fault did not meet the creates")
	} else {
		t.Logf("%d create requests were under way while the primary was down; %d creates answered 503", n, r.codes[http.StatusServiceUnavailable])
	}
	for code, n := range r.codes {
		if code != http.StatusCreated && code != http.StatusOK && code != http.StatusServiceUnavailable {
			t.Errorf("%d creates answered %d during the switch, want 2xx or 503", n, code)
		}
	}
	// Every acknowledged clock is in the new primary, and rung.
	db, err := sql.Open("mysql", w.db.DSN()+"clock")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	statuses := map[string]int{}
	rows, err := db.Query("SELECT status, COUNT(*) FROM clock WHERE application = 'ha-mysql' GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		statuses[s] = n
	}
	rows.Close()
	if statuses["rung"] != len(r.acked) || len(statuses) != 1 {
		t.Errorf("new primary holds %v for %d acknowledged clocks, want all rung", statuses, len(r.acked))
	}
}

// The client kit against the cluster: consume.Bind (what clockctl bind
// -quorum does) with a node list whose first node is down declares a
// quorum queue; the consumer helper, given the list, gets every ring,
// also when the node it consumes from is killed.
func (w *haWorld) clientKit(t *testing.T) {
	const n = 300
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := consume.Queue{Application: "ha-kit", Name: testenv.Name("ha-kit-"), Exchange: w.exchange, Quorum: true}
	dead := "amqp://guest:guest@" + testenv.FreeAddr(t) + "/"
	bctx, bcancel := context.WithTimeout(ctx, time.Minute)
	defer bcancel()
	if _, err := consume.Bind(bctx, dead+","+w.rc.URLs(), q); err != nil {
		t.Fatalf("bind a quorum queue through the node list: %v", err)
	}
	w.rc.QueueLeader(q.Name, 30*time.Second) // only a quorum queue has one
	name := testenv.Name("ha-kit-consumer-")
	c, err := consume.New(consume.Options{URL: w.rc.URLs(), Queue: q, Prefetch: 200, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[int64]int{}
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(_ context.Context, r consume.Ring) error {
			mu.Lock()
			got[r.ClockID]++
			mu.Unlock()
			return nil
		})
	}()
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	clocks := postClocks(t, w.d, spreadSpecs("ha-kit", "k", n, time.Now().Add(2*time.Second), 6*time.Second))
	for deadline := time.Now().Add(30 * time.Second); received() < n/3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the consumer helper received %d rings in 30s", received())
		}
	}
	node := w.rc.ConnectedTo(name)
	if node == nil {
		t.Fatal("the consumer helper has no connection to the cluster")
	}
	node.Kill()
	for deadline := time.Now().Add(60 * time.Second); received() < n; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	var missing []string
	dups := 0
	for _, c := range clocks {
		if got[c.ID] == 0 {
			missing = append(missing, c.BusinessID)
		}
		dups += max(got[c.ID]-1, 0)
	}
	mu.Unlock()
	if len(missing) > 0 {
		t.Errorf("%d of %d rings never reached the consumer helper, e.g. %v", len(missing), n, missing[:min(5, len(missing))])
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("consumer helper Run: %v", err)
	}
	t.Logf("client kit: quorum queue bound through a list starting with a dead node; the consumer helper got %d/%d rings (%d duplicates) across the kill of its node %s", n-len(missing), n, dups, node)
}

// clockdNode is the cluster node clockd's publisher is connected to.
func (w *haWorld) clockdNode(t *testing.T) *testenv.ClusterNode {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n := w.rc.ConnectedTo("clockd"); n != nil {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatal("clockd has no connection to the RabbitMQ cluster")
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// restart starts a killed node again for the next fault (a quorum of three
// needs two).
func (w *haWorld) restart(t *testing.T, n *testenv.ClusterNode) {
	t.Helper()
	begin := time.Now()
	n.Start()
	t.Logf("%s restarted and back in the cluster in %s", n, time.Since(begin).Round(100*time.Millisecond))
}

// stormResult is what a storm created and saw.
type stormResult struct {
	start, faultAt time.Time
	faultTook      time.Duration
	acked          map[int64]httpapi.Clock // clocks whose create answered 2xx
	codes          map[int]int             // create answers by status (0: no answer)
	// committedAfter5xx: creates answered 5xx that an identical retry
	// found committed (200): a 5xx must mean "not committed".
	committedAfter5xx []string
	notReady          []string           // /readyz answers other than 200 during the storm
	brokerNotReady    []string           // those whose rabbitmq check was not ok
	watched           bool               // /readyz was polled
	attempts          map[string]float64 // ring attempts by result during the storm (clockd_rings_total)
	// posts: when each create request (POST) was sent and answered
	posts []span
}

// span is a time interval.
type span struct{ from, to time.Time }

// during counts the create requests under way at some moment of
// [from, to]: sent before to and answered after from.
func (r *stormResult) during(from, to time.Time) int {
	n := 0
	for _, p := range r.posts {
		if p.from.Before(to) && p.to.After(from) {
			n++
		}
	}
	return n
}

// storm creates haClocks clocks of app in batches posted over haCreating
// (each batch in its own goroutine, so a stalled database does not hold
// the others back), strikes with fault at haFaultAt, retries every create
// that was not acknowledged until it is, and waits until every
// acknowledged clock reached cons. With watchReady it polls /readyz all
// along.
func (w *haWorld) storm(t *testing.T, app string, cons *testenv.Consumer, watchReady bool, fault func()) stormResult {
	t.Helper()
	r := stormResult{start: time.Now(), acked: map[int64]httpapi.Clock{}, codes: map[int]int{}, watched: watchReady}
	before := ringResults(t, w.d)
	specs := spreadSpecs(app, "c", haClocks-haTrickle, r.start.Add(haLead), haSpread)
	var mu sync.Mutex
	stop := make(chan struct{})
	var watchers sync.WaitGroup
	if watchReady {
		watchers.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				code, body := w.d.Ready()
				if code == http.StatusOK {
					continue
				}
				var ready struct {
					Checks map[string]string `json:"checks"`
				}
				_ = json.Unmarshal([]byte(body), &ready)
				what := fmt.Sprintf("%s: %d %s", time.Since(r.start).Round(time.Millisecond), code, strings.TrimSpace(body))
				mu.Lock()
				if ready.Checks["rabbitmq"] != "ok" {
					r.brokerNotReady = append(r.brokerNotReady, what)
				}
				r.notReady = append(r.notReady, what)
				mu.Unlock()
			}
		})
	}
	var creators sync.WaitGroup
	slots := make(chan struct{}, 4)
	for lo := 0; lo < len(specs); lo += haBatch {
		batch := specs[lo:min(lo+haBatch, len(specs))]
		creators.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			w.create(t, batch, &mu, &r)
		})
	}
	const trickleWorkers = 4
	for g := range trickleWorkers {
		creators.Go(func() {
			for i := g; i < haTrickle; i += trickleWorkers {
				time.Sleep(time.Until(r.start.Add(haTrickleFor * time.Duration(i) / haTrickle)))
				spec := ringSpec{App: app, BusinessID: fmt.Sprintf("t-%05d", i), RingAt: time.Now().Add(haTrickleLead).Truncate(time.Millisecond)}
				w.create(t, []ringSpec{spec}, &mu, &r)
			}
		})
	}
	time.Sleep(time.Until(r.start.Add(haFaultAt)))
	r.faultAt = time.Now()
	fault()
	r.faultTook = time.Since(r.faultAt)
	creators.Wait()
	mu.Lock()
	clocks := make([]httpapi.Clock, 0, len(r.acked))
	for _, c := range r.acked {
		clocks = append(clocks, c)
	}
	mu.Unlock()
	if !waitReceived(cons, clocks, time.Until(latest(clocks))+90*time.Second) {
		t.Errorf("not every acknowledged clock reached the consumer within 90s after the last ring time")
	}
	time.Sleep(2 * time.Second) // late duplicates
	close(stop)
	watchers.Wait()
	r.attempts = ringResults(t, w.d)
	for k, v := range before {
		r.attempts[k] -= v
	}
	return r
}

// create posts one batch, and again the items that were not acknowledged,
// until every one is (at most a minute).
func (w *haWorld) create(t *testing.T, specs []ringSpec, mu *sync.Mutex, r *stormResult) {
	failed := map[string]int{} // business_id -> last non-2xx answer
	deadline := time.Now().Add(time.Minute)
	for len(specs) > 0 {
		var results []batchItem
		var code int
		sent := time.Now()
		if len(specs) == 1 {
			results, code = postOne(w.d, specs[0])
		} else {
			results, code = postBatch(w.d, specs)
		}
		var again []ringSpec
		mu.Lock()
		r.posts = append(r.posts, span{sent, time.Now()})
		for i, s := range specs {
			c := code
			if results != nil {
				c = results[i].Status
			}
			r.codes[c]++
			switch {
			case c == http.StatusCreated || c == http.StatusOK:
				if c == http.StatusOK && failed[s.BusinessID] >= 500 {
					r.committedAfter5xx = append(r.committedAfter5xx, fmt.Sprintf("%s (answered %d first)", s.BusinessID, failed[s.BusinessID]))
				}
				r.acked[results[i].Clock.ID] = *results[i].Clock
			default:
				failed[s.BusinessID] = c
				again = append(again, s)
			}
		}
		mu.Unlock()
		specs = again
		if len(specs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d creates still not acknowledged after a minute of retries", len(specs))
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// postOne creates one clock with POST /v1/clocks; it answers as postBatch.
func postOne(d *testenv.Clockd, s ringSpec) ([]batchItem, int) {
	var c httpapi.Clock
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, err := d.Do(ctx, "POST", "/v1/clocks", map[string]any{
		"application": s.App, "business_id": s.BusinessID,
		"payload": fmt.Sprintf(`{"id":%q}`, s.BusinessID),
		"ring_at": s.RingAt.UTC().Format(time.RFC3339Nano),
	}, &c)
	switch {
	case err != nil:
		return nil, 0
	case code == http.StatusCreated || code == http.StatusOK:
		if c.ID == 0 {
			return nil, 0
		}
		return []batchItem{{Status: code, Clock: &c}}, code
	default:
		return []batchItem{{Status: code}}, code
	}
}

// batchItem is one result of POST /v1/clocks/batch.
type batchItem struct {
	Status int            `json:"status"`
	Clock  *httpapi.Clock `json:"clock"`
}

// postBatch creates specs in one batch request. It returns the per-item
// results, or nil and the request's status (0 without an answer).
func postBatch(d *testenv.Clockd, specs []ringSpec) ([]batchItem, int) {
	body := make([]map[string]any, 0, len(specs))
	for _, s := range specs {
		body = append(body, map[string]any{
			"application": s.App, "business_id": s.BusinessID,
			"payload": fmt.Sprintf(`{"id":%q}`, s.BusinessID),
			"ring_at": s.RingAt.UTC().Format(time.RFC3339Nano),
		})
	}
	var resp struct {
		Results []batchItem `json:"results"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code, err := d.Do(ctx, "POST", "/v1/clocks/batch", map[string]any{"clocks": body}, &resp)
	if err != nil || code != http.StatusOK || len(resp.Results) != len(specs) {
		if err != nil || code == http.StatusOK {
			code = 0 // no usable answer
		}
		return nil, code
	}
	for _, it := range resp.Results {
		if (it.Status == http.StatusCreated || it.Status == http.StatusOK) && it.Clock == nil {
			return nil, 0
		}
	}
	return resp.Results, code
}

// report judges what the consumer received, logs the figures and fails the
// test on a lost clock, an early ring or a foreign message.
func (w *haWorld) report(t *testing.T, what string, r stormResult, cons *testenv.Consumer) {
	t.Helper()
	clocks := make([]httpapi.Clock, 0, len(r.acked))
	for _, c := range r.acked {
		clocks = append(clocks, c)
	}
	j := judge(cons, clocks)
	j.check(t) // lost, early, foreign
	if len(r.acked) != haClocks {
		t.Errorf("%d of %d clocks acknowledged", len(r.acked), haClocks)
	}
	if len(r.committedAfter5xx) > 0 {
		t.Errorf("%d creates answered 5xx were committed after all, e.g. %v", len(r.committedAfter5xx), r.committedAfter5xx[:min(5, len(r.committedAfter5xx))])
	}
	if len(r.brokerNotReady) > 0 {
		t.Errorf("/readyz said rabbitmq was not ready %d times while a node answered, e.g. %v", len(r.brokerNotReady), r.brokerNotReady[:min(5, len(r.brokerNotReady))])
	}
	if len(r.notReady) > 0 {
		t.Logf("/readyz not 200 %d times, e.g. %v", len(r.notReady), r.notReady[:min(3, len(r.notReady))])
	}

	// Rings resume: the longest pause in the stream of rings (first
	// receipts of a clock) that ends after the fault, and when it ended.
	// Also the worst lateness of the clocks due in the 10 s after it.
	var pause, resume, worst time.Duration
	republished := 0
	var firsts []time.Time
	seen := map[int64]bool{}
	for _, ring := range cons.Rings() {
		if attemptOf(ring.Delivery) >= 2 && !ring.Delivery.Redelivered {
			republished++
		}
		if !seen[ring.ID] {
			seen[ring.ID] = true
			firsts = append(firsts, ring.Received)
		}
		if !ring.RingAt.Before(r.faultAt) && !ring.RingAt.After(r.faultAt.Add(10*time.Second)) {
			worst = max(worst, ring.Received.Sub(ring.RingAt))
		}
	}
	slices.SortFunc(firsts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(firsts); i++ {
		if firsts[i].After(r.faultAt) && firsts[i].Before(r.faultAt.Add(30*time.Second)) && firsts[i].Sub(firsts[i-1]) > pause {
			pause, resume = firsts[i].Sub(firsts[i-1]), firsts[i].Sub(r.faultAt)
		}
	}
	codes := make([]string, 0, len(r.codes))
	for _, c := range slices.Sorted(maps.Keys(r.codes)) {
		codes = append(codes, fmt.Sprintf("%d×%d", r.codes[c], c))
	}
	var attempts []string
	for _, k := range slices.Sorted(maps.Keys(r.attempts)) {
		if r.attempts[k] != 0 {
			attempts = append(attempts, fmt.Sprintf("%s %.0f", k, r.attempts[k]))
		}
	}
	ready := "not polled"
	if r.watched {
		ready = fmt.Sprintf("not 200 %d times, rabbitmq check not ok %d times", len(r.notReady), len(r.brokerNotReady))
	}
	missing := len(j.missing())
	line := fmt.Sprintf("%s: %d/%d creates acknowledged (answers %s); acknowledged clocks lost at the consumer %d; "+
		"longest pause in rings %s, ending %s after the fault (the fault's action took %s); worst lateness of clocks due in the 10 s after it %s; "+
		"duplicates %d (re-published with attempt ≥ 2: %d, broker redeliveries %d), same message_id; ring attempts by result: %s; 5xx creates found committed on retry %d; lateness p50 %s p99 %s max %s; /readyz %s",
		what, len(r.acked), haClocks, strings.Join(codes, " "), missing,
		pause.Round(time.Millisecond), resume.Round(time.Millisecond), r.faultTook.Round(time.Millisecond), worst.Round(time.Millisecond),
		j.dups, republished, j.redeliver, strings.Join(attempts, ", "), len(r.committedAfter5xx), j.pct(.5).Round(time.Millisecond), j.pct(.99).Round(time.Millisecond), j.pct(1).Round(time.Millisecond),
		ready)
	t.Log(line)
	w.figures = append(w.figures, "- "+line)
}

// ringResults reads clockd_rings_total by result from /metrics.
func ringResults(t *testing.T, d *testenv.Clockd) map[string]float64 {
	t.Helper()
	resp, err := http.Get(d.URL + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), `clockd_rings_total{result="`)
		if !ok {
			continue
		}
		label, value, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[label] = v
		}
	}
	return out
}
