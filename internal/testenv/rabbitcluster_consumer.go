package testenv

import (
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ConsumeQuorum is Consume for a cluster: it declares a quorum queue
// (x-queue-type quorum, replicated on the cluster's nodes) bound to
// exchange with key app, through urls[0] (so that node leads it: the
// leader of a new quorum queue is the node the client declared it on),
// and consumes it until the test ends. When its connection is lost (its
// node killed) it reconnects to the next URL of the list, and the next,
// as an application would; messages not acked yet are delivered again,
// with their message_id.
func ConsumeQuorum(t testing.TB, urls []string, exchange, app string) *Consumer {
	t.Helper()
	c := &Consumer{byID: map[int64]int{}, cond: make(chan struct{}, 1)}
	c.Queue = Name("q-" + app + "-")
	declare := func() error {
		conn, err := amqp.DialConfig(urls[0], amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			return err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return err
		}
		if err := ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil); err != nil {
			return err
		}
		if _, err := ch.QueueDeclare(c.Queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			return err
		}
		return ch.QueueBind(c.Queue, app, exchange, false, nil)
	}
	if err := declare(); err != nil {
		t.Fatalf("declare quorum queue %s on %s: %v", c.Queue, urls[0], err)
	}

	stop := make(chan struct{})
	var (
		mu   sync.Mutex
		conn *amqp.Connection
		next int // index of the URL to connect to
	)
	connect := func() (<-chan amqp.Delivery, error) {
		url := urls[next%len(urls)]
		cn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err != nil {
			next++
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
			next++
			return nil, err
		}
		mu.Lock()
		conn = cn
		mu.Unlock()
		select {
		case <-stop:
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
		// the node is lost: the next one
		c.keepConsuming(msgs, connect, 50*time.Millisecond, func() { next++ }, stop)
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
