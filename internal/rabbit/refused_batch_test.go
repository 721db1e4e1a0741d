package rabbit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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

	conn, err := amqp.Dial(node.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{url: node.URL(), exchange: testenv.Name("clockd_test_x_"), ch: ch}
	if err := ch.ExchangeDeclare(f.exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	f.bind(t, "app")
	for try := range 6 {
		p, err := New(Config{URL: f.url, Exchange: f.exchange, ConnectionName: testenv.Name("clockd_test_"),
			Channels: 1, ConfirmTimeout: 5 * time.Second,
			ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond, Logger: testenv.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- p.Run(rctx) }()
		wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := p.WaitReady(wctx); err != nil {
			t.Fatal(err)
		}
		wcancel()
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
		stop()
		<-done
		if bad {
			return
		}
	}
}
