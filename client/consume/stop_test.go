package consume_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clockd/clockd/client/consume"
)

// ctxDedup is a Dedup that, like one kept in a database (what the package
// doc recommends), fails when its context has ended.
type ctxDedup struct {
	mu   sync.Mutex
	seen map[string]bool
	fail atomic.Int32 // calls refused because ctx had ended
}

func (d *ctxDedup) Seen(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		d.fail.Add(1)
		return false, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[id], nil
}

func (d *ctxDedup) Done(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		d.fail.Add(1)
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seen[id] = true
	return nil
}

// runUntilReturn runs c until it returns by itself (its ctx is cancelled
// by the handler).
func runUntilReturn(t *testing.T, ctx context.Context, c *consume.Consumer, h consume.Handler) time.Duration {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, h) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	return time.Since(start)
}

// TestStopRecordsHandledRingsInDedup: Run's context ends while a handler
// is under way. The handler's context goes on, so the handler finishes,
// and Dedup.Done, given that context too, records the ring before it is
// acknowledged: a Dedup that honours its context (any kept in a database)
// knows the ring, and clockd's repeat of it is skipped.
func TestStopRecordsHandledRingsInDedup(t *testing.T) {
	t.Parallel()
	url, q := sharedQueue(t)
	if _, err := consume.Bind(context.Background(), url, q); err != nil {
		t.Fatal(err)
	}
	publish(t, url, q, "77", "stop-during-handler", nil)
	dd := &ctxDedup{seen: map[string]bool{}}
	c, err := consume.New(consume.Options{URL: url, Queue: q, Dedup: dd, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var handled, cut atomic.Int32
	runUntilReturn(t, ctx, c, func(hctx context.Context, _ consume.Ring) error {
		cancel() // the program is asked to stop while this ring is being handled
		time.Sleep(100 * time.Millisecond)
		if hctx.Err() != nil {
			cut.Add(1)
		}
		handled.Add(1)
		return nil // the work is done
	})
	if handled.Load() != 1 {
		t.Fatalf("handled %d, want 1", handled.Load())
	}
	if cut.Load() != 0 {
		t.Error("the handler's context ended with Run's, before the stop's wait ran out")
	}
	if n := dd.fail.Load(); n != 0 {
		t.Errorf("Dedup was called with an ended context %d times during the stop", n)
	}
	if seen, _ := dd.Seen(context.Background(), "77"); !seen {
		t.Errorf("ring 77 was handled successfully during the stop but Dedup does not know it")
	}
	// handled and acknowledged: it does not come back
	again := newReceived()
	c2, err := consume.New(consume.Options{URL: url, Queue: q, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c2, func(ctx context.Context, r consume.Ring) error { again.add(r); return nil })
	if again.waitDistinct(1, time.Second) {
		t.Errorf("the ring handled during the stop came back: %d", again.total())
	}
}

// TestStopCancelsHandlersAfterStopWait: a handler that does not return
// after Run's context ended has its own context cancelled when the stop's
// wait (5 s) runs out; Run then returns, and the ring, not acknowledged,
// goes to the next consumer.
func TestStopCancelsHandlersAfterStopWait(t *testing.T) {
	t.Parallel()
	url, q := sharedQueue(t)
	if _, err := consume.Bind(context.Background(), url, q); err != nil {
		t.Fatal(err)
	}
	publish(t, url, q, "78", "stuck", nil)
	c, err := consume.New(consume.Options{URL: url, Queue: q, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	took := runUntilReturn(t, ctx, c, func(hctx context.Context, _ consume.Ring) error {
		cancel()
		<-hctx.Done() // stuck until its context ends
		return hctx.Err()
	})
	if took < 4*time.Second || took > 15*time.Second {
		t.Errorf("Run returned %v after its context ended; want about 5 s (the stop's wait)", took)
	}
	again := newReceived()
	c2, err := consume.New(consume.Options{URL: url, Queue: q, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c2, func(ctx context.Context, r consume.Ring) error { again.add(r); return nil })
	if !again.waitDistinct(1, 30*time.Second) {
		t.Error("the ring whose handler was cut by the stop did not come to the next consumer")
	}
}
