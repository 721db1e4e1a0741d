// Command batchcreate sets many clocks in one request and reports each
// one's outcome.
//
//	go run ./examples/batchcreate -app order -n 100
//
// It reads CLOCKD_ADDR (default http://127.0.0.1:8080) and CLOCKD_TOKEN.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/clockd/clockd/client"
)

func main() {
	app := flag.String("app", "order", "the application")
	n := flag.Int("n", 100, "how many clocks (at most 1000)")
	in := flag.Duration("in", 30*time.Minute, "ring after this long")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *app, *n, *in); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, app string, n int, in time.Duration) error {
	addr := os.Getenv("CLOCKD_ADDR")
	if addr == "" {
		addr = "http://127.0.0.1:8080"
	}
	c, err := client.New(addr, client.WithToken(os.Getenv("CLOCKD_TOKEN")))
	if err != nil {
		return err
	}
	clocks := make([]client.NewClock, n)
	for i := range clocks {
		clocks[i] = client.NewClock{
			Application: app,
			BusinessID:  fmt.Sprintf("batch-%d-%04d", time.Now().Unix(), i),
			Payload:     fmt.Sprintf(`{"n":%d}`, i),
			Delay:       in,
		}
	}
	// One request; retried on a network error or a 503 (a repeat answers
	// 200 for the clocks the first attempt made).
	results, err := c.CreateBatch(ctx, clocks)
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	var created, existed, conflicts, refused int
	for i, r := range results {
		switch {
		case r.Err == nil && r.Created:
			created++
		case r.Err == nil:
			existed++
		case errors.Is(r.Err, client.ErrConflict):
			conflicts++
		default:
			refused++
			fmt.Printf("clock %d (%s) refused: %v\n", i, clocks[i].BusinessID, r.Err)
		}
	}
	fmt.Printf("%d clocks: %d created, %d existed already, %d conflicts, %d refused\n", n, created, existed, conflicts, refused)
	if refused > 0 {
		return fmt.Errorf("%d clocks refused", refused)
	}
	return nil
}
