package rabbit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Buffers of the amqp091 notification channels. amqp091's reader goroutine
// blocks (up to 5s, then drops the notification) when a listener is full, so
// these are sized to absorb bursts while the lane goroutine catches up.
const (
	confirmBuffer = 1024
	returnBuffer  = 256
)

// errPending marks a message whose result is not known yet.
var errPending = errors.New("rabbit: pending")

// batch is one PublishBatch call. Its fields are guarded by the mutex of the
// lane the batch is published on.
type batch struct {
	errs       []error
	at         []time.Time // when each confirm arrived (nil: not asked)
	remaining  int         // published messages whose result is pending
	publishing bool        // the caller is still publishing
	abandoned  bool        // the caller gave up (timeout, ctx): ignore late confirms
	done       chan struct{}
}

// resolve sets the result of message i unless it is already known.
func (b *batch) resolve(i int32, err error) {
	if b.abandoned || b.errs[i] != errPending {
		return
	}
	b.errs[i] = err
	b.remaining--
	if b.remaining == 0 && !b.publishing {
		close(b.done)
	}
}

// entry is one published, unconfirmed message, in delivery-tag order.
type entry struct {
	b        *batch
	i        int32
	returned bool
	id       int64
	key      string
	sent     time.Time
	size     int // of the body
}

// lane is one confirm channel. One goroutine (run) reads its confirms and
// returns, so a return is always handled before the confirm that follows it:
// amqp091's reader hands the basic.return to the returns channel before it
// processes the basic.ack, and run drains returns before every confirm.
type lane struct {
	p *Publisher
	s *session
	c *amqp.Channel

	confirms <-chan amqp.Confirmation
	returns  <-chan amqp.Return
	closed   <-chan *amqp.Error

	// pubMu is held by the one batch publishing on this lane; it keeps our
	// delivery-tag count equal to amqp091's. hdr is the header table reused
	// under it (amqp091 encodes it synchronously inside Publish).
	pubMu sync.Mutex
	hdr   amqp.Table

	mu      sync.Mutex // guards the fields below and the batches of the entries
	q       entryQueue // unconfirmed messages, delivery tags headTag, headTag+1, ...
	headTag uint64
	dead    error // non-nil once the lane cannot confirm anything any more
}

func newLane(p *Publisher, s *session, c *amqp.Channel) *lane {
	return &lane{
		p:        p,
		s:        s,
		c:        c,
		confirms: c.NotifyPublish(make(chan amqp.Confirmation, confirmBuffer)),
		returns:  c.NotifyReturn(make(chan amqp.Return, returnBuffer)),
		closed:   c.NotifyClose(make(chan *amqp.Error, 1)),
		hdr:      make(amqp.Table, 4),
		headTag:  1,
	}
}

// run handles confirms and returns until the channel closes or the session
// is torn down; then it fails everything unconfirmed with ErrUnavailable.
func (l *lane) run() {
	returns := l.returns
	drainReturns := func() {
		for returns != nil {
			select {
			case r, ok := <-returns:
				if !ok {
					returns = nil
					return
				}
				l.onReturn(&r)
			default:
				return
			}
		}
	}
	for {
		select {
		case c, ok := <-l.confirms:
			if !ok {
				l.closedByBroker()
				return
			}
			l.mu.Lock()
			drainReturns()
			l.onConfirm(c)
			// Take what else is queued under the same lock, a bounded
			// amount so that publishers are not kept waiting.
			for k, more := 0, true; more && k < 256; k++ {
				select {
				case c, ok = <-l.confirms:
					if !ok {
						l.mu.Unlock()
						l.closedByBroker()
						return
					}
					drainReturns()
					l.onConfirm(c)
				default:
					more = false
				}
			}
			l.mu.Unlock()
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			l.mu.Lock()
			l.onReturn(&r)
			l.mu.Unlock()
		case <-l.s.stop:
			l.die(errors.New("connection closed"))
			return
		}
	}
}

// closedByBroker ends a lane whose channel closed. A channel the broker
// closed because a message was larger than it takes is replaced on the
// same connection: only this lane's unconfirmed messages fail, not every
// ring in flight on the connection. Any other close (the connection's, an
// exchange deleted) kills the session, which reconnects and declares again.
func (l *lane) closedByBroker() {
	reason := l.closeReason()
	n := brokerMaxBody(reason)
	if n > 0 {
		// learned before the unconfirmed messages fail, and also when the
		// lane had failed already (a publish saw the channel closed first)
		l.p.learnMaxBody(n)
	}
	if n == 0 || l.s.conn.IsClosed() {
		l.die(reason)
		return
	}
	l.mu.Lock()
	l.failLocked(reason)
	l.mu.Unlock()
	l.s.replace(l)
}

func (l *lane) closeReason() error {
	select {
	case e, ok := <-l.closed:
		if ok && e != nil {
			return fmt.Errorf("channel closed: %w", e)
		}
	default:
	}
	return errors.New("channel closed")
}

// onConfirm settles the oldest unconfirmed message. Called with mu held.
func (l *lane) onConfirm(c amqp.Confirmation) {
	if l.dead != nil {
		return
	}
	if l.q.len() == 0 || c.DeliveryTag != l.headTag {
		// Cannot happen with amqp091's resequenced confirms; if it does, no
		// result of this lane can be trusted any more.
		err := fmt.Errorf("confirm for delivery tag %d, expected %d (%d unconfirmed)", c.DeliveryTag, l.headTag, l.q.len())
		l.p.log.Error("rabbitmq confirm out of sequence", "err", err)
		l.dieLocked(err)
		return
	}
	e := l.q.pop()
	l.headTag++
	l.p.metrics.latency.Observe(time.Since(e.sent).Seconds())
	var res error
	switch {
	case !c.Ack:
		res = ErrNacked
	case e.returned:
		res = ErrUnroutable
	}
	if e.b.at != nil && res == nil && !e.b.abandoned {
		e.b.at[e.i] = l.p.cfg.Now()
	}
	e.b.resolve(e.i, res)
}

// onReturn marks the unconfirmed message(s) the broker returned. Returns are
// matched by message id and routing key; should the same id be in flight
// twice with the same key, every copy is marked: reporting a delivered ring
// as failed costs a duplicate, reporting a returned one as rung loses it.
// Called with mu held.
func (l *lane) onReturn(r *amqp.Return) {
	// "<id>" or, for an occurrence of a recurring clock, "<id>:<ms>"
	clockID, _, _ := strings.Cut(r.MessageId, ":")
	id, err := strconv.ParseInt(clockID, 10, 64)
	if err != nil {
		l.p.log.Error("rabbitmq return without a clock id", "message_id", r.MessageId, "routing_key", r.RoutingKey)
		return
	}
	found := false
	for k := range l.q.len() {
		e := l.q.at(k)
		if e.id == id && e.key == r.RoutingKey {
			e.returned = true
			found = true
		}
	}
	if !found && l.dead == nil {
		l.p.log.Error("rabbitmq return for no unconfirmed message", "message_id", r.MessageId, "routing_key", r.RoutingKey)
	}
	if found {
		l.p.warnUnroutable(r.RoutingKey)
	}
}

// warnUnroutable says, at most once a minute per application, that the
// broker returned a ring because no queue is bound for its application:
// without this line a forgotten `clockctl bind` shows only as clocks that
// retry and never ring.
func (p *Publisher) warnUnroutable(app string) {
	ok, suppressed := p.unroutable.Allow(app, 1)
	if !ok {
		return
	}
	fix := "clockctl bind -app " + app
	if p.cfg.Exchange != specExchange {
		fix += " -exchange " + p.cfg.Exchange
	}
	p.log.Warn("rings unroutable: no queue is bound for the application, so its clocks retry and do not ring; bind one",
		"application", app, "exchange", p.cfg.Exchange, "fix", fix, "returns_not_logged", suppressed)
}

// die fails everything unconfirmed and kills the session.
func (l *lane) die(reason error) {
	l.mu.Lock()
	l.dieLocked(reason)
	l.mu.Unlock()
}

func (l *lane) dieLocked(reason error) {
	l.failLocked(reason)
	l.s.kill(reason)
}

// failLocked fails everything unconfirmed on the lane, for good.
func (l *lane) failLocked(reason error) {
	if l.dead == nil {
		l.dead = fmt.Errorf("%w: %w", ErrUnavailable, reason)
		// A message larger than the broker takes closed the channel
		// (closedByBroker learned the limit): from now on such messages
		// fail in publish, unsent, instead of closing a channel at each
		// retry. The one that did it, and any other as large, failed an
		// attempt; the rest of the lane is unknown as ever.
		most := int(l.p.maxBody.Load())
		for l.q.len() > 0 {
			e := l.q.pop()
			err := l.dead
			if most > 0 && e.size > most {
				err = tooLarge(e.size, most)
			}
			e.b.resolve(e.i, err)
		}
		l.q = entryQueue{}
	}
}

// brokerMaxBody is the limit a broker's refusal of a message too large
// names ("PRECONDITION_FAILED - message size 8000 is larger than configured
// max size 4096"), or 0 when err is no such refusal.
func brokerMaxBody(err error) int {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed {
		return 0
	}
	_, after, ok := strings.Cut(ae.Reason, "larger than configured max size ")
	if !ok {
		return 0
	}
	end := strings.IndexFunc(after, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(after)
	}
	n, err := strconv.Atoi(after[:end])
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// learnMaxBody keeps n, the limit a refusal named, and says so once per
// limit learned.
func (p *Publisher) learnMaxBody(n int) {
	if p.maxBody.Swap(int64(n)) != int64(n) {
		p.log.Warn("rabbitmq refuses messages larger than its max_message_size: clocks with larger payloads fail their attempts unsent until it is raised (and the broker restarted) or their payloads are made smaller",
			"max_message_size", n)
	}
}

func tooLarge(size, most int) error {
	return fmt.Errorf("%w: a body of %d bytes, the broker takes at most %d", ErrTooLarge, size, most)
}

// PublishBatch publishes msgs pipelined on one confirm channel (all
// publishes, then one wait for all confirms) and returns one error per
// message, in order. nil means the broker acked the message and did not
// return it; otherwise the error wraps ErrUnroutable, ErrNacked, ErrTimeout
// or ErrUnavailable (and ctx.Err() when ctx ended the wait). A message that
// got an error may still have been delivered (at least once). Bodies are not
// copied; they must not change during the call. Safe for concurrent use.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []Message) []error {
	return p.publishBatch(ctx, msgs, nil)
}

// PublishBatchTimed is PublishBatch that also tells when the broker's
// confirm of each message arrived (zero for the messages not confirmed).
func (p *Publisher) PublishBatchTimed(ctx context.Context, msgs []Message) ([]error, []time.Time) {
	at := make([]time.Time, len(msgs))
	return p.publishBatch(ctx, msgs, at), at
}

func (p *Publisher) publishBatch(ctx context.Context, msgs []Message, at []time.Time) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	s := p.sess.Load()
	if s == nil {
		return p.failAll(errs, p.errNotConnected)
	}
	if reason := s.blockedReason(); reason != "" {
		return p.failAll(errs, fmt.Errorf("%w: %w: connection blocked by broker: %s", ErrUnavailable, ErrNotSent, reason))
	}
	if ctx.Err() != nil {
		return p.failAll(errs, notSent(ctxError(context.Cause(ctx))))
	}

	for i := range errs {
		errs[i] = errPending
	}
	b := &batch{errs: errs, at: at, publishing: true, done: make(chan struct{})}
	l := s.acquire()
	// a write held for a broker that blocked the connection (see
	// sockConn.held) ends with ctx, the shard leases' bound among it, by
	// closing the socket: it held a SIGTERM until the alarm cleared, and
	// let the ring go out after the lease was another's (found by review)
	unhold := context.AfterFunc(ctx, s.sock.dropIfHeld)
	s.sock.cork()
	stopped := l.publish(ctx, b, msgs)
	s.sock.uncork()
	unhold()
	l.pubMu.Unlock()

	// The messages from stopped.at on were never written (a lane that
	// died, the caller's deadline, a failed publish before them): the ring
	// loop must not count them as attempts.
	unsent := notSent(stopped.err)
	l.mu.Lock()
	for i := stopped.at; i < len(msgs); i++ {
		errs[i] = unsent
	}
	b.publishing = false
	if b.remaining == 0 {
		close(b.done)
	}
	l.mu.Unlock()

	if stopped.at > 0 {
		t := time.NewTimer(p.cfg.ConfirmTimeout)
		select {
		case <-b.done:
		case <-t.C:
			err := fmt.Errorf("%w after %s", ErrTimeout, p.cfg.ConfirmTimeout)
			l.abandon(b, err)
			// No confirm for that long on a connection the broker did not
			// block: the link is as good as dead (a stall, a hung node).
			// Reconnect, so that Ready fails and no more clocks are claimed
			// and published into it meanwhile. (A blocked connection is
			// kept: a new one would be blocked again at its first publish,
			// each time at the cost of an attempt.)
			if s.blockedReason() == "" {
				s.kill(err)
			}
		case <-ctx.Done():
			l.abandon(b, ctxError(context.Cause(ctx)))
		}
		t.Stop()
	}
	p.metrics.count(errs)
	return errs
}

type stop struct {
	at  int // index of the first message not published
	err error
}

// publish sends msgs in order on l (pubMu held); it stops at the first
// failure and says where.
func (l *lane) publish(ctx context.Context, b *batch, msgs []Message) stop {
	pub := amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		Timestamp:    l.p.cfg.Now(),
		Headers:      l.hdr,
	}
	var ringAt [len(RingAtFormat) + 8]byte
	for i := range msgs {
		m := &msgs[i]
		if i&63 == 63 {
			if ctx.Err() != nil {
				return stop{i, ctxError(context.Cause(ctx))}
			}
		}
		id := strconv.FormatInt(m.ID, 10)
		l.hdr[HeaderApplication] = m.Application
		l.hdr[HeaderBusinessID] = m.BusinessID
		l.hdr[HeaderRingAt] = string(m.RingAt.UTC().AppendFormat(ringAt[:0], RingAtFormat))
		l.hdr[HeaderAttempt] = attempt(m.Attempt)
		if m.Occurrence.IsZero() {
			delete(l.hdr, HeaderOccurrence)
		} else {
			id += ":" + strconv.FormatInt(m.Occurrence.UnixMilli(), 10)
			l.hdr[HeaderOccurrence] = m.Occurrence.UTC().Format(RingAtFormat)
		}
		pub.ContentType = m.ContentType
		pub.MessageId = id
		pub.Body = m.Body

		// blocked by the broker under this batch (a resource alarm): the
		// rest is not sent, and costs no attempt (what was is held for
		// the broker, see sockConn.held)
		if reason := l.s.blockedReason(); reason != "" {
			return stop{i, fmt.Errorf("%w: connection blocked by broker: %s", ErrUnavailable, reason)}
		}
		l.mu.Lock()
		if l.dead != nil {
			err := l.dead
			l.mu.Unlock()
			return stop{i, err}
		}
		if most := int(l.p.maxBody.Load()); most > 0 && len(m.Body) > most {
			b.errs[i] = tooLarge(len(m.Body), most) // known refused: not sent
			l.mu.Unlock()
			continue
		}
		l.q.push(entry{b: b, i: int32(i), id: m.ID, key: m.Application, sent: time.Now(), size: len(m.Body)})
		b.remaining++
		l.mu.Unlock()

		if _, err := l.c.PublishWithDeferredConfirm(l.p.cfg.Exchange, m.Application, true, false, pub); err != nil {
			// amqp091 gave the tag back: take the entry back too.
			err = fmt.Errorf("%w: publish: %w", ErrUnavailable, err)
			l.mu.Lock()
			if l.dead == nil {
				l.q.dropLast()
				if l.c.IsClosed() && !l.s.conn.IsClosed() {
					// The broker closed the channel under this batch (a
					// message before this one refused as too large): the
					// lane's goroutine reads why and decides, replacing the
					// channel or killing the session. This message surely
					// did not leave.
					b.resolve(int32(i), notSent(err))
					l.mu.Unlock()
					return stop{i + 1, err}
				}
				// Otherwise give up on the lane, whose tag count is no
				// longer certain.
				b.resolve(int32(i), err)
				l.dieLocked(err)
			}
			l.mu.Unlock()
			return stop{i + 1, err}
		}
	}
	return stop{len(msgs), nil}
}

// notSent marks err (nil stays nil) as the error of a message that never
// left this process: the ring loop counts no attempt for it.
func notSent(err error) error {
	if err == nil || errors.Is(err, ErrNotSent) {
		return err
	}
	return fmt.Errorf("%w (%w)", err, ErrNotSent)
}

// abandon gives every still pending message of b the error err.
func (l *lane) abandon(b *batch, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, e := range b.errs {
		if e == errPending {
			b.errs[i] = err
		}
	}
	b.abandoned = true
}

func (p *Publisher) failAll(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	p.metrics.count(errs)
	return errs
}

func ctxError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

func attempt(n int) int32 {
	return int32(max(0, min(n, 1<<31-1)))
}

// entryQueue is a FIFO of entries that reuses its storage (a circular buffer).
type entryQueue struct {
	buf  []entry
	head int
	n    int
}

func (r *entryQueue) len() int { return r.n }

func (r *entryQueue) at(k int) *entry { return &r.buf[(r.head+k)%len(r.buf)] }

func (r *entryQueue) push(e entry) {
	if r.n == len(r.buf) {
		nb := make([]entry, max(64, 2*len(r.buf)))
		for k := range r.n {
			nb[k] = *r.at(k)
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = e
	r.n++
}

func (r *entryQueue) pop() entry {
	p := &r.buf[r.head]
	e := *p
	*p = entry{}
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return e
}

func (r *entryQueue) dropLast() {
	*r.at(r.n - 1) = entry{}
	r.n--
}
