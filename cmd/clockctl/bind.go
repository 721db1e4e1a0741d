package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/client/consume"
	"github.com/clockd/clockd/internal/alarm"
)

const (
	defaultAMQPURL  = "amqp://guest:guest@127.0.0.1:5672/"
	defaultExchange = "clock.ring"
)

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// bindOptions says what bind declares.
type bindOptions struct {
	url      string
	exchange string
	queue    string
	app      string
	quorum   bool
	timeout  time.Duration
}

func bindCommand() command {
	return command{
		name:    "bind",
		summary: "declare an application's queue and bind it to the ring exchange",
		help: `
Usage: clockctl bind -app APP [-queue NAME] [-amqp URL] [-exchange NAME] [-quorum]

Prepares RabbitMQ so that the rings of APP reach a queue: declares the ring
exchange (direct, durable: the same as clockd declares it), declares a durable
queue (classic, or quorum with -quorum) and binds it to the exchange with APP
as the binding key. Everything is idempotent; running it again changes
nothing. A queue that already exists with other arguments (another queue
type, for instance) is refused by the broker and left as it is.
Only -timeout of the global flags applies; -addr is not used.

Examples:
  clockctl bind -app order
  clockctl bind -app order -queue order.rings -quorum
  clockctl bind -app member -amqp amqp://user:pass@rabbit:5672/vhost
`,
		setup: func(c *cli, fs *flag.FlagSet) runFunc {
			o := bindOptions{}
			fs.StringVar(&o.app, "app", "", "the `application` whose rings the queue receives (required)")
			fs.StringVar(&o.queue, "queue", "", "queue `name` (default: the application)")
			fs.StringVar(&o.url, "amqp", "", "RabbitMQ `URL` (default $CLOCKD_AMQP_URL, else "+defaultAMQPURL+")")
			fs.StringVar(&o.exchange, "exchange", "", "ring exchange `name` (default $CLOCKD_EXCHANGE, else "+defaultExchange+")")
			fs.BoolVar(&o.quorum, "quorum", false, "declare a quorum queue instead of a classic one")
			return func(ctx context.Context, pos []string) error {
				if len(pos) > 0 {
					return usagef("unexpected argument %q", pos[0])
				}
				if o.app == "" {
					return usagef("-app is required")
				}
				if err := alarm.CheckApplication(o.app); err != nil {
					return usagef("-app %q: %v (an application is 1-64 characters of A-Z a-z 0-9 . _ -, not . or ..)", o.app, err)
				}
				if o.queue == "" {
					o.queue = o.app
				}
				set := setFlags(fs)
				if !set["amqp"] {
					o.url = orDefault(c.getenv("CLOCKD_AMQP_URL"), defaultAMQPURL)
				}
				if !set["exchange"] {
					o.exchange = orDefault(c.getenv("CLOCKD_EXCHANGE"), defaultExchange)
				}
				if o.url == "" {
					return usagef("-amqp is empty")
				}
				if o.exchange == "" {
					return usagef("-exchange is empty")
				}
				o.timeout = c.timeout
				return bind(ctx, o, c.stdout)
			}
		},
	}
}

// bind declares the exchange and the queue and binds them (the
// declarations of consume.Declare, which the consumer helper makes too),
// printing what was done to w.
func bind(ctx context.Context, o bindOptions, w io.Writer) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	dialTimeout := o.timeout
	if dialTimeout <= 0 {
		dialTimeout = 30 * time.Second
	}
	where := consume.Redact(o.url)
	conn, err := amqp.DialConfig(o.url, amqp.Config{
		Dial:       amqp.DefaultDial(dialTimeout),
		Properties: amqp.Table{"connection_name": "clockctl bind"},
	})
	if err != nil {
		return fmt.Errorf("connect to %s: %w", where, err)
	}
	defer conn.Close()
	// Closing the connection makes a call that waits for the broker return.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	fmt.Fprintf(w, "connected to %s\n", where)

	q := consume.Queue{Application: o.app, Name: o.queue, Exchange: o.exchange, Quorum: o.quorum}
	dq, err := consume.Declare(ch, q)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return err
	}
	fmt.Fprintf(w, "exchange %q: declared (direct, durable)\n", o.exchange)
	fmt.Fprintf(w, "queue %q: declared (durable, %s), %d messages, %d consumers\n", dq.Name, q.Type(), dq.Messages, dq.Consumers)
	fmt.Fprintf(w, "queue %q: bound to exchange %q with binding key %q\n", dq.Name, o.exchange, o.app)
	if err := ch.Close(); err != nil {
		return fmt.Errorf("close channel: %w", err)
	}
	return nil
}
