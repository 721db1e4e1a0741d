package ring

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// When a hand-over releases a shard whose ring is still in flight (its
// drain timed out), the hold ends at once (preload sets the hand-over's
// until to the release time), and the wait for that ring's confirm ends
// within leaseLook. Before, it went on to the reckoning seen at its last
// timer (up to 0.8 of the TTL), holding a publisher slot while the next
// owner already rang the clock (found by review).
func TestPublishWaitEndsWhenTheHoldEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config{MinLeaseLeft: 200 * time.Millisecond})
		h.pub.gate = make(chan struct{})
		h.feed.setUntil(t0.Add(8 * time.Second))
		h.add(alarm.Clock{ID: 1, Shard: 1, RingAt: t0.Add(time.Second)})
		h.advance(time.Second)
		if n := len(h.pub.published()); n != 1 {
			t.Fatalf("%d publishes, want 1", n)
		}
		h.advance(time.Second)
		h.feed.setUntil(h.clk.Now()) // released: the hold ends now
		h.advance(leaseLook)
		if err := h.pub.published()[0].ended; !errors.Is(err, errLeaseEnded) {
			t.Errorf("%v after the hold on the shard ended, the wait for the confirm goes on (ended: %v)", leaseLook, err)
		}
		close(h.pub.gate)
	})
}
