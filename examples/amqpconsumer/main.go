// Command amqpconsumer receives an application's rings with nothing but
// github.com/rabbitmq/amqp091-go: the consumer the README shows, complete.
// (The consume package does the same and more: reconnects, a delay queue
// for failed rings, de-duplication; see examples/dedupconsumer.)
//
//	go run ./examples/amqpconsumer -app order
//
// It reads CLOCKD_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/, or
// several URLs separated by commas: the first node that answers) and
// CLOCKD_EXCHANGE (default clock.ring). It stops on Ctrl-C, when the
// connection is lost, or after -max rings when given.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func main() {
	app := flag.String("app", "order", "the application")
	maxRings := flag.Int("max", 0, "stop after this many rings (0: run until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	urls, err := brokerURLs(os.Getenv("CLOCKD_AMQP_URL"))
	if err != nil {
		log.Fatal(err)
	}
	exchange := os.Getenv("CLOCKD_EXCHANGE")
	if exchange == "" {
		exchange = "clock.ring"
	}
	if err := consume(ctx, urls, exchange, *app, *maxRings); err != nil {
		log.Fatal(err)
	}
}

// brokerURLs splits CLOCKD_AMQP_URL, one URL or several separated by
// commas as clockd takes it, and checks each.
func brokerURLs(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return []string{"amqp://guest:guest@127.0.0.1:5672/"}, nil
	}
	var urls []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if _, err := amqp.ParseURI(u); err != nil {
			// Not err: net/url's errors quote the URL, password included.
			return nil, fmt.Errorf("CLOCKD_AMQP_URL: URL %d is not of the form amqp://user:password@host:port/vhost", len(urls)+1)
		}
		urls = append(urls, u)
	}
	if len(urls) == 0 {
		return nil, errors.New("CLOCKD_AMQP_URL holds no URL")
	}
	return urls, nil
}

// handle is the application's work for one ring. Delivery is at least
// once: make it idempotent, keyed by the message id.
func handle(messageID, businessID string, payload []byte) error {
	fmt.Printf("ring %s: %s %s\n", messageID, businessID, payload)
	return nil
}

func consume(ctx context.Context, urls []string, exchange, app string, maxRings int) error {
	// README:begin
	// urls: CLOCKD_AMQP_URL split at its commas (the nodes of a cluster);
	// the first that answers is used.
	var conn *amqp.Connection
	var errs []error
	for i, url := range urls {
		c, err := amqp.Dial(url)
		if err == nil {
			conn = c
			break
		}
		// Named by its place in the list: the URL holds the password.
		errs = append(errs, fmt.Errorf("connect to broker %d of %d: %w", i+1, len(urls), err))
	}
	if conn == nil {
		return errors.Join(errs...)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	// The declarations clockctl bind makes (idempotent): the exchange as
	// clockd declares it, a durable queue named after the application,
	// bound with the application as binding key.
	if err := ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange: %w", err)
	}
	q, err := ch.QueueDeclare(app, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
	if err != nil {
		return fmt.Errorf("declare queue: %w", err)
	}
	if err := ch.QueueBind(q.Name, app, exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue: %w", err)
	}
	if err := ch.Qos(100, 0, false); err != nil {
		return fmt.Errorf("qos: %w", err)
	}
	msgs, err := ch.Consume(q.Name, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume: %w", err)
	}
	for n := 0; maxRings == 0 || n < maxRings; n++ {
		var m amqp.Delivery
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case m, ok = <-msgs:
		}
		if !ok {
			return errors.New("the broker closed the channel: reconnect (the consume package does)")
		}
		businessID, _ := m.Headers["x-clock-business-id"].(string)
		ringAt, _ := m.Headers["x-clock-ring-at"].(string)
		if at, err := time.Parse(time.RFC3339Nano, ringAt); err == nil {
			fmt.Printf("%s late; ", time.Since(at).Round(time.Millisecond))
		}
		if err := handle(m.MessageId, businessID, m.Body); err != nil {
			// Back to the queue, to be tried again.
			if err := m.Nack(false, true); err != nil {
				return fmt.Errorf("nack: %w", err)
			}
			continue
		}
		if err := m.Ack(false); err != nil {
			return fmt.Errorf("ack: %w", err)
		}
	}
	// README:end
	return nil
}
