// Package consume receives the rings clockd publishes to RabbitMQ and hands
// them to an application's handler.
//
//	c, err := consume.New(consume.Options{
//		URL:   os.Getenv("CLOCKD_AMQP_URL"), // one URL, or several separated by commas
//		Queue: consume.Queue{Application: "order"},
//		Bind:  true, // declare and bind the queue, as clockctl bind does
//	})
//	if err != nil { ... }
//	err = c.Run(ctx, func(ctx context.Context, r consume.Ring) error {
//		return closeIfUnpaid(ctx, r.BusinessID) // nil: acknowledged; an error: retried later
//	})
//
// What Run does with a ring:
//   - the handler returns nil: the message is acknowledged;
//   - the handler returns an error (or panics): the message is published to
//     the delay queue "<queue>.retry", whose messages expire after
//     RetryDelay back into the queue (dead-lettered through the default
//     exchange), and acknowledged once the broker confirmed that copy; after
//     MaxRetries such retries it goes to "<queue>.dead" instead, with the
//     handler's last error in the header x-consume-error, for a person to
//     look at. A delay queue is used rather than a nack with requeue
//     because a requeued message comes back at once, so a failing
//     dependency would spin the consumer; and rather than a per-message
//     delay plugin because it works on any RabbitMQ. Both queues are
//     declared by the consumer (it needs configure and write permission on
//     them);
//   - a message_id that the Dedup hook has seen is acknowledged without
//     calling the handler;
//   - when the copy of a failed ring cannot be moved to the delay (or dead)
//     queue (the broker does not confirm it, or no queue takes it: the
//     delay queue was deleted), the ring is left unacknowledged and the
//     connection ends: Run reconnects, with its backoff, declares the delay
//     and dead queues again, and the broker delivers the ring again (not a
//     nack with requeue, which would bring it back at once: a spin).
//
// When Run's ctx ends, Run stops the deliveries and lets the rings under
// way be handled, recorded by Dedup and acknowledged: the handler, Seen and
// Done get a context that does not end with Run's, cancelled only when
// they take longer than 5 s (then their rings are left unacknowledged and
// go to the next consumer). Rings delivered but not begun are left
// unacknowledged. A broker that stopped answering (a stalled network)
// does not hold the stop up: Run does not wait for it to confirm that the
// deliveries stopped, and gives it 2 s to confirm the close, then drops the
// connection; a connect under way ends with ctx at once.
//
// Run keeps going across broker restarts and lost connections: it
// reconnects with backoff, moving to the next URL of the list each time a
// connection is lost. Messages that were delivered but not acknowledged
// when a connection broke are delivered again by the broker (Redelivered),
// so a ring is never lost, but it can be handled twice: use Dedup, or make
// the handler idempotent.
package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Ring is one ring of a clock, as the handler receives it.
type Ring struct {
	ClockID     int64  // the clock's id
	Application string // x-clock-application
	BusinessID  string // x-clock-business-id
	Payload     []byte // the clock's payload, byte for byte
	ContentType string
	RingAt      time.Time // x-clock-ring-at: when it was due
	// OccurrenceAt is the scheduled time of this occurrence of a recurring
	// clock (header x-clock-occurrence); zero for a one-shot clock.
	OccurrenceAt time.Time
	// Attempt is clockd's publish attempt (x-clock-attempt): 1 for the first
	// publish; 2 or more is a repeat of a ring that may have arrived already.
	Attempt int
	// MessageID is stable across repeats of the same ring: "<id>", or
	// "<id>:<occurrence ms>" for a recurring clock's occurrence.
	MessageID string
	// PublishedAt is when clockd published it (the message timestamp).
	PublishedAt time.Time
	// ReceivedAt is when this consumer received it; Lateness is ReceivedAt
	// minus OccurrenceAt (recurring) or RingAt.
	ReceivedAt time.Time
	Lateness   time.Duration
	// Retries counts the times this consumer's handlers failed on it and
	// sent it to the delay queue; Redelivered says the broker delivered it
	// before without an acknowledgement (a lost connection).
	Retries     int
	Redelivered bool
	// Delivery is the AMQP message itself, for anything else.
	Delivery amqp.Delivery
}

// Handler handles one ring. It is called from Workers goroutines at once.
// Its ctx does not end when Run's does: a ring under way when Run is
// stopped is handled to the end, then recorded (Dedup) and acknowledged;
// ctx is cancelled only when that takes longer than 5 s after the stop.
type Handler func(ctx context.Context, r Ring) error

// Dedup remembers the message_ids that were handled, so that a ring
// delivered twice (a repeat after a crash, a redelivery after a lost
// connection) is handled once. Seen is asked before the handler; Done is
// told after it returned nil. Within one Consumer, two deliveries of one
// message_id are never handled at once: the second waits for the first,
// then asks Seen. MemoryDedup is one, for a single process;
// an application with several consumers keeps it where they all see it
// (its database, in the same transaction as the handler's work, is best).
// Seen and Done get the handler's context (see Handler): one that goes on
// for up to 5 s after Run's ctx ended, so that a ring handled during a stop
// is recorded.
type Dedup interface {
	Seen(ctx context.Context, messageID string) (bool, error)
	Done(ctx context.Context, messageID string) error
}

// Options configure a Consumer.
type Options struct {
	// URL is the broker's AMQP URL, or several separated by commas (the
	// nodes of a cluster, as in CLOCKD_AMQP_URL).
	URL string
	// Queue is the application's queue.
	Queue Queue
	// Bind declares the exchange, the queue and its binding on every
	// connect (Declare). Leave it false when an operator ran clockctl bind
	// and the application's broker user may not declare them. Run itself
	// always declares the delay and dead queues (<queue>.retry,
	// <queue>.dead) and publishes to them: the user needs configure on the
	// two, write on amq.default and read on the delay queue (README,
	// "RabbitMQ users"), more than consume only.
	Bind bool
	// Prefetch is how many unacknowledged rings the broker sends ahead.
	// Default 64.
	Prefetch int
	// Workers is how many handlers run at once. Default 1.
	Workers int
	// RetryDelay is how long a ring whose handler failed waits in the delay
	// queue. Default 10s.
	RetryDelay time.Duration
	// MaxRetries is how many times a ring is retried before it goes to the
	// dead queue. Default 5; negative: retried for ever.
	MaxRetries int
	// Dedup, when set, skips rings whose message_id it has seen.
	Dedup Dedup
	// Logger receives connects, losses and handler failures. Default: none.
	Logger *slog.Logger
	// Name is the connection_name the broker shows. Default "clockd consumer <application>".
	Name string
	// Now is the clock for ReceivedAt and Lateness. Default time.Now.
	Now func() time.Time
}

// Consumer consumes one application's queue.
type Consumer struct {
	o    Options
	urls []string
	q    Queue
	log  *slog.Logger

	// handling holds the message ids whose ring a worker handles now (with
	// Dedup): a duplicate delivered meanwhile (a re-ring of clockd) waits
	// for it and asks Dedup again, rather than run the handler a second
	// time at once, before the first has recorded it as done.
	mu       sync.Mutex
	handling map[string]chan struct{}
}

// begin waits until no other worker handles id and takes it; false when
// ctx ended first. end gives it back.
func (c *Consumer) begin(ctx context.Context, id string) bool {
	for {
		c.mu.Lock()
		wait, busy := c.handling[id]
		if !busy {
			if c.handling == nil {
				c.handling = map[string]chan struct{}{}
			}
			c.handling[id] = make(chan struct{})
			c.mu.Unlock()
			return true
		}
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return false
		}
	}
}

func (c *Consumer) end(id string) {
	c.mu.Lock()
	close(c.handling[id])
	delete(c.handling, id)
	c.mu.Unlock()
}

// Header names of the consumer's own bookkeeping.
const (
	HeaderRetries = "x-consume-retries" // retries so far, on messages in the delay and dead queues
	HeaderError   = "x-consume-error"   // the last handler error, on messages in the dead queue
)

// New checks the options and returns a consumer; Run starts it.
func New(o Options) (*Consumer, error) {
	urls := splitURLs(o.URL)
	if len(urls) == 0 {
		return nil, errors.New("consume: no broker URL")
	}
	for _, u := range urls {
		if _, err := amqp.ParseURI(u); err != nil {
			return nil, fmt.Errorf("consume: broker URL %s: %w", Redact(u), withoutURL(err))
		}
	}
	if o.Queue.Application == "" {
		return nil, errors.New("consume: Queue.Application is empty")
	}
	if o.Prefetch <= 0 {
		o.Prefetch = 64
	}
	if o.Workers <= 0 {
		o.Workers = 1
	}
	if o.RetryDelay <= 0 {
		o.RetryDelay = 10 * time.Second
	}
	if o.MaxRetries == 0 {
		o.MaxRetries = 5
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	q := o.Queue.withDefaults()
	if o.Name == "" {
		o.Name = "clockd consumer " + q.Application
	}
	return &Consumer{o: o, urls: urls, q: q, log: o.Logger.With("queue", q.Name)}, nil
}

// RetryQueue and DeadQueue name the consumer's delay and dead queues.
func (c *Consumer) RetryQueue() string { return c.q.Name + ".retry" }

// DeadQueue is where rings go after MaxRetries failed retries.
func (c *Consumer) DeadQueue() string { return c.q.Name + ".dead" }

// Run consumes until ctx is done, reconnecting whenever the connection is
// lost, and returns nil then, after the handlers that were running
// returned (they have up to 5 s to settle their rings: see Handler) and
// the connection closed (up to 2 s more when the broker does not answer).
// It returns an error only when it cannot start at all (h is nil).
func (c *Consumer) Run(ctx context.Context, h Handler) error {
	if h == nil {
		return errors.New("consume: nil handler")
	}
	const minWait, maxWait = 100 * time.Millisecond, 5 * time.Second
	wait := minWait
	for i := 0; ctx.Err() == nil; i++ {
		u := c.urls[i%len(c.urls)]
		consumed, err := c.session(ctx, u, h)
		if ctx.Err() != nil {
			return nil
		}
		if consumed && !errors.Is(err, errMove) {
			wait = minWait // it worked for a while: come back quickly
		}
		c.log.Warn("consumer session ended; reconnecting", "broker", Redact(u), "err", err, "in", wait)
		t := time.NewTimer(wait/2 + rand.N(wait/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(wait*2, maxWait)
	}
	return nil
}

// session is one connection: set up, consume until it breaks or ctx is
// done. consumed says it got as far as consuming.
func (c *Consumer) session(ctx context.Context, u string, h Handler) (consumed bool, err error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := dial(dctx, []string{u}, c.o.Name)
	cancel()
	if err != nil {
		return false, err
	}
	defer conn.shut()
	// While the session sets up, every call waits for the broker: if Run's
	// ctx ends meanwhile, closing the connection makes the call under way
	// return, even when the broker stopped answering.
	setup := context.AfterFunc(ctx, conn.shut)
	defer setup()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))

	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("open channel: %w", err)
	}
	if c.o.Bind {
		if _, err := Declare(ch, c.q); err != nil {
			return false, err
		}
	}
	args := amqp.Table{amqp.QueueTypeArg: c.q.Type(), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": c.q.Name}
	if _, err := ch.QueueDeclare(c.RetryQueue(), true, false, false, false, args); err != nil {
		return false, declareError(fmt.Sprintf("declare delay queue %q", c.RetryQueue()), err)
	}
	if _, err := ch.QueueDeclare(c.DeadQueue(), true, false, false, false, amqp.Table{amqp.QueueTypeArg: c.q.Type()}); err != nil {
		return false, declareError(fmt.Sprintf("declare dead queue %q", c.DeadQueue()), err)
	}
	// Retries and dead letters are published on a channel of their own in
	// confirm mode: the original is acknowledged only once its copy is safe.
	pub, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("open channel: %w", err)
	}
	if err := pub.Confirm(false); err != nil {
		return false, fmt.Errorf("confirm mode: %w", err)
	}
	// A copy no queue took (its queue deleted behind our back) comes back
	// as a return, before its confirm: then the original is not acked.
	returns := pub.NotifyReturn(make(chan amqp.Return, 1))
	if err := ch.Qos(c.o.Prefetch, 0, false); err != nil {
		return false, fmt.Errorf("qos: %w", err)
	}
	tag := "clockd-consume-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	msgs, err := ch.Consume(c.q.Name, tag, false, false, false, false, nil)
	if err != nil {
		return false, fmt.Errorf("consume queue %q: %w", c.q.Name, err)
	}
	if !setup() {
		return false, ctx.Err() // Run's ctx ended during the set-up
	}
	c.log.Info("consuming", "broker", Redact(u), "prefetch", c.o.Prefetch, "workers", c.o.Workers)

	// The handlers, Dedup and the moves of failed rings get a context that
	// does not end with Run's: when Run's ctx ends, the rings under way are
	// still handled, recorded and settled (a ring handled and then not
	// recorded by Dedup, or not acknowledged, is handled twice), for
	// stopWait at most; then it is cancelled.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	// A ring that could not be moved to the delay queue ends the session
	// (fail): a nack with requeue would bring it back at once, and a
	// failing handler would spin on it.
	var (
		failOnce sync.Once
		failed   = make(chan struct{})
		failErr  error
	)
	fail := func(err error) {
		failOnce.Do(func() { failErr = err; close(failed) })
	}
	ending := func() bool {
		select {
		case <-failed:
			return true
		default:
			return ctx.Err() != nil
		}
	}
	var (
		wg    sync.WaitGroup
		pubMu sync.Mutex // one confirm at a time on pub keeps each wait tied to its publish
		// A worker returns once the session is ending and its handler under
		// way (if any) returned; it does not wait for the deliveries to end,
		// which takes the broker's answer to a cancel. What it has not taken
		// is left unacknowledged: the broker delivers it again (to the next
		// consumer) once the connection is closed.
		worker = func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-failed:
					return
				case d, ok := <-msgs:
					if !ok || ending() {
						return
					}
					if err := c.handle(ctx, hctx, h, d, &publisher{ch: pub, returns: returns, mu: &pubMu}); err != nil {
						fail(err)
					}
				}
			}
		}
	)
	for range c.o.Workers {
		wg.Add(1)
		go worker()
	}
	// The workers also end when the broker cancels the consumer (its queue
	// was deleted) or closes a channel: then reconnect too.
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	// Once Run's ctx ended (whatever the session is doing then), the
	// handlers under way have stopWait to return; then hctx is cancelled.
	go func() {
		select {
		case <-workersDone:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(stopWait)
		defer t.Stop()
		select {
		case <-workersDone:
		case <-t.C:
			hcancel()
		}
	}()
	pubClosed := pub.NotifyClose(make(chan *amqp.Error, 1))
	select {
	case <-ctx.Done():
	case <-failed:
	case e := <-closed:
		err = closeReason("connection", e)
	case e := <-pubClosed:
		err = closeReason("publishing channel", e)
	case <-workersDone:
		err = errors.New("the broker ended the consumer (queue deleted or channel closed)")
	}
	if ending() {
		// Run's ctx ended, or a failed ring could not be moved (then Run
		// reconnects, with its backoff, declaring the queues again: a
		// delay queue deleted behind its back is back; the ring, left
		// unacknowledged, is delivered again). No more deliveries, and the
		// handlers under way settle their rings: a ring handled and then
		// not acknowledged because the connection went first would come
		// back to the next consumer, handled twice. The cancel is not
		// waited for: a broker that stopped answering never confirms it,
		// and what it delivers meanwhile is not handled.
		err = ctx.Err()
		if err == nil {
			<-failed
			err = failErr
		}
		go func() { _ = ch.Cancel(tag, false) }()
		// Up to stopWait: at a stop, hctx is cancelled then.
		t := time.NewTimer(stopWait)
		select {
		case <-workersDone:
		case <-hctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	// Closing the connection ends msgs, so the workers return once their
	// current handler did; what they had not acknowledged is redelivered.
	// shut waits closeWait at most for the broker.
	conn.shut()
	wg.Wait()
	return true, err
}

// stopWait bounds how long Run, when its ctx ends, waits for the handlers
// under way to acknowledge their rings before it closes the connection and
// cancels their context; and how long a session that could not move a
// failed ring waits for them before it closes the connection.
const stopWait = 5 * time.Second

// errMove ends a session in which a failed ring could not be moved to the
// delay (or dead) queue.
var errMove = errors.New("could not move a failed ring")

func closeReason(what string, e *amqp.Error) error {
	if e == nil {
		return errors.New(what + " closed")
	}
	return fmt.Errorf("%s closed: %w", what, e)
}

// handle runs the handler on one delivery and settles it. ctx is Run's;
// hctx, which outlives it by stopWait at most, is the handler's, Dedup's
// and the move's. An error (errMove) says the ring, left unacknowledged,
// could not be moved to the delay or dead queue: the session must end.
func (c *Consumer) handle(ctx, hctx context.Context, h Handler, d amqp.Delivery, pub *publisher) error {
	r := c.ring(d)
	log := c.log.With("message_id", d.MessageId, "business_id", r.BusinessID)
	if c.o.Dedup != nil && d.MessageId != "" {
		if !c.begin(ctx, d.MessageId) {
			return nil // stopping: left unacknowledged, the broker gives it to the next consumer
		}
		defer c.end(d.MessageId)
		seen, err := c.o.Dedup.Seen(hctx, d.MessageId)
		if err != nil {
			// Unknown: handle it (at least once) rather than drop it.
			log.Warn("dedup lookup failed; handling the ring", "err", err)
		} else if seen {
			if err := d.Ack(false); err != nil {
				log.Warn("ack of a duplicate failed; it comes back", "err", err)
			}
			return nil
		}
	}
	err := safeCall(hctx, h, r)
	if err == nil {
		if c.o.Dedup != nil && d.MessageId != "" {
			if err := c.o.Dedup.Done(hctx, d.MessageId); err != nil {
				log.Warn("dedup record failed", "err", err)
			}
		}
		if err := d.Ack(false); err != nil {
			log.Warn("ack failed; the ring comes back", "err", err)
		}
		return nil
	}
	if hctx.Err() != nil {
		// Stopping, and stopWait ran out: the handler was cut short. Leave
		// the ring unacknowledged; the broker gives it to the next consumer.
		return nil
	}
	target, retries := c.RetryQueue(), r.Retries+1
	pubMsg := amqp.Publishing{
		Headers: amqp.Table{}, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding,
		DeliveryMode: amqp.Persistent, MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type,
		AppId: d.AppId, Body: d.Body,
	}
	for k, v := range d.Headers {
		pubMsg.Headers[k] = v
	}
	pubMsg.Headers[HeaderRetries] = int64(retries)
	if c.o.MaxRetries >= 0 && retries > c.o.MaxRetries {
		target = c.DeadQueue()
		pubMsg.Headers[HeaderError] = err.Error()
		log.Error("ring handler failed; giving up: to the dead queue", "err", err, "retries", r.Retries, "queue", target)
	} else {
		pubMsg.Expiration = strconv.FormatInt(c.o.RetryDelay.Milliseconds(), 10)
		log.Warn("ring handler failed; retrying later", "err", err, "retry", retries, "in", c.o.RetryDelay)
	}
	if perr := pub.publish(hctx, target, pubMsg); perr != nil {
		if hctx.Err() != nil {
			return nil // stopping, stopWait ran out: left unacknowledged, as above
		}
		// Not acknowledged, and not nacked with requeue (it would come
		// back at once: a spin): the session ends, and the broker delivers
		// it again after the reconnect, which is the retry.
		log.Warn("could not move the failed ring; reconnecting, it comes back after", "err", perr, "queue", target)
		return fmt.Errorf("%w to %q: %w", errMove, target, perr)
	}
	if err := d.Ack(false); err != nil {
		log.Warn("ack failed; the ring comes back", "err", err)
	}
	return nil
}

// publisher sends the copies of failed rings, one at a time, on a channel
// in confirm mode.
type publisher struct {
	ch      *amqp.Channel
	returns <-chan amqp.Return
	mu      *sync.Mutex // one publish at a time: each confirm and return is that publish's
}

// publish sends m to queue and returns nil once the broker confirmed it
// and put it in the queue.
func (p *publisher) publish(ctx context.Context, queue string, m amqp.Publishing) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, true, false, m)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ok, err := dc.WaitContext(wctx)
	if err != nil {
		return err
	}
	select {
	case r := <-p.returns:
		return fmt.Errorf("queue %q did not take it: %d %s", queue, r.ReplyCode, r.ReplyText)
	default:
	}
	if !ok {
		return errors.New("the broker refused the message (nack)")
	}
	return nil
}

// safeCall runs the handler; a panic is a failure of that ring, not of the
// consumer.
func safeCall(ctx context.Context, h Handler, r Ring) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h(ctx, r)
}

// ring reads a delivery's properties and headers.
func (c *Consumer) ring(d amqp.Delivery) Ring {
	now := c.o.Now()
	r := Ring{
		Application: headerString(d.Headers, "x-clock-application"),
		BusinessID:  headerString(d.Headers, "x-clock-business-id"),
		Payload:     d.Body, ContentType: d.ContentType, MessageID: d.MessageId,
		Attempt: int(headerInt(d.Headers, "x-clock-attempt")), Retries: int(headerInt(d.Headers, HeaderRetries)),
		PublishedAt: d.Timestamp, ReceivedAt: now, Redelivered: d.Redelivered, Delivery: d,
	}
	id := d.MessageId
	if i := strings.IndexByte(id, ':'); i >= 0 {
		id = id[:i]
	}
	r.ClockID, _ = strconv.ParseInt(id, 10, 64)
	r.RingAt, _ = time.Parse(time.RFC3339Nano, headerString(d.Headers, "x-clock-ring-at"))
	r.OccurrenceAt, _ = time.Parse(time.RFC3339Nano, headerString(d.Headers, "x-clock-occurrence"))
	due := r.RingAt
	if !r.OccurrenceAt.IsZero() {
		due = r.OccurrenceAt
	}
	if !due.IsZero() {
		r.Lateness = now.Sub(due)
	}
	return r
}

func headerString(h amqp.Table, k string) string {
	s, _ := h[k].(string)
	return s
}

func headerInt(h amqp.Table, k string) int64 {
	switch v := h[k].(type) {
	case int8:
		return int64(v)
	case int16:
		return int64(v)
	case int32:
		return int64(v)
	case int64:
		return v
	case int:
		return int64(v)
	case uint8:
		return int64(v)
	case uint16:
		return int64(v)
	case uint32:
		return int64(v)
	case string:
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	return 0
}
