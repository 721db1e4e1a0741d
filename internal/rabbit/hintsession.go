package rabbit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/alarm"
)

// probeType is the type of the empty message each instance publishes on
// the hints and tokens exchanges every checkEvery to see it come back to
// its own queue. Others ignore it (an instance of an earlier release takes
// it for a message of no hints).
const probeType = "clockd.probe"

// maxUnconfirmed bounds the messages a session has published and the
// broker not yet confirmed; past it, what waits goes as confirms come.
// The listener channels amqp091 fills (confirms, returns) have room for
// that many: a full one would stall the whole connection.
const maxUnconfirmed = 64

// hintsPerMessage is how many hints one message carries at most.
const hintsPerMessage = 2000

// errUnroutable is why a hint that the broker returned was dropped.
var errUnroutable = errors.New("routed to no queue: this instance's queue is no longer bound to the exchange")

// unconfirmed is a message published on the session's channel whose
// confirm has not come: what it carried is lost if the channel closes
// first (a publish on a deleted exchange closes it, and no publish call
// reports it).
type unconfirmed struct {
	tag                uint64
	ds                 []alarm.Due // a message of hints
	revokes, forgotten []int64     // a message of token ids
}

// hintSession is one connection of Hints: one channel in confirm mode,
// publishing with mandatory, and consuming from one exclusive queue bound
// to the hints and tokens exchanges.
type hintSession struct {
	h       *Hints
	ch      *amqp.Channel
	queue   string
	sent    []unconfirmed        // in the order of their delivery tags
	blocked bool                 // something waits for room among sent
	probes  map[string]probe     // exchange -> the probe sent on it and not back yet
	seq     uint64               // the last probe id
	healed  map[string]time.Time // exchange -> when it was bound again here
	// held: the broker blocked the connection (a resource alarm); no
	// probe is judged or sent meanwhile (see check)
	held bool
}

func (h *Hints) session(ctx context.Context, url string) (err error) {
	var raw net.Conn // the socket, closed if the broker's close-ok does not come
	dial := func(network, addr string) (net.Conn, error) {
		c, err := amqp.DefaultDial(5*time.Second)(network, addr)
		raw = c
		return c, err
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: dial, Properties: amqp.Table{"connection_name": "clockd-hints " + h.self}})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	// bounded like the publisher's: a slow, stalled or blocked broker link
	// must not hold up the shutdown (amqp091's Close waits without a
	// deadline)
	defer closeHard(conn, raw)
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("channel: %w", err)
	}
	// confirms, so that a hint the broker did not take is known: without
	// them a publish on a deleted exchange reports nothing
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm mode: %w", err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, maxUnconfirmed+1))
	returns := ch.NotifyReturn(make(chan amqp.Return, maxUnconfirmed+1))
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-message-ttl": int32(30000)})
	if err != nil {
		return fmt.Errorf("declare hint queue: %w", err)
	}
	s := &hintSession{h: h, ch: ch, queue: q.Name, probes: map[string]probe{}, healed: map[string]time.Time{}}
	for _, x := range []string{h.exchange, h.tokens} {
		if err := rpc(ctx, func() error { return s.bind(x) }); err != nil {
			return err
		}
	}
	msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume hints: %w", err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	blockings := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	h.connected.Store(true)
	h.bound.Add(1)
	if h.failWarned.Swap(false) {
		h.log.Info("hint connection works again")
	}
	if h.onConnected != nil {
		h.onConnected()
	}
	// what waits (queued without a connection, or put back by a session
	// whose publish failed) goes now, not at the next Send or Revoke
	h.mu.Lock()
	waiting := len(h.pending) + len(h.revokes) + len(h.forgotten)
	h.mu.Unlock()
	if waiting > 0 {
		h.wake()
	}
	defer func() {
		h.connected.Store(false)
		// what the broker did not confirm may not have gone: hints are
		// asked for, token ids go again at the next connection. At a
		// shutdown they most likely went, and nothing comes after.
		if ctx.Err() == nil {
			for _, u := range s.sent {
				s.lost(u, err)
			}
		}
		// the hints still waiting go at the next connection, if any: ask
		// for their rescans now
		h.mu.Lock()
		waiting := slices.Clone(h.pending)
		h.mu.Unlock()
		h.ask(waiting)
	}()
	// why the channel closed: amqp091 sends it before it closes the
	// consumer's and the listeners' channels
	closedErr := func(what string, e *amqp.Error) error {
		if e == nil {
			return errors.New(what)
		}
		return fmt.Errorf("%s: %w", what, e)
	}
	chanErr := func(what string) error {
		select {
		case e := <-chClosed:
			if e != nil {
				return closedErr("hint channel closed", e)
			}
		default:
		}
		return errors.New(what)
	}
	tick := time.NewTicker(h.checkEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-closed:
			return closedErr("connection closed", e)
		case e := <-chClosed:
			return closedErr("hint channel closed", e)
		case m, ok := <-msgs:
			if !ok {
				return chanErr("hint consumer closed")
			}
			s.receive(m)
		case c, ok := <-confirms:
			if !ok {
				return chanErr("hint confirms closed")
			}
			s.confirmed(c)
		case b, ok := <-blockings:
			if !ok {
				blockings = nil
				continue
			}
			s.blocking(b.Active)
		case r, ok := <-returns:
			if !ok {
				return chanErr("hint returns closed")
			}
			if err := s.returned(ctx, r); err != nil {
				return err
			}
		case <-tick.C:
			// what has come is read first: a probe back in time is not
			// taken for a lost one because this loop was busy
			for drained := false; !drained; {
				select {
				case m, ok := <-msgs:
					if !ok {
						return chanErr("hint consumer closed")
					}
					s.receive(m)
				default:
					drained = true
				}
			}
			if err := s.check(ctx); err != nil {
				return err
			}
		case <-h.signal:
			if err := s.flush(ctx); err != nil {
				return err
			}
		}
	}
}

// bind declares exchange x and binds the session's queue to it; both are
// idempotent.
func (s *hintSession) bind(x string) error {
	// auto-delete: gone when the last instance's queue is
	// (tests and renamed exchanges leave nothing behind)
	if err := s.ch.ExchangeDeclare(x, "fanout", false, true, false, false, nil); err != nil {
		return fmt.Errorf("declare %s: %w", x, err)
	}
	if err := s.ch.QueueBind(s.queue, "", x, false, nil); err != nil {
		return fmt.Errorf("bind hint queue to %s: %w", x, err)
	}
	return nil
}

// receive handles a message from the queue.
func (s *hintSession) receive(m amqp.Delivery) {
	h := s.h
	switch {
	case m.AppId == h.self:
		// fanout brings this instance's own messages back: its probes
		// tell that its queue is still bound
		if p, ok := s.probes[m.Exchange]; ok && m.Type == probeType && p.id == m.MessageId {
			delete(s.probes, m.Exchange)
		}
	case m.Type == probeType:
	case m.Exchange == h.tokens:
		h.tokenMessage(m)
	default:
		h.deliver(m.Body)
	}
}

// publish publishes one message, mandatory, and remembers what it carried
// until it is confirmed.
func (s *hintSession) publish(ctx context.Context, x, typ, id string, body []byte, u unconfirmed) error {
	u.tag = s.ch.GetNextPublishSeqNo()
	if err := s.ch.PublishWithContext(ctx, x, "", true, false,
		amqp.Publishing{AppId: s.h.self, Type: typ, MessageId: id, ContentType: "application/octet-stream", Body: body}); err != nil {
		return err
	}
	s.sent = append(s.sent, u)
	return nil
}

// flush publishes what waits, as far as there is room among the
// unconfirmed.
func (s *hintSession) flush(ctx context.Context) error {
	h := s.h
	room := maxUnconfirmed - len(s.sent)
	h.mu.Lock()
	var forgotten, revokes []int64
	// acknowledgements first: others' Revoke calls wait for them
	if len(h.forgotten) > 0 && room > 0 {
		forgotten, h.forgotten = h.forgotten, nil
		room--
	}
	if len(h.revokes) > 0 && room > 0 {
		revokes, h.revokes = h.revokes, nil
		room--
	}
	n := min(len(h.pending), max(room, 0)*hintsPerMessage)
	ds := h.pending[:n:n]
	h.pending = h.pending[n:]
	s.blocked = len(h.forgotten)+len(h.revokes)+len(h.pending) > 0
	h.mu.Unlock()

	if err := s.publishIDs(ctx, tokenForgottenType, forgotten); err != nil {
		h.putBack(ds, revokes, forgotten)
		return err
	}
	if err := s.publishIDs(ctx, tokenRevokedType, revokes); err != nil {
		h.putBack(ds, revokes, nil)
		return err
	}
	for len(ds) > 0 {
		n := min(len(ds), hintsPerMessage)
		if err := s.publish(ctx, h.exchange, "", "", encodeHints(ds[:n]), unconfirmed{ds: ds[:n]}); err != nil {
			reason := dropNotSent
			if ctx.Err() != nil {
				reason = dropShutdown
			}
			h.drop(reason, len(ds), err)
			h.ask(ds)
			return fmt.Errorf("publish hints: %w", err)
		}
		ds = ds[n:]
	}
	return nil
}

// publishIDs publishes token ids of one type on the token exchange (none:
// nothing).
func (s *hintSession) publishIDs(ctx context.Context, typ string, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	body := make([]byte, 0, 8*len(ids))
	for _, id := range ids {
		body = binary.BigEndian.AppendUint64(body, uint64(id))
	}
	u := unconfirmed{revokes: ids}
	if typ == tokenForgottenType {
		u = unconfirmed{forgotten: ids}
	}
	if err := s.publish(ctx, s.h.tokens, typ, "", body, u); err != nil {
		return fmt.Errorf("publish token ids: %w", err)
	}
	return nil
}

// confirmed takes the broker's confirm of one message (amqp091 gives them
// one by one, in order).
func (s *hintSession) confirmed(c amqp.Confirmation) {
	for len(s.sent) > 0 && s.sent[0].tag <= c.DeliveryTag {
		u := s.sent[0]
		s.sent = s.sent[1:]
		if u.tag == c.DeliveryTag && !c.Ack {
			s.lost(u, errors.New("nacked by the broker"))
		}
	}
	if s.blocked && len(s.sent) < maxUnconfirmed {
		s.blocked = false
		s.h.wake()
	}
}

// lost handles a message the broker did not take: its hints are dropped
// and their shards' owners asked to rescan; its token ids go again.
func (s *hintSession) lost(u unconfirmed, err error) {
	h := s.h
	if len(u.ds) > 0 {
		if err == nil {
			err = errors.New("session ended before the broker confirmed them")
		}
		h.drop(dropNotSent, len(u.ds), err)
		h.ask(u.ds)
	}
	if len(u.revokes)+len(u.forgotten) > 0 {
		h.putBack(nil, u.revokes, u.forgotten)
		h.wake()
	}
}

// returned takes a message the broker routed to no queue: not even this
// instance's own is bound to that exchange any more. Its hints are asked
// for (no one else heard them either), and the queue bound again.
func (s *hintSession) returned(ctx context.Context, r amqp.Return) error {
	h := s.h
	if r.Exchange == h.exchange && r.Type == "" {
		ds := decodeHints(r.Body)
		h.drop(dropNotSent, len(ds), errUnroutable)
		h.ask(ds)
	}
	return s.heal(ctx, r.Exchange, "a message published on it was routed to no queue")
}

// check runs every checkEvery: an exchange whose probe has not come back
// within probeLost checks is bound again; one with no probe out gets a new
// one. A probe that is only late (a slow broker, flow control) is waited
// for: taken for lost after one check, it made a slow broker look like a
// deleted exchange, with a rescan of every shard each second (found by
// review).
func (s *hintSession) check(ctx context.Context) error {
	if s.held {
		return nil // blocked by the broker: no verdict, no probe (see blocking)
	}
	for _, x := range []string{s.h.exchange, s.h.tokens} {
		if p, out := s.probes[x]; out {
			if time.Since(p.sent) < probeLost*s.h.checkEvery {
				continue
			}
			if err := s.heal(ctx, x, "this instance's probe did not come back: its queue was no longer bound"); err != nil {
				return err
			}
		}
		if len(s.sent) >= maxUnconfirmed {
			delete(s.probes, x) // no probe this round, no verdict at the next
			continue
		}
		// on a deleted exchange the broker closes the channel: the
		// session ends, and the next one declares it again
		s.seq++
		id := strconv.FormatUint(s.seq, 10)
		if err := s.publish(ctx, x, probeType, id, nil, unconfirmed{}); err != nil {
			return fmt.Errorf("publish probe on %s: %w", x, err)
		}
		s.probes[x] = probe{id: id, sent: time.Now()}
	}
	return nil
}

// blocking takes the broker's connection.blocked (a resource alarm: it
// takes nothing more until the alarm clears) and connection.unblocked. A
// probe cannot come back while the connection is blocked: judged lost,
// every alarm of more than probeLost checks was reported as a deleted
// exchange, with a rescan of every shard and the cached tokens forgotten,
// and the heal's bind waited out the alarm (found by review). The probes
// out get a new term from the unblocking.
func (s *hintSession) blocking(active bool) {
	s.held = active
	if !active {
		for x, p := range s.probes {
			p.sent = time.Now()
			s.probes[x] = p
		}
	}
}

// probe is a probe sent and not back yet.
type probe struct {
	id   string
	sent time.Time
}

// probeLost is how many checks a probe may take to come back before its
// exchange is taken to have lost this instance's binding.
const probeLost = 5

// rpc runs fn, a channel method that waits for the broker's answer with
// no deadline of its own, and gives up when ctx is done: the session then
// ends, and its deferred CloseDeadline ends fn (found by review: a heal on
// a stalled broker link held the shutdown for amqp091's heartbeat, 30 s).
func rpc(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// heal declares exchange x and binds the queue to it again, and has what
// was sent on it meanwhile read again (OnConnected). Several signs of one
// loss (returns of messages published together) heal once.
func (s *hintSession) heal(ctx context.Context, x, cause string) error {
	h := s.h
	if x != h.exchange && x != h.tokens {
		return nil
	}
	if t, ok := s.healed[x]; ok && time.Since(t) < h.checkEvery/2 {
		return nil
	}
	if err := rpc(ctx, func() error { return s.bind(x) }); err != nil {
		return err
	}
	s.healed[x] = time.Now()
	delete(s.probes, x) // a probe sent before is no evidence now
	h.rebound(x, cause)
	if h.onConnected != nil {
		h.onConnected()
	}
	return nil
}
