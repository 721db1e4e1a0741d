package consume

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultExchange is the exchange clockd publishes rings to unless
// CLOCKD_EXCHANGE names another.
const DefaultExchange = "clock.ring"

// Queue names an application's queue and how it is declared.
type Queue struct {
	Application string // the routing key of the application's rings (required)
	Name        string // the queue; default the application
	Exchange    string // the ring exchange; default DefaultExchange
	Quorum      bool   // a quorum queue (replicated, for a RabbitMQ cluster) instead of a classic one
}

func (q Queue) withDefaults() Queue {
	if q.Name == "" {
		q.Name = q.Application
	}
	if q.Exchange == "" {
		q.Exchange = DefaultExchange
	}
	return q
}

// Type is the queue type Declare asks for: "classic" or "quorum".
func (q Queue) Type() string {
	if q.Quorum {
		return amqp.QueueTypeQuorum
	}
	return amqp.QueueTypeClassic
}

// Declare makes the ring exchange (direct, durable: as clockd declares
// it), the durable queue and the binding with the application as binding
// key, on an open channel. Every step is idempotent; a queue that exists
// with other arguments (another type) is refused by the broker, which
// closes the channel, and left as it is. It returns the queue as declared
// (its message and consumer counts).
func Declare(ch *amqp.Channel, q Queue) (amqp.Queue, error) {
	if q.Application == "" {
		return amqp.Queue{}, errors.New("consume: the queue's application is empty")
	}
	q = q.withDefaults()
	if err := ch.ExchangeDeclare(q.Exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return amqp.Queue{}, declareError(fmt.Sprintf("declare exchange %q", q.Exchange), err)
	}
	dq, err := ch.QueueDeclare(q.Name, true, false, false, false, amqp.Table{amqp.QueueTypeArg: q.Type()})
	if err != nil {
		return amqp.Queue{}, declareError(fmt.Sprintf("declare queue %q", q.Name), err)
	}
	if err := ch.QueueBind(dq.Name, q.Application, q.Exchange, false, nil); err != nil {
		return amqp.Queue{}, declareError(fmt.Sprintf("bind queue %q to exchange %q", dq.Name, q.Exchange), err)
	}
	return dq, nil
}

func declareError(what string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.PreconditionFailed {
		return fmt.Errorf("%s: it exists with other arguments, left unchanged: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Bind connects to the broker at url (the first reachable of a
// comma-separated list), runs Declare and disconnects: what `clockctl
// bind` does. ctx bounds the whole of it.
func Bind(ctx context.Context, url string, q Queue) (amqp.Queue, error) {
	conn, err := dial(ctx, splitURLs(url), "clockd consume bind")
	if err != nil {
		return amqp.Queue{}, err
	}
	defer conn.Close()
	// Closing the connection makes a call that waits for the broker return.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	ch, err := conn.Channel()
	if err != nil {
		return amqp.Queue{}, fmt.Errorf("open channel: %w", err)
	}
	dq, err := Declare(ch, q)
	if err != nil {
		if ctx.Err() != nil {
			return amqp.Queue{}, fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return amqp.Queue{}, err
	}
	if err := ch.Close(); err != nil {
		return amqp.Queue{}, fmt.Errorf("close channel: %w", err)
	}
	return dq, nil
}

// splitURLs splits a comma-separated list of broker URLs (the form of
// CLOCKD_AMQP_URL).
func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// Redact hides the password of an AMQP URL, for logs.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// withoutURL is err with the URL it quotes taken out: net/url's parse
// errors (which amqp passes on) quote the whole URL, password included.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// dial connects to the first of urls that answers, within ctx.
func dial(ctx context.Context, urls []string, name string) (*amqp.Connection, error) {
	if len(urls) == 0 {
		return nil, errors.New("consume: no broker URL")
	}
	var errs []error
	for _, u := range urls {
		timeout := 30 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			timeout = max(time.Until(dl), time.Millisecond)
		}
		conn, err := amqp.DialConfig(u, amqp.Config{
			Dial:       amqp.DefaultDial(timeout),
			Properties: amqp.Table{"connection_name": name},
		})
		if err == nil {
			return conn, nil
		}
		errs = append(errs, fmt.Errorf("connect to %s: %w", Redact(u), withoutURL(err)))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}
