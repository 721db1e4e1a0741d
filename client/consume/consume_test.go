package consume_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/client"
	"github.com/clockd/clockd/client/consume"
	"github.com/clockd/clockd/internal/testenv"
)

// received records what a handler saw.
type received struct {
	mu    sync.Mutex
	rings []consume.Ring
	byID  map[string]int
	ch    chan struct{}
}

func newReceived() *received {
	return &received{byID: map[string]int{}, ch: make(chan struct{}, 1)}
}

func (r *received) add(g consume.Ring) {
	r.mu.Lock()
	r.rings = append(r.rings, g)
	r.byID[g.MessageID]++
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

func (r *received) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

func (r *received) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.rings)
}

// waitDistinct waits until n distinct message ids arrived.
func (r *received) waitDistinct(n int, limit time.Duration) bool {
	deadline := time.After(limit)
	for r.distinct() < n {
		select {
		case <-r.ch:
		case <-deadline:
			return false
		}
	}
	return true
}

// run starts c until the test ends.
func run(t *testing.T, c *consume.Consumer, h consume.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return 30s after its context ended")
		}
	})
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// TestConsumeAcrossBrokerRestart: clockd rings 120 clocks over about 8
// seconds to a private RabbitMQ node; the consumer (given a dead URL first,
// so it has to move on to the next) receives them while the node's
// application is stopped and started again in the middle, with rings
// delivered and not yet acknowledged at that moment. Every clock arrives
// (0 lost), the ones in flight are redelivered, and the de-duplication
// hook keeps any from being handled twice.
func TestConsumeAcrossBrokerRestart(t *testing.T) {
	t.Parallel()
	node := testenv.StartRabbitNode(t)
	exchange := "clock.ring"
	d := testenv.StartClockd(t, map[string]string{
		"CLOCKD_MYSQL_DSN": testenv.MySQLDSN(t), "CLOCKD_AMQP_URL": node.URL(), "CLOCKD_EXCHANGE": exchange,
		"CLOCKD_SHARDS": "4", "CLOCKD_LOG_LEVEL": "warn", "CLOCKD_RETRY_MIN": "100ms", "CLOCKD_RETRY_MAX": "1s",
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	q := consume.Queue{Application: "order", Exchange: exchange, Quorum: false}
	if _, err := consume.Bind(ctx, node.URL(), q); err != nil {
		t.Fatal(err)
	}
	dead := "amqp://guest:guest@" + testenv.FreeAddr(t) + "/"
	got := newReceived()
	c, err := consume.New(consume.Options{URL: dead + "," + node.URL(), Queue: q, Bind: true, Prefetch: 16,
		Workers: 4, Dedup: consume.NewMemoryDedup(1000), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// While gate is set, handlers wait on it: rings pile up delivered but
	// not acknowledged, as they would behind a slow handler, when the
	// broker stops.
	var gate atomic.Pointer[chan struct{}]
	run(t, c, func(ctx context.Context, r consume.Ring) error {
		if g := gate.Load(); g != nil {
			<-*g
		}
		got.add(r)
		return nil
	})

	cl, err := client.New(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	const n = 120
	start := time.Now().Add(time.Second)
	var batch []client.NewClock
	for i := range n {
		batch = append(batch, client.NewClock{Application: "order", BusinessID: fmt.Sprintf("o-%03d", i),
			Payload: strconv.Itoa(i), RingAt: start.Add(time.Duration(i) * 8 * time.Second / n)})
	}
	res, err := cl.CreateBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("create %d: %v", i, r.Err)
		}
		want[strconv.FormatInt(r.Clock.ID, 10)] = batch[i].BusinessID
	}
	if !got.waitDistinct(n/4, 60*time.Second) {
		t.Fatalf("only %d rings before the restart", got.distinct())
	}
	g := make(chan struct{})
	gate.Store(&g)
	time.Sleep(1500 * time.Millisecond) // rings keep coming: in flight, unacknowledged
	before := got.distinct()
	node.StopApp()
	close(g) // the held handlers finish; their acks go nowhere
	gate.Store(nil)
	time.Sleep(time.Second)
	node.StartApp()
	if !got.waitDistinct(n, 120*time.Second) {
		t.Fatalf("%d of %d clocks received after the broker restart: lost", got.distinct(), n)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	for id, bid := range want {
		if got.byID[id] == 0 {
			t.Errorf("clock %s (%s) lost", id, bid)
		}
	}
	for _, r := range got.rings {
		if want[r.MessageID] != r.BusinessID || r.Application != "order" || r.ClockID <= 0 ||
			strconv.FormatInt(r.ClockID, 10) != r.MessageID || r.RingAt.IsZero() || r.Attempt < 1 {
			t.Errorf("ring %+v", r)
		}
		if r.ReceivedAt.Before(r.RingAt) {
			t.Errorf("ring %s received %v before its time %v", r.MessageID, r.ReceivedAt, r.RingAt)
		}
	}
	dups := len(got.rings) - len(got.byID)
	redelivered := 0
	for _, r := range got.rings {
		if r.Redelivered {
			redelivered++
		}
	}
	t.Logf("%d clocks, %d handled before the restart, %d redelivered by the broker, %d handled twice (dedup on), 0 lost",
		n, before, redelivered, dups)
	if redelivered == 0 {
		t.Error("no ring was redelivered: none was in flight at the restart, the test did not test it")
	}
	if dups != 0 {
		t.Errorf("%d rings handled twice despite the dedup hook", dups)
	}
}

// sharedQueue makes a unique application, exchange and queue names on the
// shared broker, removed when the test ends.
func sharedQueue(t *testing.T) (string, consume.Queue) {
	t.Helper()
	url := testenv.AMQPURL(t)
	q := consume.Queue{Application: testenv.Name("app-"), Exchange: testenv.Name("clock.ring.test-")}
	testenv.DeleteExchangeOnCleanup(t, url, q.Exchange)
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, name := range []string{q.Application, q.Application + ".retry", q.Application + ".dead"} {
			_, _ = ch.QueueDelete(name, false, false, false)
		}
	})
	return url, q
}

// publish sends a ring as clockd would.
func publish(t *testing.T, url string, q consume.Queue, id, businessID string, extra amqp.Table) {
	t.Helper()
	testenv.WithChannel(t, url, func(ch *amqp.Channel) {
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		h := amqp.Table{"x-clock-application": q.Application, "x-clock-business-id": businessID,
			"x-clock-ring-at": time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano), "x-clock-attempt": int32(1)}
		for k, v := range extra {
			h[k] = v
		}
		dc, err := ch.PublishWithDeferredConfirm(q.Exchange, q.Application, true, false, amqp.Publishing{
			ContentType: "text/plain", DeliveryMode: amqp.Persistent, MessageId: id, Timestamp: time.Now(), Headers: h,
			Body: []byte("payload of " + businessID)})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish: %v", err)
		}
	})
}

// TestConsumeRetryDedupDeadLetter: a failing handler's ring comes back
// after RetryDelay; a ring failing past MaxRetries lands in the dead queue
// with the error; a message_id seen before is not handled again; the
// occurrence header of a recurring clock is read.
func TestConsumeRetryDedupDeadLetter(t *testing.T) {
	t.Parallel()
	url, q := sharedQueue(t)
	if _, err := consume.Bind(context.Background(), url, q); err != nil {
		t.Fatal(err)
	}
	got := newReceived()
	var mu sync.Mutex
	fails := map[string]int{"flaky": 2, "broken": 100}
	c, err := consume.New(consume.Options{URL: url, Queue: q, RetryDelay: 300 * time.Millisecond, MaxRetries: 3,
		Dedup: consume.NewMemoryDedup(10), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c, func(ctx context.Context, r consume.Ring) error {
		got.add(r)
		mu.Lock()
		defer mu.Unlock()
		if fails[r.BusinessID] > 0 {
			fails[r.BusinessID]--
			if r.BusinessID == "broken" && fails[r.BusinessID] == 98 {
				panic("handler bug")
			}
			return errors.New("downstream unavailable")
		}
		return nil
	})
	occ := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	publish(t, url, q, "7", "plain", nil)
	publish(t, url, q, "7", "plain", nil) // a repeat: same message_id
	publish(t, url, q, "8", "flaky", nil)
	publish(t, url, q, "9", "broken", nil)
	publish(t, url, q, "10:"+strconv.FormatInt(occ.UnixMilli(), 10), "recurring",
		amqp.Table{"x-clock-occurrence": occ.Format(time.RFC3339Nano)})

	// broken: the first try and 3 retries, then the dead queue.
	deadline := time.Now().Add(30 * time.Second)
	for {
		got.mu.Lock()
		n7, n8, n9 := got.byID["7"], got.byID["8"], got.byID["9"]
		got.mu.Unlock()
		if n8 == 3 && n9 == 4 && n7 >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("handled 7:%d 8:%d 9:%d times, want 1, 3 (two failures), 4 (1+3 retries)", n7, n8, n9)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // time for a wrong extra delivery to show
	got.mu.Lock()
	if got.byID["7"] != 1 {
		t.Errorf("message 7 handled %d times, want once (dedup)", got.byID["7"])
	}
	if got.byID["8"] != 3 || got.byID["9"] != 4 {
		t.Errorf("flaky handled %d times (want 3), broken %d (want 4)", got.byID["8"], got.byID["9"])
	}
	var retries []int
	for _, r := range got.rings {
		switch r.BusinessID {
		case "broken":
			retries = append(retries, r.Retries)
		case "recurring":
			if !r.OccurrenceAt.Equal(occ) || r.ClockID != 10 || r.Lateness < time.Hour {
				t.Errorf("recurring ring: occurrence %v id %d lateness %v", r.OccurrenceAt, r.ClockID, r.Lateness)
			}
		case "plain":
			if string(r.Payload) != "payload of plain" || r.ContentType != "text/plain" || r.Attempt != 1 ||
				r.Lateness < time.Second || r.Lateness > time.Minute || r.PublishedAt.IsZero() {
				t.Errorf("plain ring %+v", r)
			}
		}
	}
	got.mu.Unlock()
	if fmt.Sprint(retries) != "[0 1 2 3]" {
		t.Errorf("broken ring's Retries over its deliveries %v, want [0 1 2 3]", retries)
	}

	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	m, ok, err := ch.Get(c.DeadQueue(), true)
	if err != nil || !ok {
		t.Fatalf("dead queue: ok %v err %v", ok, err)
	}
	if m.MessageId != "9" || string(m.Body) != "payload of broken" || m.Headers[consume.HeaderError] != "downstream unavailable" ||
		m.Headers["x-clock-business-id"] != "broken" {
		t.Errorf("dead letter %s %q headers %v", m.MessageId, m.Body, m.Headers)
	}
	if _, ok, _ := ch.Get(c.DeadQueue(), true); ok {
		t.Error("more than one message in the dead queue")
	}
}

// TestConsumeRetryQuorum: with a quorum queue (a RabbitMQ cluster) the
// delay queue is a quorum queue too, and a failed ring still comes back
// after RetryDelay.
func TestConsumeRetryQuorum(t *testing.T) {
	t.Parallel()
	url, q := sharedQueue(t)
	q.Quorum = true
	got := newReceived()
	var fails sync.Map
	c, err := consume.New(consume.Options{URL: url, Queue: q, Bind: true, RetryDelay: 200 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c, func(ctx context.Context, r consume.Ring) error {
		got.add(r)
		if _, failed := fails.LoadOrStore(r.MessageID, true); !failed {
			return errors.New("first try fails")
		}
		return nil
	})
	waitQueueBound(t, url, q)
	publish(t, url, q, "1", "q-1", nil)
	deadline := time.Now().Add(30 * time.Second)
	for got.total() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries of a ring whose first try failed, want 2 (the retry from the quorum delay queue)", got.total())
		}
		time.Sleep(50 * time.Millisecond)
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	if r := got.rings[1]; r.Retries != 1 || r.BusinessID != "q-1" {
		t.Errorf("retried ring: retries %d business id %q", r.Retries, r.BusinessID)
	}
}

// waitQueueBound waits until the consumer declared its queue.
func waitQueueBound(t *testing.T, url string, q consume.Queue) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err == nil {
			_, err = ch.QueueDeclarePassive(q.Application+".retry", true, false, false, false, nil)
		}
		conn.Close()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queues not declared within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConsumeAfterQueueDeleted: when the broker cancels the consumer (its
// queue deleted under it), the consumer reconnects, binds the queue again
// and goes on.
func TestConsumeAfterQueueDeleted(t *testing.T) {
	t.Parallel()
	url, q := sharedQueue(t)
	got := newReceived()
	c, err := consume.New(consume.Options{URL: url, Queue: q, Bind: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c, func(ctx context.Context, r consume.Ring) error { got.add(r); return nil })
	waitQueueBound(t, url, q)
	publish(t, url, q, "1", "before", nil)
	if !got.waitDistinct(1, 30*time.Second) {
		t.Fatal("no ring before the delete")
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDelete(q.Application, false, false, false); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	// Published until the queue is back and takes it (mandatory: a ring
	// nobody's queue takes is returned, as clockd would retry it).
	deadline := time.Now().Add(30 * time.Second)
	for got.distinct() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no ring after the queue was deleted: the consumer did not come back")
		}
		publish(t, url, q, "2", "after", nil)
		got.waitDistinct(2, time.Second)
	}
}

func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]consume.Options{
		"no url":         {Queue: consume.Queue{Application: "a"}},
		"bad url":        {URL: "http://x", Queue: consume.Queue{Application: "a"}},
		"no application": {URL: "amqp://127.0.0.1/"},
	} {
		if _, err := consume.New(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c, err := consume.New(consume.Options{URL: "amqp://127.0.0.1/", Queue: consume.Queue{Application: "a"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(context.Background(), nil); err == nil {
		t.Error("Run with a nil handler")
	}
}

func TestMemoryDedupForgetsOldest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := consume.NewMemoryDedup(2)
	for _, id := range []string{"a", "b", "a", "c"} {
		if err := m.Done(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]bool{"a": false, "b": true, "c": true, "d": false} {
		if got, _ := m.Seen(ctx, id); got != want {
			t.Errorf("Seen(%s) = %v, want %v", id, got, want)
		}
	}
}

// A broker URL that does not parse is refused without echoing it: net/url
// quotes it whole, password included.
func TestNewHidesPasswords(t *testing.T) {
	_, err := consume.New(consume.Options{URL: "amqp://u:secretpw@127.0.0.1:port/", Queue: consume.Queue{Application: "a"}})
	if err == nil || strings.Contains(err.Error(), "secretpw") {
		t.Fatalf("New: %v; want an error without the password", err)
	}
}

// Run whose ctx ends while handlers are under way lets them finish and
// acknowledge their rings before it closes the connection: a ring handled
// and then not acknowledged would come back to the next consumer and be
// handled twice (seen as "ack failed; the ring comes back" when a program
// stopped after its n-th ring). The rings not begun are left to the next
// consumer.
func TestStopLetsHandlersUnderWayAcknowledge(t *testing.T) {
	t.Parallel()
	url, q := sharedQueue(t)
	if _, err := consume.Bind(context.Background(), url, q); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		publish(t, url, q, strconv.Itoa(i+1), "b-"+strconv.Itoa(i+1), nil)
	}
	c, err := consume.New(consume.Options{URL: url, Queue: q, Workers: 4, Prefetch: 4, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	var started, handled atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(context.Context, consume.Ring) error {
			if started.Add(1) == 4 {
				cancel() // the program's last ring: stop
				close(release)
			}
			<-release // the others are still being handled when it stops
			time.Sleep(50 * time.Millisecond)
			handled.Add(1)
			return nil
		})
	}()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if n := handled.Load(); n != 4 {
		t.Fatalf("%d rings handled, want 4", n)
	}
	// every ring handled was acknowledged: none comes back
	again := newReceived()
	c2, err := consume.New(consume.Options{URL: url, Queue: q, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c2, func(ctx context.Context, r consume.Ring) error { again.add(r); return nil })
	if again.waitDistinct(1, 2*time.Second) {
		t.Errorf("a ring handled before the stop came back: %d", again.total())
	}
}

// Two deliveries of one message_id (clockd rang it again: a takeover, a
// lost confirm) reaching two workers at once: the second waits for the
// first and is skipped by Dedup, instead of running the handler again
// before the first recorded it as done.
func TestDuplicateDuringItsHandlingIsHandledOnce(t *testing.T) {
	t.Parallel()
	url, q := sharedQueue(t)
	if _, err := consume.Bind(context.Background(), url, q); err != nil {
		t.Fatal(err)
	}
	got := newReceived()
	c, err := consume.New(consume.Options{URL: url, Queue: q, Workers: 4, Dedup: consume.NewMemoryDedup(10), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	run(t, c, func(ctx context.Context, r consume.Ring) error {
		calls.Add(1)
		time.Sleep(300 * time.Millisecond) // both deliveries arrive while it runs
		got.add(r)
		return nil
	})
	publish(t, url, q, "42", "twice", nil)
	publish(t, url, q, "42", "twice", nil)
	publish(t, url, q, "43", "other", nil)
	if !got.waitDistinct(2, 30*time.Second) {
		t.Fatal("the rings were not handled")
	}
	time.Sleep(time.Second)
	if n := calls.Load(); n != 2 {
		t.Errorf("the handler ran %d times for two clocks, one delivered twice: want 2", n)
	}
}

// TestFailedMoveReconnectsWithoutSpinning: when a failed ring cannot be
// moved to the delay queue (here the delay queue was deleted behind the
// consumer, so the mandatory copy is returned), the ring is neither
// acknowledged nor requeued at once (a failing handler would run in a
// tight loop): the session ends, Run reconnects and declares the delay
// queue again, and the ring, delivered again, is moved there.
func TestFailedMoveReconnectsWithoutSpinning(t *testing.T) {
	t.Parallel()
	url, q := sharedQueue(t)
	var calls atomic.Int32
	got := newReceived()
	c, err := consume.New(consume.Options{URL: url, Queue: q, Bind: true, RetryDelay: 5 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c, func(ctx context.Context, r consume.Ring) error {
		calls.Add(1)
		got.add(r)
		return errors.New("downstream unavailable")
	})
	waitQueueBound(t, url, q)
	testenv.WithChannel(t, url, func(ch *amqp.Channel) {
		if _, err := ch.QueueDelete(c.RetryQueue(), false, false, false); err != nil {
			t.Fatal(err)
		}
	})
	publish(t, url, q, "5", "fails", nil)
	time.Sleep(2 * time.Second)
	// Once (its move fails), once more after the reconnect (moved), then
	// not before RetryDelay.
	if n := calls.Load(); n < 2 || n > 3 {
		t.Fatalf("the failing handler ran %d times in 2 s with RetryDelay 5s; want 2 (the move failed, "+
			"then after the reconnect it was moved)", n)
	}
	got.mu.Lock()
	second := got.rings[1]
	got.mu.Unlock()
	if !second.Redelivered || second.Retries != 0 {
		t.Errorf("the ring after the reconnect: redelivered %v, retries %d; want the same ring delivered again",
			second.Redelivered, second.Retries)
	}
	testenv.WithChannel(t, url, func(ch *amqp.Channel) {
		rq, err := ch.QueueDeclarePassive(c.RetryQueue(), true, false, false, false, nil)
		if err != nil {
			t.Fatalf("the delay queue was not declared again: %v", err)
		}
		if rq.Messages != 1 {
			t.Errorf("the delay queue holds %d messages, want the ring", rq.Messages)
		}
	})
}
