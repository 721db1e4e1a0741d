package testenv

import (
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Ring is one message received by a Consumer.
type Ring struct {
	Delivery   amqp.Delivery
	ID         int64
	BusinessID string
	RingAt     time.Time
	Received   time.Time
}

// Consumer binds a fresh durable queue to exchange with the application as
// binding key (as an application would) and records every message.
type Consumer struct {
	mu    sync.Mutex
	rings []Ring
	byID  map[int64]int
	cond  chan struct{}
	Queue string
	// Reconnects counts the times the consumer had to reconnect.
	Reconnects int
}

// WithChannel runs fn on a channel of a connection of its own to url,
// closed when fn returns.
func WithChannel(t testing.TB, url string, fn func(ch *amqp.Channel)) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("amqp dial: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	fn(ch)
}

// BindQueue declares exchange (direct, durable) and a queue bound to it
// with key app, deleted when the test ends, without consuming.
func BindQueue(t testing.TB, url, exchange, app string) string {
	t.Helper()
	q := Name("q-" + app + "-")
	WithChannel(t, url, func(ch *amqp.Channel) {
		if err := ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q, app, exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		_, _ = ch.QueueDelete(q, false, false, false)
	})
	return q
}

// DeleteExchangeOnCleanup removes an exchange when the test ends.
func DeleteExchangeOnCleanup(t testing.TB, url, exchange string) {
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		_ = ch.ExchangeDelete(exchange, false, false)
	})
}

// Consume binds a queue for app and consumes it until the test ends. When
// its connection is closed (a broker restart, rabbitmqctl
// close_all_connections) it reconnects and goes on counting; messages not
// acked yet are then delivered again (Delivery.Redelivered), with their
// message_id, as to any application.
func Consume(t testing.TB, url, exchange, app string) *Consumer {
	t.Helper()
	c := &Consumer{byID: map[int64]int{}, cond: make(chan struct{}, 1)}
	c.Queue = BindQueue(t, url, exchange, app)
	stop := make(chan struct{})
	var (
		mu   sync.Mutex
		conn *amqp.Connection
	)
	// connect opens a consuming channel; the first time, failures are fatal.
	connect := func() (<-chan amqp.Delivery, error) {
		cn, err := amqp.Dial(url)
		if err != nil {
			return nil, err
		}
		ch, err := cn.Channel()
		if err == nil {
			err = ch.Qos(2000, 0, false)
		}
		var msgs <-chan amqp.Delivery
		if err == nil {
			msgs, err = ch.Consume(c.Queue, "", false, false, false, false, nil)
		}
		if err != nil {
			cn.Close()
			return nil, err
		}
		mu.Lock()
		conn = cn
		mu.Unlock()
		select {
		case <-stop: // the test ended meanwhile
			cn.Close()
		default:
		}
		return msgs, nil
	}
	msgs, err := connect()
	if err != nil {
		t.Fatalf("consume %s: %v", c.Queue, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.keepConsuming(msgs, connect, 100*time.Millisecond, func() {}, stop)
	}()
	t.Cleanup(func() {
		close(stop)
		mu.Lock()
		conn.Close()
		mu.Unlock()
		<-done
	})
	return c
}

// consume records deliveries until the channel closes.
func (c *Consumer) consume(msgs <-chan amqp.Delivery) {
	n := 0
	for d := range msgs {
		now := time.Now()
		id, _ := strconv.ParseInt(d.MessageId, 10, 64)
		r := Ring{Delivery: d, ID: id, Received: now}
		if s, ok := d.Headers["x-clock-ring-at"].(string); ok {
			r.RingAt, _ = time.Parse(time.RFC3339Nano, s)
		}
		if s, ok := d.Headers["x-clock-business-id"].(string); ok {
			r.BusinessID = s
		}
		c.mu.Lock()
		c.rings = append(c.rings, r)
		c.byID[id]++
		c.mu.Unlock()
		select {
		case c.cond <- struct{}{}:
		default:
		}
		n++
		if n%100 == 0 || len(msgs) == 0 {
			_ = d.Ack(true)
		}
	}
}

// Rings returns a copy of what was received so far.
func (c *Consumer) Rings() []Ring {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Ring(nil), c.rings...)
}

// Count is how many times message id arrived.
func (c *Consumer) Count(id int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id]
}

// Distinct is the number of distinct message ids received.
func (c *Consumer) Distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID)
}

// WaitDistinct waits until n distinct ids arrived or the limit passes.
func (c *Consumer) WaitDistinct(n int, limit time.Duration) bool {
	deadline := time.After(limit)
	for {
		if c.Distinct() >= n {
			return true
		}
		select {
		case <-c.cond:
		case <-deadline:
			return c.Distinct() >= n
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// keepConsuming records msgs and, each time the broker ends the delivery
// channel, calls lost and connects again every retry until it works or
// stop is closed.
func (c *Consumer) keepConsuming(msgs <-chan amqp.Delivery, connect func() (<-chan amqp.Delivery, error),
	retry time.Duration, lost func(), stop <-chan struct{}) {
	for {
		c.consume(msgs)
		lost()
		for {
			select {
			case <-stop:
				return
			case <-time.After(retry):
			}
			m, err := connect()
			if err == nil {
				msgs = m
				c.mu.Lock()
				c.Reconnects++
				c.mu.Unlock()
				break
			}
		}
	}
}
