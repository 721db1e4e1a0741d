package rabbit

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/testenv"
)

// hintBus is a running Hints on the test broker that records what it
// receives and how often its queue was (re)bound.
type hintBus struct {
	*Hints
	mu        sync.Mutex
	got       []alarm.Due
	connected int
	revoked   []int64
}

// startHints runs a hint bus; setup, when given, changes it before Run.
func startHints(t *testing.T, url, exchange, id string, setup ...func(*Hints)) *hintBus {
	t.Helper()
	b := &hintBus{}
	b.Hints = NewHints(HintConfig{URL: url, Exchange: exchange, InstanceID: id,
		OnHint: func(d alarm.Due) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.got = append(b.got, d)
		},
		OnConnected: func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.connected++
		},
		OnRevoked: func(id int64) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.revoked = append(b.revoked, id)
		},
	})
	for _, f := range setup {
		f(b.Hints)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return b
}

func (b *hintBus) state() (got []alarm.Due, connected int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]alarm.Due(nil), b.got...), b.connected
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Hints go from one instance to the others; one whose connection is cut
// binds a new queue and says so (OnConnected), since the hints sent while
// it had none went nowhere: clockd then rescans the shards it owns.
func TestHintsReachOthersAndAReconnectIsTold(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clockd_test_hints_")
	a := startHints(t, url, exchange, testenv.Name("a"))
	b := startHints(t, url, exchange, testenv.Name("b"))
	waitFor(t, "both connected", func() bool {
		_, na := a.state()
		_, nb := b.state()
		return na == 1 && nb == 1
	})
	at := time.Now().Truncate(time.Millisecond)
	a.Send([]alarm.Due{{ID: 1, Shard: 3, At: at}})
	waitFor(t, "b received a's hint", func() bool { got, _ := b.state(); return len(got) == 1 })
	if got, _ := b.state(); got[0].ID != 1 || got[0].Shard != 3 || !got[0].At.Equal(at) {
		t.Fatalf("b received %+v, want clock 1, shard 3 at %v", got[0], at)
	}
	if got, _ := a.state(); len(got) != 0 {
		t.Errorf("a received its own hint: %+v", got)
	}

	testenv.CloseConnectionsNamed(t, "clockd-hints "+b.self)
	waitFor(t, "b told of its new connection", func() bool { _, n := b.state(); return n == 2 })
	if _, n := a.state(); n != 1 {
		t.Errorf("a, whose connection stayed, was told of %d connections", n)
	}
	a.Send([]alarm.Due{{ID: 2, Shard: 5, At: at}})
	waitFor(t, "b received a's hint after its reconnection", func() bool {
		got, _ := b.state()
		return len(got) == 2 && got[1].ID == 2
	})
}

func (b *hintBus) revokedIDs() []int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int64(nil), b.revoked...)
}

// A token revoked through one instance is told to the others, and Revoke
// returns once each instance it names has acknowledged that it forgot the
// token: by then their OnRevoked has run (a request to them now finds the
// token revoked). The sender is not told of its own revocations; hints
// keep flowing beside them. A named instance that never answers holds
// Revoke up to revokeWaitMax, no longer.
func TestRevokedTokensAreForgottenEverywhereBeforeRevokeReturns(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clockd_test_hints_")
	ids := []string{testenv.Name("a"), testenv.Name("b"), testenv.Name("c")}
	a := startHints(t, url, exchange, ids[0])
	b := startHints(t, url, exchange, ids[1])
	c := startHints(t, url, exchange, ids[2])
	waitFor(t, "all connected", func() bool {
		_, na := a.state()
		_, nb := b.state()
		_, nc := c.state()
		return na == 1 && nb == 1 && nc == 1
	})
	ctx := context.Background()
	for i, id := range []int64{42, 43, 42} {
		start := time.Now()
		a.Revoke(ctx, id, ids) // its own id among them: not waited for
		if took := time.Since(start); took >= revokeWaitMax {
			t.Fatalf("revoke %d: Revoke waited %v, its whole bound: no acknowledgement came", id, took)
		}
		if nb, nc := len(b.revokedIDs()), len(c.revokedIDs()); nb != i+1 || nc != i+1 {
			t.Fatalf("revoke %d returned with b told %d times and c %d times, want %d each", id, nb, nc, i+1)
		}
	}
	if got := b.revokedIDs(); !slices.Equal(got, []int64{42, 43, 42}) {
		t.Errorf("b was told %v, want [42 43 42]", got)
	}
	if got := a.revokedIDs(); len(got) != 0 {
		t.Errorf("a was told of its own revocations: %v", got)
	}
	a.Send([]alarm.Due{{ID: 7, Shard: 1, At: time.Now().Truncate(time.Millisecond)}})
	waitFor(t, "a hint after the revocations", func() bool { got, _ := b.state(); return len(got) == 1 && got[0].ID == 7 })
	if got, _ := b.state(); len(got) != 1 {
		t.Errorf("b received %d hints, want 1 (a revocation is not a hint)", len(got))
	}
	start := time.Now()
	a.Revoke(ctx, 44, append(ids, "gone-instance"))
	if took := time.Since(start); took < revokeWaitMax-50*time.Millisecond || took > revokeWaitMax+2*time.Second {
		t.Errorf("with an instance that never answers, Revoke took %v, want about %v", took, revokeWaitMax)
	}
	if !slices.Contains(b.revokedIDs(), 44) || !slices.Contains(c.revokedIDs(), 44) {
		t.Errorf("b and c told %v and %v, want 44 among them", b.revokedIDs(), c.revokedIDs())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.waits) != 0 {
		t.Errorf("%d waits left behind", len(a.waits))
	}
}

// Without a connection Revoke does not wait: the word goes once the
// connection is up, and the others' caches expire meanwhile.
func TestRevokeWithoutABrokerDoesNotWait(t *testing.T) {
	t.Parallel()
	h := NewHints(HintConfig{URL: "amqp://guest:guest@127.0.0.1:1/", Exchange: "x", InstanceID: "lonely"})
	start := time.Now()
	h.Revoke(context.Background(), 9, []string{"another"})
	if took := time.Since(start); took > 100*time.Millisecond {
		t.Errorf("Revoke without a connection took %v", took)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(h.revokes, []int64{9}) || len(h.waits) != 0 {
		t.Errorf("pending %v, waiters %v: want the revocation kept for the connection, no waiter left", h.revokes, h.waits)
	}
}

// In a rolling upgrade an instance of an earlier release binds its queue to
// the hint exchange only, and takes every message there for hints: a
// revocation of three tokens (24 bytes) would read as a hint whose clock it
// would unschedule. Revocations go through an exchange of their own, so it
// never sees them; hints still reach it.
func TestRevocationsDoNotReachAnOlderInstanceAsHints(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clockd_test_hints_")
	var mu sync.Mutex
	var offered []alarm.Due
	old := NewHints(HintConfig{URL: url, Exchange: exchange, InstanceID: "old",
		OnHint: func(d alarm.Due) { mu.Lock(); offered = append(offered, d); mu.Unlock() }})
	testenv.WithChannel(t, url, func(ch *amqp.Channel) {
		if err := ch.ExchangeDeclare(exchange+".hints", "fanout", false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
		q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-message-ttl": int32(30000)})
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q.Name, "", exchange+".hints", false, nil); err != nil {
			t.Fatal(err)
		}
		msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		// three tokens revoked while the new instance had no connection, then
		// a hint: both go once it connects
		h := NewHints(HintConfig{URL: url, Exchange: exchange, InstanceID: testenv.Name("new")})
		for _, id := range []int64{7, 8, 9} {
			h.Revoke(context.Background(), id, []string{"old"})
		}
		at := time.Now().Truncate(time.Millisecond)
		h.Send([]alarm.Due{{ID: 5, Shard: 2, At: at}})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = h.Run(ctx) }()
		defer func() { cancel(); <-done }()
		timeout := time.After(10 * time.Second)
		for n := 0; n < 1; {
			select {
			case m := <-msgs:
				if m.AppId != "old" { // the earlier release's rule: every message not its own is hints
					old.deliver(m.Body)
					n++
				}
			case <-timeout:
				t.Fatal("no message on the hint exchange")
			}
		}
		// (past the new instance's first check of its bindings: its probe
		// is no hint for the older one)
	more:
		for wait := time.After(h.checkEvery + 500*time.Millisecond); ; {
			select {
			case m := <-msgs:
				if m.Type == probeType && len(m.Body) == 0 {
					old.deliver(m.Body)
					continue
				}
				t.Errorf("a second message reached the older instance: type %q, %d bytes", m.Type, len(m.Body))
			case <-wait:
				break more
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(offered) != 1 || offered[0].ID != 5 || offered[0].Shard != 2 || !offered[0].At.Equal(at) {
			t.Errorf("the older instance took %+v, want only the hint of clock 5", offered)
		}
	})
}

// What waits when a connection comes up (queued without one, or put back
// by a session whose publish failed) goes at once, not at the next Send or
// Revoke: in a quiet cluster that may never come.
func TestWaitingRevocationsGoWhenTheConnectionComes(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clockd_test_hints_")
	b := startHints(t, url, exchange, testenv.Name("b"))
	waitFor(t, "b connected", func() bool { _, n := b.state(); return n == 1 })
	a := NewHints(HintConfig{URL: url, Exchange: exchange, InstanceID: testenv.Name("a")})
	a.mu.Lock()
	a.revokes = []int64{11} // as a session whose publish failed leaves them: no signal pending
	a.pending = []alarm.Due{{ID: 3, Shard: 1, At: time.Now().Truncate(time.Millisecond)}}
	a.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(3 * time.Second)
	for {
		got, _ := b.state()
		if slices.Equal(b.revokedIDs(), []int64{11}) && len(got) == 1 && got[0].ID == 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 s after the connection: b told of %v, received %v", b.revokedIDs(), got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
