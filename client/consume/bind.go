package consume

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
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
// bind` does. ctx bounds the whole of it, a broker that stopped answering
// included.
func Bind(ctx context.Context, url string, q Queue) (amqp.Queue, error) {
	conn, err := dial(ctx, splitURLs(url), "clockd consume bind")
	if err != nil {
		return amqp.Queue{}, err
	}
	defer conn.shut()
	// Closing the connection makes a call that waits for the broker return.
	stop := context.AfterFunc(ctx, conn.shut)
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

// handshakeTimeout bounds a connect (TCP, TLS and AMQP handshakes), as
// amqp091's own default does, unless the URL's connection_timeout or the
// context's deadline is shorter.
const handshakeTimeout = 30 * time.Second

// closeWait bounds how long a close waits for the broker to confirm it.
// A broker that answers confirms in milliseconds; one that stopped
// answering (a stalled network, a frozen node) would otherwise hold the
// close until the heartbeat timeout (three heartbeats, 30 s by default),
// longer than an orchestrator waits for a stopping program.
const closeWait = 2 * time.Second

// conn is a broker connection with the network connection under it, which
// shut cuts when the broker does not confirm the close in time.
type conn struct {
	*amqp.Connection
	raw net.Conn

	once   sync.Once
	closed chan struct{}
}

// shut closes the connection: it asks the broker and waits for its
// confirmation up to closeWait, then closes the network connection. The
// deadline CloseDeadline sets is not enough alone: amqp091 pushes the read
// deadline forward on every frame it reads, heartbeats included. Every
// call returns once the connection is closed; the first one closes it.
func (c *conn) shut() {
	c.once.Do(func() {
		defer close(c.closed)
		cut := time.AfterFunc(closeWait, func() { _ = c.raw.Close() })
		defer cut.Stop()
		_ = c.CloseDeadline(time.Now().Add(closeWait))
	})
	<-c.closed
}

// dial connects to the first of urls that answers, within ctx.
func dial(ctx context.Context, urls []string, name string) (*conn, error) {
	if len(urls) == 0 {
		return nil, errors.New("consume: no broker URL")
	}
	var errs []error
	for _, u := range urls {
		conn, err := dialOne(ctx, u, name)
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

// dialOne connects to u. amqp.DialConfig takes no context: its default
// dialer waits out its own timeout (30 s) for a broker that accepted the
// TCP connection and then says nothing, so the connect is made here and
// its network connection closed when ctx ends, which ends the handshakes
// under way at once.
func dialOne(ctx context.Context, u, name string) (*conn, error) {
	timeout := handshakeTimeout
	if uri, err := amqp.ParseURI(u); err == nil && uri.ConnectionTimeout > 0 {
		timeout = time.Duration(uri.ConnectionTimeout) * time.Millisecond
	}
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	var (
		mu    sync.Mutex
		raw   net.Conn
		ended bool // ctx ended: a connection made from now on is closed at once
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		ended = true
		if raw != nil {
			_ = raw.Close()
		}
	})
	ac, err := amqp.DialConfig(u, amqp.Config{
		Properties: amqp.Table{"connection_name": name},
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Deadline: deadline}
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The TLS and AMQP handshakes have the same deadline;
			// amqp091 clears it once the connection is open.
			if err := nc.SetDeadline(deadline); err != nil {
				_ = nc.Close()
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			if ended {
				_ = nc.Close()
				return nil, ctx.Err()
			}
			raw = nc
			return nc, nil
		},
	})
	if !stop() {
		// ctx ended: the network connection is closed, so a connection
		// amqp091 opened meanwhile is already broken.
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	return &conn{Connection: ac, raw: raw, closed: make(chan struct{})}, nil
}
