// Command setandconsume sets a clock that rings in two seconds and waits
// for its ring: the whole round trip of clockd in one program.
//
//	go run ./examples/setandconsume -app demo
//
// Give it an application of its own (the default, demo): it consumes the
// application's queue and acknowledges every ring there, its own and any
// other, so run against an application in use it would take that
// application's rings from it.
//
// It reads CLOCKD_ADDR (default http://127.0.0.1:8080), CLOCKD_TOKEN,
// CLOCKD_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/, or several
// URLs separated by commas) and CLOCKD_EXCHANGE (default clock.ring).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/clockd/clockd/client"
	"github.com/clockd/clockd/client/consume"
)

func main() {
	app := flag.String("app", "demo", "an application of its own: every ring in its queue is taken")
	in := flag.Duration("in", 2*time.Second, "ring after this long")
	timeout := flag.Duration("timeout", time.Minute, "give up when no ring came within this")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *app, *in, *timeout); err != nil {
		log.Fatal(err)
	}
}

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, app string, in, timeout time.Duration) error {
	c, err := client.New(getenv("CLOCKD_ADDR", "http://127.0.0.1:8080"), client.WithToken(os.Getenv("CLOCKD_TOKEN")))
	if err != nil {
		return err
	}
	q := consume.Queue{Application: app, Exchange: getenv("CLOCKD_EXCHANGE", consume.DefaultExchange)}
	amqpURL := getenv("CLOCKD_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	// Bind the queue first: a ring published before any queue is bound is
	// returned by the broker (and retried by clockd).
	if _, err := consume.Bind(ctx, amqpURL, q); err != nil {
		return fmt.Errorf("bind the queue: %w", err)
	}

	id := "example-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	clock, _, err := c.Create(ctx, client.NewClock{
		Application: app, BusinessID: id, Payload: `{"hello":"clockd"}`, Delay: in,
	})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	fmt.Printf("clock %d (%s/%s) set to ring at %s\n", clock.ID, app, id, clock.RingAt.Format(time.RFC3339Nano))

	cons, err := consume.New(consume.Options{URL: amqpURL, Queue: q})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rang := make(chan consume.Ring, 1)
	err = cons.Run(ctx, func(ctx context.Context, r consume.Ring) error {
		if r.ClockID != clock.ID {
			return nil // another ring of the application: acknowledged, not ours
		}
		select {
		case rang <- r:
		default:
		}
		cancel() // got it: stop consuming
		return nil
	})
	if err != nil {
		return err
	}
	select {
	case r := <-rang:
		fmt.Printf("rang: clock %d %s, payload %s, attempt %d, %s late\n", r.ClockID, r.BusinessID, r.Payload, r.Attempt,
			r.Lateness.Round(time.Millisecond))
		return nil
	default:
		return errors.New("no ring within " + timeout.String())
	}
}
