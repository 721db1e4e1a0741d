package rabbit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The ring loop counts an attempt for every publish error but ErrNotSent
// (ring.Config.NotSent), so a clock with max_attempts must not die of
// publishes that never left the process. A lane that died (its channel or
// connection lost: a broker restart) while its session was still the
// current one refuses the next messages before they are written; so does
// a publish whose context ended before it began. Their errors say not
// sent.
func TestMessagesNeverWrittenAreNotSent(t *testing.T) {
	f := newFixture(t)
	f.bind(t, "app")
	r := start(t, f, func(c *Config) { c.Channels = 1 })

	t.Run("context ended before the publish", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		for i, err := range r.p.PublishBatch(ctx, []Message{msg(1, "app"), msg(2, "app")}) {
			if !errors.Is(err, ErrNotSent) {
				t.Errorf("message %d: %v, want ErrNotSent", i, err)
			}
		}
	})

	t.Run("lane died before the publish", func(t *testing.T) {
		s := r.p.sess.Load()
		if s == nil {
			t.Fatal("not connected")
		}
		l := s.lanes[0].Load()
		// a publish takes the session, then waits for its only lane
		l.pubMu.Lock()
		done := make(chan []error)
		go func() { done <- r.p.PublishBatch(context.Background(), []Message{msg(3, "app"), msg(4, "app")}) }()
		time.Sleep(100 * time.Millisecond)
		l.die(errors.New("channel closed by broker")) // what run() does when the channel closes
		l.pubMu.Unlock()
		for i, err := range <-done {
			if !errors.Is(err, ErrNotSent) {
				t.Errorf("message %d, refused by the dead lane before it was written: %v, want ErrNotSent", i, err)
			}
		}
	})
}
