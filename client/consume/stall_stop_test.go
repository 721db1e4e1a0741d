package consume_test

import (
	"context"
	"testing"
	"time"

	"github.com/clockd/clockd/client/consume"
	"github.com/clockd/clockd/internal/testenv"
)

// runTimed starts c and returns a stop function that cancels Run's
// context and reports how long Run took to return after it.
func runTimed(t *testing.T, c *consume.Consumer, h consume.Handler) func() time.Duration {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx, h); close(done) }()
	return func() time.Duration {
		start := time.Now()
		cancel()
		select {
		case <-done:
		case <-time.After(90 * time.Second):
			t.Fatal("Run did not return within 90 s after its context ended")
		}
		return time.Since(start)
	}
}

// TestStopWhileBrokerStalls: the broker (here: the network to it) stops
// answering without closing the connection, and the application stops its
// consumer (SIGTERM: Run's context ends), once while consuming and once
// while connecting. Run returns within the stop's bounds — up to 5 s for
// handlers under way (none here) and 2 s for the broker to confirm the
// close — rather than when a heartbeat or handshake timeout (30 s) gives
// up, which an orchestrator's grace period (often 30 s) does not wait for.
func TestStopWhileBrokerStalls(t *testing.T) {
	t.Parallel()
	url, q := sharedQueue(t)
	if _, err := consume.Bind(context.Background(), url, q); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		connected bool // stall once consuming; else stall before the first connect
	}{{"consuming", true}, {"connecting", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy := testenv.StartProxy(t, url[len("amqp://guest:guest@"):len(url)-1])
			purl := "amqp://guest:guest@" + proxy.Addr + "/"
			c, err := consume.New(consume.Options{URL: purl, Queue: q, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.connected {
				proxy.Stall()
			}
			got := make(chan string, 10)
			stop := runTimed(t, c, func(ctx context.Context, r consume.Ring) error {
				got <- r.MessageID
				return nil
			})
			if tc.connected {
				publish(t, url, q, "1", "b-1", nil)
				select {
				case <-got:
				case <-time.After(20 * time.Second):
					t.Fatal("no ring consumed")
				}
				proxy.Stall()
			}
			time.Sleep(time.Second)
			took := stop()
			proxy.Resume()
			if took > 7*time.Second {
				t.Errorf("Run returned %v after its context ended (broker stalled, %s), want within about 5 s", took.Round(100*time.Millisecond), tc.name)
			}
		})
	}
}
