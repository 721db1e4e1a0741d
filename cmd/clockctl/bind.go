package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
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

// brokerURLs checks the broker URL list of bind and watch: one AMQP URL or
// several separated by commas, like CLOCKD_AMQP_URL (the nodes of a
// cluster, tried in turn). It is checked here because the dialers would
// take a whole list as one URL whose vhost is the rest, and amqp's parse
// errors quote the URL with its password; nothing returned shows one.
// source names where the list came from (-amqp or CLOCKD_AMQP_URL).
func brokerURLs(source, list string) (string, error) {
	elems := strings.Split(list, ",")
	var urls []string
	for i, e := range elems {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		if _, err := amqp.ParseURI(e); err != nil {
			which := ""
			if len(elems) > 1 {
				which = fmt.Sprintf(" element %d of %d", i+1, len(elems))
			}
			// A *url.Error quotes the whole URL: keep only its reason.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return "", usagef("%s%s (%s): %v", source, which, redactURL(e), err)
		}
		urls = append(urls, e)
	}
	if len(urls) == 0 {
		return "", usagef("%s names no broker URL", source)
	}
	return strings.Join(urls, ","), nil
}

// redactURL is an AMQP URL as it may be shown: without its password, and
// not at all when it cannot be parsed (then where its password ends is
// unknown).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "not a valid URL"
	}
	return u.Redacted()
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
Usage: clockctl bind -app APP [-queue NAME] [-amqp URL[,URL...]] [-exchange NAME] [-quorum]

Prepares RabbitMQ so that the rings of APP reach a queue: declares the ring
exchange (direct, durable: the same as clockd declares it), declares a durable
queue (classic, or quorum with -quorum) and binds it to the exchange with APP
as the binding key. Everything is idempotent; running it again changes
nothing. A queue that already exists with other arguments (another queue
type, for instance) is refused by the broker and left as it is.
-amqp takes the list CLOCKD_AMQP_URL takes: the nodes of a cluster,
separated by commas, tried in turn until one answers.
Only -timeout of the global flags applies; -addr is not used.

Examples:
  clockctl bind -app order
  clockctl bind -app order -queue order.rings -quorum
  clockctl bind -app member -amqp amqp://user:pass@rabbit:5672/vhost
  clockctl bind -app order -quorum -amqp amqp://u:p@rabbit1:5672/,amqp://u:p@rabbit2:5672/
`,
		setup: func(c *cli, fs *flag.FlagSet) runFunc {
			o := bindOptions{}
			fs.StringVar(&o.app, "app", "", "the `application` whose rings the queue receives (required)")
			fs.StringVar(&o.queue, "queue", "", "queue `name` (default: the application)")
			fs.StringVar(&o.url, "amqp", "", "RabbitMQ `URL`, or several separated by commas, tried in turn (default $CLOCKD_AMQP_URL, else "+defaultAMQPURL+")")
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
				if o.exchange == "" {
					return usagef("-exchange is empty")
				}
				o.timeout = c.timeout
				return bind(ctx, o, c.stdout)
			}
		},
	}
}

// bind declares the exchange and the queue and binds them with
// consume.Bind (the declarations the consumer helper makes too, on the
// first node of the list that answers), printing what was done to w.
func bind(ctx context.Context, o bindOptions, w io.Writer) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	q := consume.Queue{Application: o.app, Name: o.queue, Exchange: o.exchange, Quorum: o.quorum}
	dq, err := consume.Bind(ctx, o.url, q)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "exchange %q: declared (direct, durable)\n", o.exchange)
	fmt.Fprintf(w, "queue %q: declared (durable, %s), %d messages, %d consumers\n", dq.Name, q.Type(), dq.Messages, dq.Consumers)
	fmt.Fprintf(w, "queue %q: bound to exchange %q with binding key %q\n", dq.Name, o.exchange, o.app)
	return nil
}
