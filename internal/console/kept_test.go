package console

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeClock) add(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
}

// A kept read is served while fresh, served stale and refreshed in the
// background up to the stale limit, read again past it, and read again
// after forget; a failed read keeps nothing.
func TestKept(t *testing.T) {
	clk := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	var reads atomic.Int64
	var fail atomic.Bool
	release := make(chan struct{}, 10)
	var blocking atomic.Bool
	k := &kept[int64]{fresh: 10 * time.Second, stale: time.Minute, now: clk.now,
		load: func(ctx context.Context) (int64, error) {
			if blocking.Load() {
				<-release
			}
			if fail.Load() {
				return 0, errors.New("boom")
			}
			return reads.Add(1), nil
		}}
	ctx := context.Background()
	get := func() (int64, time.Time) {
		t.Helper()
		v, at, err := k.get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v, at
	}
	if v, at := get(); v != 1 || !at.Equal(clk.now()) {
		t.Fatalf("first view: %d at %v, want a synchronous read (1)", v, at)
	}
	clk.add(5 * time.Second)
	if v, _ := get(); v != 1 {
		t.Fatalf("fresh view read again: %d", v)
	}
	// Stale: answered at once with the old value, one refresh behind it.
	clk.add(10 * time.Second)
	blocking.Store(true)
	for range 3 {
		if v, _ := get(); v != 1 {
			t.Fatalf("stale view: %d, want the kept 1 at once", v)
		}
	}
	release <- struct{}{}
	deadline := time.Now().Add(5 * time.Second)
	for {
		k.mu.Lock()
		done := !k.refreshing
		k.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background refresh never finished")
		}
		time.Sleep(time.Millisecond)
	}
	blocking.Store(false)
	if v, _ := get(); v != 2 || reads.Load() != 2 {
		t.Fatalf("after the refresh: %d (%d reads), want 2 from one background read", v, reads.Load())
	}
	// Past the stale limit: read before answering.
	clk.add(2 * time.Minute)
	if v, _ := get(); v != 3 {
		t.Fatalf("view past the stale limit: %d, want a synchronous read (3)", v)
	}
	// forget: the next view reads.
	k.forget()
	if v, _ := get(); v != 4 {
		t.Fatalf("view after forget: %d, want 4", v)
	}
	// A failed synchronous read says so and keeps nothing.
	k.forget()
	fail.Store(true)
	if _, _, err := k.get(ctx); err == nil {
		t.Fatal("a failed read answered no error")
	}
	fail.Store(false)
	if v, _ := get(); v != 5 {
		t.Fatalf("view after a failed read: %d, want 5", v)
	}
}

// A background refresh that began before forget is not kept after it:
// the action's change must show.
func TestKeptForgetBeatsOlderRefresh(t *testing.T) {
	clk := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	var n atomic.Int64
	k := &kept[int64]{fresh: time.Second, stale: time.Minute, now: clk.now,
		load: func(context.Context) (int64, error) { return n.Add(1), nil }}
	k.store(100, clk.now())
	clk.add(time.Millisecond)
	k.forget()
	k.store(99, clk.now().Add(-time.Microsecond)) // began before forget
	if v, _, _ := k.get(context.Background()); v != 1 {
		t.Fatalf("view after forget got %d, want a new read (1), not the older refresh", v)
	}
}
