package rabbit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/testenv"
)

// fixture is one test's exchange on the test broker, with an admin channel.
type fixture struct {
	url      string
	exchange string
	ch       *amqp.Channel
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureAt(t, testenv.AMQPURL(t))
}

// newFixtureAt is newFixture on the broker at url (a private node).
func newFixtureAt(t testing.TB, url string) *fixture {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{url: url, exchange: testenv.Name("clockd_test_x_"), ch: ch}
	if err := ch.ExchangeDeclare(f.exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer conn.Close()
		if ch.IsClosed() {
			var err error
			if ch, err = conn.Channel(); err != nil {
				t.Logf("cleanup: %v", err)
				return
			}
		}
		if err := ch.ExchangeDelete(f.exchange, false, false); err != nil {
			t.Logf("delete exchange %s: %v", f.exchange, err)
		}
	})
	return f
}

// bind declares a queue bound with key app and deletes it at cleanup.
func (f *fixture) bind(t testing.TB, app string) string {
	t.Helper()
	return f.bindQueue(t, app, false, nil)
}

func (f *fixture) bindQueue(t testing.TB, app string, durable bool, args amqp.Table) string {
	t.Helper()
	q := testenv.Name("clockd_test_q_")
	if _, err := f.ch.QueueDeclare(q, durable, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if err := f.ch.QueueBind(q, app, f.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := f.ch.QueueDelete(q, false, false, false); err != nil {
			t.Logf("delete queue %s: %v", q, err)
		}
	})
	return q
}

// consume returns the messages of queue q until n arrived or nothing came
// for idle.
func (f *fixture) consume(t testing.TB, q string, n int, idle time.Duration) []amqp.Delivery {
	t.Helper()
	d, err := f.ch.Consume(q, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []amqp.Delivery
	for len(got) < n {
		select {
		case m := <-d:
			got = append(got, m)
		case <-time.After(idle):
			return got
		}
	}
	return got
}

type running struct {
	p      *Publisher
	cancel context.CancelFunc
	done   chan error
}

// start creates a publisher on f's exchange, runs it and waits until ready.
func start(t testing.TB, f *fixture, mod func(*Config)) *running {
	t.Helper()
	cfg := Config{URL: f.url, Exchange: f.exchange, ConnectionName: testenv.Name("clockd_test_"),
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{p: p, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := p.WaitReady(wctx); err != nil {
		t.Fatalf("WaitReady: %v (Ready: %v)", err, p.Ready())
	}
	return r
}

func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		close(r.done)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func msg(id int64, app string) Message {
	return Message{
		ID: id, Application: app, BusinessID: fmt.Sprintf("biz-%d", id),
		RingAt:  time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC),
		Attempt: 1, ContentType: "text/plain", Body: fmt.Appendf(nil, "body %d", id),
	}
}

func publish(t testing.TB, p *Publisher, msgs ...Message) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := p.PublishBatch(ctx, msgs)
	if len(errs) != len(msgs) {
		t.Fatalf("%d errors for %d messages", len(errs), len(msgs))
	}
	return errs
}

func TestNewValidates(t *testing.T) {
	ok := Config{URL: "amqp://guest:guest@127.0.0.1:5672/", Exchange: "clock.ring"}
	tests := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		{"defaults", func(*Config) {}, true},
		{"no url", func(c *Config) { c.URL = "" }, false},
		{"bad url", func(c *Config) { c.URL = "http://x" }, false},
		{"url list", func(c *Config) { c.URL = "amqp://a:5672/, amqp://b:5672/,amqps://c/" }, true},
		{"url list with a bad element", func(c *Config) { c.URL = "amqp://a:5672/,http://b" }, false},
		{"url list with an empty element", func(c *Config) { c.URL = "amqp://a:5672/,,amqp://c/" }, false},
		{"no exchange", func(c *Config) { c.Exchange = "" }, false},
		{"negative timeout", func(c *Config) { c.ConfirmTimeout = -1 }, false},
		{"min above max", func(c *Config) { c.ReconnectMin, c.ReconnectMax = time.Second, time.Millisecond }, false},
		{"too many channels", func(c *Config) { c.Channels = 1000 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.mod(&cfg)
			p, err := New(cfg)
			if (err == nil) != tt.ok {
				t.Fatalf("New: %v, want ok=%v", err, tt.ok)
			}
			if err == nil && (p.cfg.ConfirmTimeout != 5*time.Second || p.cfg.ReconnectMin != 100*time.Millisecond || p.cfg.ReconnectMax != 5*time.Second) {
				t.Errorf("defaults not applied: %+v", p.cfg)
			}
		})
	}
}

func TestNewRegistersMetricsOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := Config{URL: "amqp://127.0.0.1/", Exchange: "x", Registerer: reg}
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); err == nil {
		t.Fatal("second New on the same registry: want an error")
	}
}

func TestReconnectBackoff(t *testing.T) {
	p, err := New(Config{URL: "amqp://127.0.0.1/", Exchange: "x", ReconnectMin: 100 * time.Millisecond, ReconnectMax: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for n := range 12 {
		d := p.retry.Delay(n)
		want := min(100*time.Millisecond<<n, 5*time.Second)
		if d < want/2 || d > want {
			t.Errorf("reconnect delay %d = %s, want in [%s, %s]", n, d, want/2, want)
		}
	}
}

func TestEntryQueue(t *testing.T) {
	var r entryQueue
	next, want := int64(0), int64(0)
	for round := range 50 {
		for range round % 7 * 20 {
			r.push(entry{id: next})
			next++
		}
		for range round % 5 * 20 {
			if r.len() == 0 {
				break
			}
			if e := r.pop(); e.id != want {
				t.Fatalf("pop %d, want %d", e.id, want)
			}
			want++
		}
	}
	if int64(r.len()) != next-want {
		t.Fatalf("len %d, want %d", r.len(), next-want)
	}
}

func TestPublishDeliversPropertiesAndHeaders(t *testing.T) {
	f := newFixture(t)
	q := f.bind(t, "billing")
	now := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	r := start(t, f, func(c *Config) { c.Now = func() time.Time { return now } })

	body := []byte{0, 1, 2, 0xff, '{', '}'}
	m := Message{
		ID: 9007199254740993, Application: "billing", BusinessID: "invoice-42",
		RingAt:  time.Date(2030, 1, 2, 4, 4, 5, 6_789_000, time.FixedZone("CET", 3600)),
		Attempt: 3, ContentType: "application/octet-stream", Body: body,
	}
	if errs := publish(t, r.p, m); errs[0] != nil {
		t.Fatalf("PublishBatch: %v", errs[0])
	}
	got := f.consume(t, q, 1, 5*time.Second)
	if len(got) != 1 {
		t.Fatalf("got %d messages, want 1", len(got))
	}
	d := got[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"exchange", d.Exchange, f.exchange},
		{"routing key", d.RoutingKey, "billing"},
		{"delivery mode", d.DeliveryMode, uint8(2)},
		{"message id", d.MessageId, "9007199254740993"},
		{"timestamp", d.Timestamp.UTC(), now},
		{"content type", d.ContentType, "application/octet-stream"},
		{HeaderApplication, d.Headers[HeaderApplication], "billing"},
		{HeaderBusinessID, d.Headers[HeaderBusinessID], "invoice-42"},
		{HeaderRingAt, d.Headers[HeaderRingAt], "2030-01-02T03:04:05.006Z"},
		{HeaderAttempt, d.Headers[HeaderAttempt], int32(3)},
		{"header count", len(d.Headers), 4},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
	if !bytes.Equal(d.Body, body) {
		t.Errorf("body = %q, want %q", d.Body, body)
	}
}

func TestUnroutable(t *testing.T) {
	f := newFixture(t)
	r := start(t, f, nil)
	errs := publish(t, r.p, msg(1, "nobody"))
	if !errors.Is(errs[0], ErrUnroutable) {
		t.Fatalf("err = %v, want ErrUnroutable", errs[0])
	}
}

func TestMixedBatch(t *testing.T) {
	f := newFixture(t)
	q := f.bind(t, "bound")
	reg := prometheus.NewRegistry()
	r := start(t, f, func(c *Config) { c.Registerer = reg; c.Channels = 1 })

	var msgs []Message
	wantOK := map[string]bool{}
	for i := range 300 {
		app := "bound"
		if i%3 == 1 || (i > 100 && i < 120) {
			app = "unbound"
		} else {
			wantOK[fmt.Sprint(i)] = true
		}
		msgs = append(msgs, msg(int64(i), app))
	}
	errs := publish(t, r.p, msgs...)
	for i, err := range errs {
		switch {
		case msgs[i].Application == "bound" && err != nil:
			t.Errorf("message %d (routable): %v", i, err)
		case msgs[i].Application == "unbound" && !errors.Is(err, ErrUnroutable):
			t.Errorf("message %d (unroutable): %v, want ErrUnroutable", i, err)
		}
	}
	got := f.consume(t, q, len(wantOK), 5*time.Second)
	if len(got) != len(wantOK) {
		t.Fatalf("queue has %d messages, want %d", len(got), len(wantOK))
	}
	for _, d := range got {
		if !wantOK[d.MessageId] {
			t.Errorf("unexpected message %s in queue", d.MessageId)
		}
	}
	if v := testenv.Metric(t, reg, "clockd_rabbit_publishes_total", "result", "unroutable"); v != float64(len(msgs)-len(wantOK)) {
		t.Errorf("unroutable counter = %v, want %d", v, len(msgs)-len(wantOK))
	}
	if v := testenv.Metric(t, reg, "clockd_rabbit_publishes_total", "result", "ok"); v != float64(len(wantOK)) {
		t.Errorf("ok counter = %v, want %d", v, len(wantOK))
	}
}

// PublishBatchTimed tells when each message's own confirm arrived: within
// the call, ascending in delivery order, zero for the unconfirmed.
func TestPublishBatchTimed(t *testing.T) {
	f := newFixture(t)
	f.bind(t, "bound")
	r := start(t, f, func(c *Config) { c.Channels = 1 })
	var msgs []Message
	for i := range 200 {
		app := "bound"
		if i%10 == 9 {
			app = "unbound"
		}
		msgs = append(msgs, msg(int64(i), app))
	}
	before := time.Now()
	errs, at := r.p.PublishBatchTimed(context.Background(), msgs)
	after := time.Now()
	var last time.Time
	for i := range msgs {
		switch {
		case msgs[i].Application == "unbound":
			if !errors.Is(errs[i], ErrUnroutable) || !at[i].IsZero() {
				t.Errorf("message %d (unroutable): %v at %v, want ErrUnroutable and no confirm time", i, errs[i], at[i])
			}
		case errs[i] != nil || at[i].Before(before) || at[i].After(after):
			t.Errorf("message %d: %v confirmed at %v, want within [%v, %v]", i, errs[i], at[i], before, after)
		case at[i].Before(last):
			t.Errorf("message %d confirmed at %v, before the one published ahead of it (%v)", i, at[i], last)
		default:
			last = at[i]
		}
	}
}

// A returned copy of an id never lets another in-flight copy of that id
// (same routing key) count as rung.
func TestDuplicateIDInFlight(t *testing.T) {
	f := newFixture(t)
	f.bind(t, "bound")
	r := start(t, f, func(c *Config) { c.Channels = 1 })
	msgs := []Message{msg(7, "bound"), msg(7, "unbound"), msg(8, "unbound"), msg(8, "unbound"), msg(9, "bound")}
	errs := publish(t, r.p, msgs...)
	if errs[0] != nil || errs[4] != nil {
		t.Errorf("routable: %v, %v", errs[0], errs[4])
	}
	for _, i := range []int{1, 2, 3} {
		if !errors.Is(errs[i], ErrUnroutable) {
			t.Errorf("message %d: %v, want ErrUnroutable", i, errs[i])
		}
	}
}

func TestPublishWhileDisconnected(t *testing.T) {
	p, err := New(Config{URL: "amqp://guest:guest@127.0.0.1:1/", Exchange: "x", ReconnectMin: 10 * time.Millisecond, ReconnectMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		if p.Ready() == nil {
			t.Error("Ready() = nil while disconnected")
		}
		begin := time.Now()
		errs := p.PublishBatch(context.Background(), []Message{msg(1, "a"), msg(2, "a"), msg(3, "b")})
		if d := time.Since(begin); d > 100*time.Millisecond {
			t.Errorf("PublishBatch took %s while disconnected", d)
		}
		for i, err := range errs {
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("message %d: %v, want ErrUnavailable", i, err)
			}
		}
	}
	check() // Run not started

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	time.Sleep(100 * time.Millisecond)
	check() // Run retrying against a closed port
	wctx, wcancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer wcancel()
	if err := p.WaitReady(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitReady = %v, want deadline exceeded", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestCanceledContext(t *testing.T) {
	f := newFixture(t)
	f.bind(t, "a")
	r := start(t, f, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, err := range r.p.PublishBatch(ctx, []Message{msg(1, "a")}) {
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want ErrUnavailable and context.Canceled", err)
		}
	}
}

func TestReconnectAfterBrokerClosesConnection(t *testing.T) {
	f := newFixture(t)
	q := f.bind(t, "app")
	reg := prometheus.NewRegistry()
	r := start(t, f, func(c *Config) { c.Registerer = reg })
	name := r.p.cfg.ConnectionName

	var (
		mu       sync.Mutex
		okIDs    = map[int64]bool{}
		failed   int
		lastFail time.Time
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			id := int64(g) << 40
			for {
				select {
				case <-stop:
					return
				default:
				}
				batch := make([]Message, 50)
				for i := range batch {
					id++
					batch[i] = msg(id, "app")
				}
				begin := time.Now()
				errs := publish(t, r.p, batch...)
				took := time.Since(begin)
				mu.Lock()
				for i, err := range errs {
					switch {
					case err == nil:
						okIDs[batch[i].ID] = true
					case errors.Is(err, ErrUnavailable):
						failed++
						lastFail = time.Now()
						if took > 2*time.Second {
							t.Errorf("failure after %s: not prompt", took)
						}
					default:
						t.Errorf("message %d: %v", batch[i].ID, err)
					}
				}
				mu.Unlock()
				if errors.Is(errs[0], ErrUnavailable) {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("first confirms", func() bool { mu.Lock(); defer mu.Unlock(); return len(okIDs) > 500 })
	testenv.CloseConnectionsNamed(t, name)
	waitFor("failures", func() bool { mu.Lock(); defer mu.Unlock(); return failed > 0 })
	var okAtRecovery int
	waitFor("reconnect", func() bool {
		mu.Lock()
		defer mu.Unlock()
		okAtRecovery = len(okIDs)
		return r.p.Ready() == nil && time.Since(lastFail) > 200*time.Millisecond
	})
	waitFor("confirms after reconnect", func() bool { mu.Lock(); defer mu.Unlock(); return len(okIDs) > okAtRecovery+500 })
	close(stop)
	wg.Wait()

	got := f.consume(t, q, len(okIDs)+failed, 2*time.Second)
	inQueue := map[int64]bool{}
	for _, d := range got {
		var id int64
		fmt.Sscan(d.MessageId, &id)
		inQueue[id] = true
	}
	lost := 0
	for id := range okIDs {
		if !inQueue[id] {
			lost++
		}
	}
	t.Logf("confirmed %d, failed %d, in queue %d", len(okIDs), failed, len(got))
	if lost > 0 {
		t.Errorf("%d confirmed messages are not in the queue", lost)
	}
	if v := testenv.Metric(t, reg, "clockd_rabbit_reconnects_total"); v < 1 {
		t.Errorf("reconnects counter = %v, want >= 1", v)
	}
	if v := testenv.Metric(t, reg, "clockd_rabbit_connected"); v != 1 {
		t.Errorf("connected gauge = %v, want 1", v)
	}
}

// A TCP connection cut by the client side (network failure) fails in-flight
// messages promptly, not after the confirm timeout.
func TestConnectionCutFailsInFlightPromptly(t *testing.T) {
	f := newFixture(t)
	f.bind(t, "app")
	conns := make(chan net.Conn, 10)
	p, err := New(Config{URL: f.url, Exchange: f.exchange, ConfirmTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.testConn = func(c net.Conn) { conns <- c }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := p.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw := <-conns
	batch := make([]Message, 5000)
	for i := range batch {
		batch[i] = msg(int64(i), "app")
	}
	go func() {
		time.Sleep(5 * time.Millisecond)
		raw.Close()
	}()
	begin := time.Now()
	errs := publish(t, p, batch...)
	took := time.Since(begin)
	failed := 0
	for _, err := range errs {
		if err != nil {
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("err = %v, want nil or ErrUnavailable", err)
			}
			failed++
		}
	}
	t.Logf("cut: %d of %d failed after %s", failed, len(batch), took)
	if took > 5*time.Second {
		t.Errorf("PublishBatch took %s after the cut", took)
	}
	// The batch can fail before the publisher has dropped the cut session,
	// so WaitReady alone may still see it: wait for the new connection.
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	select {
	case <-conns:
	case <-wctx.Done():
		t.Fatal("no new connection within 10s of the cut")
	}
	if err := p.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if errs := publish(t, p, msg(1, "app")); errs[0] != nil {
		t.Errorf("after reconnect: %v", errs[0])
	}
}

func TestConcurrentBatches(t *testing.T) {
	f := newFixture(t)
	q := f.bind(t, "app")
	r := start(t, f, nil)
	const goroutines, batches, size = 8, 10, 100
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for b := range batches {
				msgs := make([]Message, size)
				for i := range msgs {
					msgs[i] = msg(int64(g*batches*size+b*size+i), "app")
				}
				if b%2 == 1 {
					msgs[size/2].Application = "nobody"
				}
				for i, err := range publish(t, r.p, msgs...) {
					if msgs[i].Application == "nobody" {
						if !errors.Is(err, ErrUnroutable) {
							t.Errorf("unroutable message %d: %v", msgs[i].ID, err)
						}
					} else if err != nil {
						t.Errorf("message %d: %v", msgs[i].ID, err)
					}
				}
			}
		})
	}
	wg.Wait()
	want := goroutines*batches*size - goroutines*batches/2 // one unroutable in every other batch
	if got := f.consume(t, q, want, 5*time.Second); len(got) != want {
		t.Fatalf("queue has %d messages, want %d", len(got), want)
	}
}

func TestRunStopsEverything(t *testing.T) {
	f := newFixture(t)
	f.bind(t, "app")
	// Let goroutines of the fixture settle.
	time.Sleep(50 * time.Millisecond)
	base := runtime.NumGoroutine()

	p, err := New(Config{URL: f.url, Exchange: f.exchange, Channels: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	if err := p.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 5 {
				publish(t, p, msg(int64(i), "app"), msg(int64(i+100), "nobody"))
			}
		})
	}
	wg.Wait()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	if p.Ready() == nil {
		t.Error("Ready() = nil after Run returned")
	}
	if errs := p.PublishBatch(context.Background(), []Message{msg(1, "app")}); !errors.Is(errs[0], ErrUnavailable) {
		t.Errorf("publish after Run: %v", errs[0])
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before Run:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// BenchmarkPublishBatch reports confirmed msgs/s. The queue is durable (as
// an application's) or transient; BENCH_CONSUMER=1 adds a consumer in this
// process, otherwise the queue keeps only its newest 10000 messages.
func BenchmarkPublishBatch(b *testing.B) {
	for _, durable := range []bool{false, true} {
		for _, bc := range []struct{ channels, goroutines, size int }{
			{1, 1, 300}, {1, 4, 300}, {2, 4, 300}, {4, 4, 300}, {2, 8, 300},
		} {
			name := fmt.Sprintf("durable=%v/channels=%d/goroutines=%d/batch=%d", durable, bc.channels, bc.goroutines, bc.size)
			b.Run(name, func(b *testing.B) {
				benchPublish(b, durable, bc.channels, bc.goroutines, bc.size)
			})
		}
	}
}

func benchPublish(b *testing.B, durable bool, channels, goroutines, size int) {
	f := newFixture(b)
	q := f.bindQueue(b, "bench", durable, amqp.Table{"x-max-length": int32(10000)})
	r := start(b, f, func(c *Config) { c.Channels = channels })
	body := bytes.Repeat([]byte("x"), 200)
	batches := make([][]Message, goroutines)
	for g := range batches {
		batches[g] = make([]Message, size)
		for i := range batches[g] {
			m := msg(int64(g*size+i), "bench")
			m.Body = body
			batches[g][i] = m
		}
	}
	if os.Getenv("BENCH_CONSUMER") != "" {
		cctx, ccancel := context.WithCancel(context.Background())
		defer ccancel()
		d, err := f.ch.Consume(q, "", true, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				select {
				case <-d:
				case <-cctx.Done():
					return
				}
			}
		}()
	}
	b.ReportAllocs()
	b.ResetTimer()
	begin := time.Now()
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
	)
	per := (b.N + goroutines - 1) / goroutines
	for g := range goroutines {
		wg.Go(func() {
			for range per {
				for _, err := range r.p.PublishBatch(context.Background(), batches[g]) {
					if err != nil {
						failed.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Errorf("%d publishes failed", n)
	}
	msgs := float64(per * goroutines * size)
	b.ReportMetric(msgs/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(0, "ns/op")
}

// proxy forwards one TCP connection at a time to the broker; while paused it
// stops passing the broker's frames (confirms, returns) to the client.
type proxy struct {
	ln     net.Listener
	target string
	paused atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newProxy(t testing.TB, brokerURL string) (*proxy, string) {
	t.Helper()
	uri, err := amqp.ParseURI(brokerURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &proxy{ln: ln, target: net.JoinHostPort(uri.Host, fmt.Sprint(uri.Port))}
	px.wg.Go(px.accept)
	t.Cleanup(px.close)
	uri.Host, uri.Port = "127.0.0.1", ln.Addr().(*net.TCPAddr).Port
	return px, uri.String()
}

func (px *proxy) accept() {
	for {
		c, err := px.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", px.target)
		if err != nil {
			c.Close()
			continue
		}
		px.mu.Lock()
		px.conns = append(px.conns, c, b)
		px.mu.Unlock()
		px.wg.Go(func() { io.Copy(b, c); b.Close() })
		px.wg.Go(func() {
			defer c.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := b.Read(buf)
				for px.paused.Load() {
					time.Sleep(5 * time.Millisecond)
				}
				if n > 0 {
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}

// close cuts every connection, then lets the forwarders go: frames a
// paused forwarder holds are dropped with the connection, never delivered
// (unpausing first let confirms held back through in the moment before the
// cut, and TestURLListUnconfirmedFailWithTheNode saw its batch confirmed).
func (px *proxy) close() {
	px.ln.Close()
	px.mu.Lock()
	for _, c := range px.conns {
		c.Close()
	}
	px.mu.Unlock()
	px.paused.Store(false)
	px.wg.Wait()
}

func TestConfirmTimeout(t *testing.T) {
	f := newFixture(t)
	q := f.bind(t, "app")
	px, url := newProxy(t, f.url)
	reg := prometheus.NewRegistry()
	r := start(t, f, func(c *Config) {
		c.URL, c.ConfirmTimeout, c.Channels, c.Registerer = url, 300*time.Millisecond, 1, reg
	})
	if errs := publish(t, r.p, msg(1, "app")); errs[0] != nil {
		t.Fatalf("before pause: %v", errs[0])
	}
	px.paused.Store(true)
	begin := time.Now()
	errs := publish(t, r.p, msg(2, "app"), msg(3, "nobody"), msg(4, "app"))
	took := time.Since(begin)
	px.paused.Store(false)
	for i, err := range errs {
		if !errors.Is(err, ErrTimeout) {
			t.Errorf("message %d: %v, want ErrTimeout", i, err)
		}
	}
	if took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("timed out after %s, want about 300ms", took)
	}
	// A connection that left a confirm unanswered that long is given up
	// (a stalled link would take every later batch's attempt too): the
	// publisher reconnects, and the new connection's results are its own.
	deadline := time.Now().Add(10 * time.Second)
	for {
		errs = publish(t, r.p, msg(5, "nobody"), msg(6, "app"))
		if !errors.Is(errs[0], ErrUnavailable) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !errors.Is(errs[0], ErrUnroutable) || errs[1] != nil {
		t.Errorf("after pause: %v, %v; want ErrUnroutable, nil", errs[0], errs[1])
	}
	if v := testenv.Metric(t, reg, "clockd_rabbit_publishes_total", "result", "timeout"); v != 3 {
		t.Errorf("timeout counter = %v, want 3", v)
	}
	// 1 and 6; 2, 4 and repeats of 6 too if they left before the old
	// connection closed; never 3 or 5 (unroutable)
	seen := map[string]bool{}
	for _, m := range f.consume(t, q, 20, time.Second) {
		seen[m.MessageId] = true
	}
	if !seen["1"] || !seen["6"] || seen["3"] || seen["5"] || len(seen) > 4 {
		t.Errorf("the queue holds messages %v, want 1 and 6, perhaps 2 and 4", seen)
	}
}

// A channel error (here: the exchange deleted under the publisher) fails the
// batch with ErrUnavailable; Run reconnects and declares the exchange again.
func TestChannelErrorReconnects(t *testing.T) {
	f := newFixture(t)
	f.bind(t, "app")
	r := start(t, f, func(c *Config) { c.Channels = 1 })
	if err := f.ch.ExchangeDelete(f.exchange, false, false); err != nil {
		t.Fatal(err)
	}
	errs := publish(t, r.p, msg(1, "app"), msg(2, "app"))
	for i, err := range errs {
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("message %d: %v, want ErrUnavailable", i, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		errs := publish(t, r.p, msg(3, "app"))
		if errors.Is(errs[0], ErrUnroutable) { // exchange back, binding gone
			break
		}
		if !errors.Is(errs[0], ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("after channel error: %v", errs[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBlockedFailsFast(t *testing.T) {
	f := newFixture(t)
	f.bind(t, "app")
	r := start(t, f, nil)
	s := r.p.sess.Load()
	reason := "low on memory"
	s.blockReason.Store(&reason)
	if err := r.p.Ready(); err == nil || !strings.Contains(err.Error(), reason) {
		t.Errorf("Ready() = %v, want blocked", err)
	}
	if errs := publish(t, r.p, msg(1, "app")); !errors.Is(errs[0], ErrUnavailable) {
		t.Errorf("publish while blocked: %v", errs[0])
	}
	s.blockReason.Store(nil)
	if errs := publish(t, r.p, msg(1, "app")); errs[0] != nil {
		t.Errorf("publish after unblock: %v", errs[0])
	}
}

// A broker that accepts TCP but never answers does not hang Run: each
// attempt ends after DialTimeout and Run returns promptly on cancel.
func TestConnectTimeout(t *testing.T) {
	f := newFixture(t)
	px, url := newProxy(t, f.url)
	px.paused.Store(true)
	p, err := New(Config{URL: url, Exchange: f.exchange, DialTimeout: 200 * time.Millisecond, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	time.Sleep(700 * time.Millisecond)
	if err := p.Ready(); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("Ready() = %v, want a timeout", err)
	}
	begin := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if d := time.Since(begin); d > time.Second {
		t.Errorf("Run returned %s after cancel", d)
	}
}

// Cancelling Run in the middle of a handshake (RabbitMQ answers bad
// credentials after about 3s) leaves no goroutine behind.
func TestCancelDuringHandshakeNoLeak(t *testing.T) {
	url := testenv.AMQPURL(t)
	uri, err := amqp.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	uri.Password = "wrong-" + testenv.Name("")
	base := runtime.NumGoroutine()
	p, err := New(Config{URL: uri.String(), Exchange: "x", ReconnectMin: 20 * time.Millisecond, ReconnectMax: 40 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	time.Sleep(1500 * time.Millisecond)
	if err := p.Ready(); err == nil {
		t.Error("Ready() = nil with bad credentials")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before Run:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
