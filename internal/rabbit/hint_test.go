package rabbit

import (
	"context"
	"sync"
	"testing"
	"time"

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
}

func startHints(t *testing.T, url, exchange, id string) *hintBus {
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
	})
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
