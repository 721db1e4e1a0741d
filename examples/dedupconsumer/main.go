// Command dedupconsumer consumes an application's rings with the consume
// package: prefetch, several workers, a delay queue for failed rings,
// reconnects across broker restarts, and de-duplication by message_id so
// that a ring delivered twice (a re-ring after a clockd crash, a
// redelivery after a lost connection) is handled once.
//
//	go run ./examples/dedupconsumer -app order
//
// It reads CLOCKD_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/, or
// several URLs separated by commas) and CLOCKD_EXCHANGE (default
// clock.ring). It stops on Ctrl-C, or after -max rings when given.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"github.com/clockd/clockd/client/consume"
)

func main() {
	app := flag.String("app", "order", "the application")
	maxRings := flag.Int64("max", 0, "stop after this many rings (0: run until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *app, *maxRings); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, app string, maxRings int64) error {
	url := os.Getenv("CLOCKD_AMQP_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	exchange := os.Getenv("CLOCKD_EXCHANGE")
	if exchange == "" {
		exchange = consume.DefaultExchange
	}
	c, err := consume.New(consume.Options{
		URL:        url,
		Queue:      consume.Queue{Application: app, Exchange: exchange},
		Bind:       true, // declare and bind the queue, as clockctl bind does
		Prefetch:   100,
		Workers:    4,
		RetryDelay: 30 * time.Second,
		MaxRetries: 10,
		// In production keep the ids where every instance sees them, best
		// in the database the handler writes to, in the same transaction.
		Dedup:  consume.NewMemoryDedup(100_000),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var handled atomic.Int64
	return c.Run(ctx, func(ctx context.Context, r consume.Ring) error {
		// The work: here, print it. An error returned here sends the ring to
		// the delay queue, to come back after RetryDelay.
		fmt.Printf("ring %s: %s/%s attempt %d, %s late, payload %s\n",
			r.MessageID, r.Application, r.BusinessID, r.Attempt, r.Lateness.Round(time.Millisecond), r.Payload)
		if n := handled.Add(1); maxRings > 0 && n >= maxRings {
			cancel()
		}
		return nil
	})
}
