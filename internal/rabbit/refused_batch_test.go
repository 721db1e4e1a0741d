package rabbit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// A message over the broker's max_message_size costs one channel, also
// when more of its batch follow it (the ring loop publishes up to
// claim_batch = 500): the broker closes the channel while the batch is
// still being written, and the next publish on it fails. That failure
// killed the whole session and learned no limit, the refusal unread; it
// is now left to the lane's goroutine, which reads the refusal, learns the
// limit and replaces the channel on the same connection. Which of the two
// sees the close first is a race: a few fresh publishers are tried.
func TestRefusedMessageInALargeBatchKeepsTheConnection(t *testing.T) {
	node := testenv.StartRabbitNode(t)
	node.Ctl("eval", "application:set_env(rabbit, max_message_size, 4096).")

	f := newFixtureAt(t, node.URL())
	f.bind(t, "app")
	for try := range 6 {
		r := start(t, f, func(c *Config) { c.Channels, c.ConfirmTimeout = 1, 5*time.Second })
		p := r.p
		s0 := p.sess.Load()

		msgs := make([]Message, 500)
		for i := range msgs {
			msgs[i] = msg(int64(i+1), "app")
			msgs[i].Body = []byte(strings.Repeat("y", 4000)) // under the limit
		}
		msgs[0].Body = []byte(strings.Repeat("x", 8000)) // refused by the broker
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		errs := p.PublishBatch(ctx, msgs)
		cancel()
		time.Sleep(500 * time.Millisecond) // the lane's goroutine and Run do what they do

		bad := false
		if !errors.Is(errs[0], ErrTooLarge) {
			bad = true
			t.Errorf("try %d: the refused message failed with %v, want ErrTooLarge", try, errs[0])
		}
		if s := p.sess.Load(); s != s0 {
			bad = true
			t.Errorf("try %d: the connection was torn down (session %p -> %p): every ring in flight on it failed", try, s0, s)
		}
		if got := p.maxBody.Load(); got != 4096 {
			bad = true
			t.Errorf("try %d: limit learned: %d, want 4096: the next retry closes a channel again", try, got)
		}
		r.cancel() // the test's cleanup waits for it
		if bad {
			return
		}
	}
}
