package rabbit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// Two "nodes" are two proxies in front of the test broker: closing one is,
// for the publisher, losing the node it is connected to.

// With a list of URLs the publisher connects to the first, moves to the
// next at once when it loses it (no backoff), stays ready meanwhile, and
// publishes with confirms and mandatory on the new node.
func TestURLListMovesToNextNode(t *testing.T) {
	f := newFixture(t)
	q := f.bind(t, "app")
	a, urlA := newProxy(t, f.url)
	b, urlB := newProxy(t, f.url)
	// A long backoff: the move must not wait for it.
	r := start(t, f, func(c *Config) {
		c.URL, c.ReconnectMin, c.ReconnectMax = urlA+", "+urlB, 30*time.Second, time.Minute
	})
	if conns(a) == 0 || conns(b) != 0 {
		t.Fatalf("connected through A %d, B %d; want A only", conns(a), conns(b))
	}
	if errs := publish(t, r.p, msg(1, "app")); errs[0] != nil {
		t.Fatalf("publish on A: %v", errs[0])
	}

	var notReady atomic.Value
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if err := r.p.Ready(); err != nil {
				notReady.Store(err)
			}
		}
	}()
	begin := time.Now()
	a.close() // node A is gone: its port refuses, its connection is cut
	var moved time.Duration
	for {
		errs := publish(t, r.p, msg(2, "app"))
		if errs[0] == nil {
			moved = time.Since(begin)
			break
		}
		if !errors.Is(errs[0], ErrUnavailable) || time.Since(begin) > 10*time.Second {
			t.Fatalf("publish after losing A: %v after %s", errs[0], time.Since(begin))
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	<-watched
	t.Logf("publishing again %s after the node was lost", moved)
	if err := notReady.Load(); err != nil {
		t.Errorf("Ready() reported %v during the move, want ready while another node answers", err)
	}
	if conns(b) == 0 {
		t.Error("no connection through B")
	}
	// mandatory keeps its meaning on the new node
	if errs := publish(t, r.p, msg(3, "nobody")); !errors.Is(errs[0], ErrUnroutable) {
		t.Errorf("unroutable on B: %v, want ErrUnroutable", errs[0])
	}
	if got := f.consume(t, q, 3, time.Second); len(got) != 2 || got[0].MessageId != "1" || got[1].MessageId != "2" {
		t.Errorf("queue has %d messages, want 1 and 2", len(got))
	}
}

// A first node that does not answer at start costs no backoff: the next
// one is tried at once.
func TestURLListFirstNodeDown(t *testing.T) {
	f := newFixture(t)
	f.bind(t, "app")
	dead := "amqp://guest:guest@" + testenv.FreeAddr(t) + "/"
	begin := time.Now()
	r := start(t, f, func(c *Config) { c.URL, c.ReconnectMin, c.ReconnectMax = dead+","+f.url, 30*time.Second, time.Minute })
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("ready after %s, want the second node at once", d)
	}
	if errs := publish(t, r.p, msg(1, "app")); errs[0] != nil {
		t.Errorf("publish: %v", errs[0])
	}
}

// When every node is down the publisher is not ready (after the round
// through the list), and backs off between rounds.
func TestURLListAllDown(t *testing.T) {
	list := "amqp://guest:guest@" + testenv.FreeAddr(t) + "/,amqp://guest:guest@" + testenv.FreeAddr(t) + "/"
	p, err := New(Config{URL: list, Exchange: "x", DialTimeout: 300 * time.Millisecond,
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	time.Sleep(500 * time.Millisecond)
	if err := p.Ready(); err == nil {
		t.Error("Ready() = nil with no node answering")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// A batch whose confirms were lost with the node fails with ErrUnavailable
// (not ErrNotSent: it may have been delivered), promptly, so that the ring
// loop counts a failed attempt and publishes it again, with the same
// message_id, on the next node.
func TestURLListUnconfirmedFailWithTheNode(t *testing.T) {
	f := newFixture(t)
	q := f.bind(t, "app")
	a, urlA := newProxy(t, f.url)
	_, urlB := newProxy(t, f.url)
	r := start(t, f, func(c *Config) {
		c.URL, c.ConfirmTimeout, c.Channels = urlA+","+urlB, 30*time.Second, 1
	})
	a.paused.Store(true) // the broker's confirms stop reaching us
	res := make(chan []error, 1)
	go func() { res <- r.p.PublishBatch(context.Background(), []Message{msg(7, "app"), msg(8, "app")}) }()
	time.Sleep(300 * time.Millisecond)
	begin := time.Now()
	a.close()
	var errs []error
	select {
	case errs = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("the batch still waits 10s after its node was lost")
	}
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("the batch failed %s after the node was lost, want at once (not after the 30s confirm timeout)", d)
	}
	for i, err := range errs {
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotSent) {
			t.Errorf("message %d: %v, want ErrUnavailable without ErrNotSent", i, err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		errs = publish(t, r.p, msg(7, "app"), msg(8, "app"))
		if errs[0] == nil && errs[1] == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish again on the next node: %v", errs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The first copies were delivered too (the broker had them): the
	// consumer sees each id at least once, duplicates with the same id.
	got := f.consume(t, q, 4, time.Second)
	seen := map[string]int{}
	for _, d := range got {
		seen[d.MessageId]++
	}
	if seen["7"] == 0 || seen["8"] == 0 || len(seen) != 2 {
		t.Errorf("message ids received %v, want 7 and 8", seen)
	}
}

func conns(px *proxy) int {
	px.mu.Lock()
	defer px.mu.Unlock()
	return len(px.conns)
}
