package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/backoff"
	"github.com/clockd/clockd/internal/console"
)

type watchOptions struct {
	app, url, exchange string
	json               bool
	count              int
}

func watchCommand() command {
	return command{
		name:    "watch",
		summary: "tail the rings of an application as they are published",
		help: `
Usage: clockctl watch -app APP [-json] [-n N] [-amqp URL[,URL...]] [-exchange NAME]

Prints one line per ring of APP: when it arrived, its business id, message id,
attempt and lateness (arrival minus the time it was due). It reads from a
temporary queue of its own (server-named, exclusive, deleted when watch
stops) bound to the ring exchange with APP as binding key: the application's
own queue still gets every message, watch takes none from it.
Note: a ring counts as delivered once any queue takes it, so while watch runs,
the rings of an application that has bound no queue of its own are counted as
rung (watch received them) instead of retried as unroutable.
Runs until interrupted (Ctrl-C), or until N rings with -n. A connection lost
once it worked (a broker restart) is made again, with backoff; the rings
published while it was away are not shown (the application's queue has them).
Only the AMQP flags apply; -addr and -token are not used.

Examples:
  clockctl watch -app order
  clockctl watch -app order -json | jq .lateness_ms
`,
		setup: func(c *cli, fs *flag.FlagSet) runFunc {
			o := watchOptions{}
			fs.StringVar(&o.app, "app", "", "the `application` whose rings to show (required)")
			fs.BoolVar(&o.json, "json", false, "print each ring as one JSON object per line")
			fs.IntVar(&o.count, "n", 0, "stop after this many rings (0: run until interrupted)")
			fs.StringVar(&o.url, "amqp", "", "RabbitMQ `URL`, or several separated by commas, tried in turn (default $CLOCKD_AMQP_URL, else "+defaultAMQPURL+")")
			fs.StringVar(&o.exchange, "exchange", "", "ring exchange `name` (default $CLOCKD_EXCHANGE, else "+defaultExchange+")")
			return func(ctx context.Context, pos []string) error {
				if len(pos) > 0 {
					return usagef("unexpected argument %q", pos[0])
				}
				if o.app == "" {
					return usagef("-app is required")
				}
				if err := alarm.CheckApplication(o.app); err != nil {
					return usagef("-app %q: %v", o.app, err)
				}
				if o.count < 0 {
					return usagef("-n must not be negative")
				}
				set := setFlags(fs)
				source := "-amqp"
				if !set["amqp"] {
					source = "CLOCKD_AMQP_URL"
					o.url = orDefault(c.getenv("CLOCKD_AMQP_URL"), defaultAMQPURL)
				}
				if !set["exchange"] {
					o.exchange = orDefault(c.getenv("CLOCKD_EXCHANGE"), defaultExchange)
				}
				var err error
				if o.url, err = brokerURLs(source, o.url); err != nil {
					return err
				}
				return watch(ctx, o, c.stdout, c.stderr)
			}
		},
	}
}

// watch prints the rings of o.app until ctx ends (a clean stop) or -n
// rings came. A connection that fails at the start is an error; one lost
// once it worked (a broker restart, a node of the list gone) is made again,
// with backoff, until ctx ends: watch "runs until interrupted" (found by
// review: it exited 1 at a broker blip). The rings published while it was
// away are not shown: its queue went with the connection.
func watch(ctx context.Context, o watchOptions, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	seen := 0
	var werr error
	connected := false
	retry := backoff.Policy{Min: 500 * time.Millisecond, Max: 10 * time.Second}
	for attempt := 0; ; attempt++ {
		err := console.Watch(ctx, console.WatchConfig{URL: o.url, Exchange: o.exchange, Application: o.app},
			func(q string) {
				if connected {
					fmt.Fprintf(stderr, "watching again (queue %s); rings published meanwhile are not shown\n", q)
				} else {
					fmt.Fprintf(stderr, "watching rings of %s on exchange %s (queue %s); Ctrl-C to stop\n", o.app, o.exchange, q)
				}
				connected, attempt = true, 0
			},
			func(r console.Ring) {
				mu.Lock()
				defer mu.Unlock()
				if werr != nil {
					return
				}
				werr = printRing(stdout, r, o.json)
				seen++
				if werr != nil || (o.count > 0 && seen >= o.count) {
					cancel()
				}
			})
		mu.Lock()
		failed := werr
		mu.Unlock()
		switch {
		case failed != nil:
			return fmt.Errorf("write: %w", failed)
		case ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)):
			return nil
		case !connected:
			return err
		}
		wait := retry.Delay(attempt)
		fmt.Fprintf(stderr, "%v; reconnecting in %s\n", err, wait.Round(100*time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func printRing(w io.Writer, r console.Ring, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	_, err := fmt.Fprintf(w, "%s  %s  id=%s  attempt=%d  lateness=%s  %s\n",
		r.Received.Format("15:04:05.000"), r.BusinessID, r.MessageID, r.Attempt,
		(time.Duration(r.LatenessMS * float64(time.Millisecond))).Round(100*time.Microsecond), preview(r))
	return err
}

func preview(r console.Ring) string {
	p := r.Payload
	if len(p) > 80 {
		p = p[:80] + "…"
	} else if r.PayloadBytes > len(p) {
		p += "…"
	}
	return p
}
