package rabbit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// session is one AMQP connection with its confirm channels (lanes). Run owns
// it: it starts the lane goroutines and, in teardown, stops and waits for them.
type session struct {
	sock        *sockConn
	conn        *amqp.Connection
	lanes       []atomic.Pointer[lane] // a lane may be replaced (replace)
	rr          atomic.Uint32
	connClosed  chan *amqp.Error
	blocked     chan amqp.Blocking
	blockReason atomic.Pointer[string]

	dead     chan struct{} // closed by kill
	deadOnce sync.Once
	deadErr  error // written once before dead is closed

	stop chan struct{} // closed by teardown: lanes fail what is left and exit
	wg   sync.WaitGroup
}

// connect dials, declares the exchange and opens the confirm channels. The
// whole setup is bounded by DialTimeout and by ctx: either closes the socket,
// which makes every pending amqp091 call fail.
func (p *Publisher) connect(ctx context.Context, url string) (_ *session, err error) {
	var (
		mu     sync.Mutex
		raw    net.Conn
		sock   *sockConn
		closed error // why a guard below closed raw
	)
	closeRaw := func(why error) {
		mu.Lock()
		defer mu.Unlock()
		if closed == nil {
			closed = why
		}
		if raw != nil {
			_ = raw.Close()
		}
	}
	errTimeout := fmt.Errorf("connect timed out after %s", p.cfg.DialTimeout)
	stopCtx := context.AfterFunc(ctx, func() { closeRaw(ctx.Err()) })
	timer := time.AfterFunc(p.cfg.DialTimeout, func() { closeRaw(errTimeout) })
	var conn *amqp.Connection
	defer func() {
		stopCtx()
		timer.Stop()
		if err == nil {
			return
		}
		if conn != nil {
			mu.Lock()
			c := raw
			mu.Unlock()
			closeHard(conn, c)
		}
		// Also stops amqp091's reader goroutine at once (DialConfig returns
		// a half-open connection on handshake errors).
		closeRaw(err)
		mu.Lock()
		defer mu.Unlock()
		if closed != err {
			err = closed // the guard's reason explains the error
		}
	}()

	dial := func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: p.cfg.DialTimeout}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if closed != nil {
			_ = c.Close()
			return nil, closed
		}
		raw = c
		if p.testConn != nil {
			p.testConn(c)
		}
		sock = &sockConn{Conn: c, timeout: p.cfg.ConfirmTimeout, stopping: &p.stopping}
		return sock, nil
	}
	props := amqp.NewConnectionProperties()
	props["connection_name"] = p.cfg.ConnectionName
	c, err := amqp.DialConfig(url, amqp.Config{Dial: dial, Properties: props})
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	conn = c

	var lanes []*lane
	s := &session{
		sock:       sock,
		conn:       conn,
		connClosed: conn.NotifyClose(make(chan *amqp.Error, 1)),
		blocked:    conn.NotifyBlocked(make(chan amqp.Blocking, 4)),
		dead:       make(chan struct{}),
		stop:       make(chan struct{}),
	}
	for i := range p.cfg.Channels {
		ch, err := conn.Channel()
		if err != nil {
			return nil, fmt.Errorf("open channel: %w", err)
		}
		if i == 0 {
			if err := ch.ExchangeDeclare(p.cfg.Exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
				return nil, fmt.Errorf("declare exchange %q: %w", p.cfg.Exchange, err)
			}
		}
		l := newLane(p, s, ch)
		if err := ch.Confirm(false); err != nil {
			return nil, fmt.Errorf("confirm mode: %w", err)
		}
		lanes = append(lanes, l)
	}
	if !stopCtx() || !timer.Stop() {
		return nil, errTimeout // replaced by the guard's reason
	}
	s.lanes = make([]atomic.Pointer[lane], len(lanes))
	for i, l := range lanes {
		s.lanes[i].Store(l)
		s.wg.Go(l.run)
	}
	return s, nil
}

// replace opens a confirm channel in place of old, whose channel the broker
// closed while the connection stayed up, and starts its lane. It is called
// by old's own goroutine (so s.wg is above zero). A failure kills the
// session.
func (s *session) replace(old *lane) {
	for i := range s.lanes {
		if s.lanes[i].Load() != old {
			continue
		}
		ch, err := s.conn.Channel()
		if err != nil {
			s.kill(fmt.Errorf("reopen channel: %w", err))
			return
		}
		l := newLane(old.p, s, ch)
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			s.kill(fmt.Errorf("reopen channel: confirm mode: %w", err))
			return
		}
		s.lanes[i].Store(l)
		s.wg.Go(l.run)
		return
	}
}

// kill marks the session dead (first reason wins) so that Run tears it down.
func (s *session) kill(reason error) {
	s.deadOnce.Do(func() {
		s.deadErr = reason
		close(s.dead)
	})
}

func (s *session) reason() error {
	select {
	case <-s.dead:
		return s.deadErr
	default:
		return nil
	}
}

// hold tells the socket whether the broker blocked the connection (see
// sockConn.held).
func (s *session) hold(blocked bool) {
	if s.sock != nil {
		s.sock.hold(blocked)
	}
}

func (s *session) blockedReason() string {
	if r := s.blockReason.Load(); r != nil {
		return *r
	}
	return ""
}

// teardown closes the connection and waits for the lanes, which fail every
// unconfirmed message with ErrUnavailable.
func (s *session) teardown() {
	s.kill(errors.New("closed"))
	close(s.stop)
	// The reader goroutine of amqp091 must not stall on a full blocked
	// listener while Close waits for close-ok.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for range s.blocked {
		}
	}()
	closeHard(s.conn, s.sock.Conn)
	s.wg.Wait()
	<-drained
}

// closeHard closes conn, waiting for the broker's close-ok at most
// closeTimeout, then closes raw (the socket). CloseDeadline alone can wait
// far longer: amqp091's heartbeater moves the socket's read deadline
// forward at every heartbeat, and a broker that blocked the connection (a
// memory alarm: it reads nothing more) still sends them. A shutdown then
// hung until the supervisor's SIGKILL.
func closeHard(conn *amqp.Connection, raw net.Conn) {
	if raw != nil {
		t := time.AfterFunc(closeTimeout, func() { _ = raw.Close() })
		defer t.Stop()
	}
	_ = conn.CloseDeadline(time.Now().Add(closeTimeout))
}

// acquire picks a lane for one batch and locks it for publishing: a free lane
// if there is one, round robin otherwise.
func (s *session) acquire() *lane {
	n := uint32(len(s.lanes))
	start := s.rr.Add(1)
	for k := range n {
		l := s.lanes[(start+k)%n].Load()
		if l.pubMu.TryLock() {
			return l
		}
	}
	l := s.lanes[start%n].Load()
	l.pubMu.Lock()
	return l
}

// corkMax bounds the bytes held back while corked.
const corkMax = 64 << 10

// sockConn wraps the broker socket. It puts a write deadline on every write: when
// the broker stops reading (resource alarm, dead peer) a publish cannot block
// longer than the confirm timeout; the write fails and amqp091 tears the
// connection down. While a batch is being published the socket is corked:
// amqp091 flushes after every message, sockConn instead collects the frames and
// writes them in one syscall per 64 KiB or batch.
type sockConn struct {
	net.Conn
	timeout time.Duration
	// held: the broker blocked the connection (connection.blocked, a
	// resource alarm). It reads nothing more until the alarm clears, so a
	// batch larger than the socket buffers cannot be written; the write
	// then waits for it, past the deadline, rather than fail: the link is
	// alive, and cutting it cost every message in flight an attempt, and
	// the next connection (not known to be blocked until its first
	// publish) the same, every 5 s, until the clocks were dead (found by
	// review). Closing the socket (teardown) still ends the write, and so
	// does a broker silent for heldSilence (it sends its heartbeats while
	// it blocks). amqp091's heartbeater, which moves the read deadline on,
	// waits behind such a write: while held, no read deadline is set, or
	// amqp091 read its own timeout as a dead broker.
	held     atomic.Bool
	lastRead atomic.Int64  // unix ns of the last read that brought bytes
	silence  time.Duration // heldSilence when 0 (tests shorten it)
	stopping *atomic.Bool  // the process is stopping: a held write gives up

	mu    sync.Mutex
	corks int
	buf   []byte
}

func (c *sockConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corks > 0 && len(c.buf)+len(b) <= corkMax {
		c.buf = append(c.buf, b...)
		return len(b), nil
	}
	if err := c.flushLocked(); err != nil {
		return 0, err
	}
	return c.write(b)
}

// cork holds writes back until the matching uncork.
func (c *sockConn) cork() {
	c.mu.Lock()
	c.corks++
	c.mu.Unlock()
}

// uncork writes what is held back. On failure it closes the socket, so that
// amqp091 shuts the connection down and every unconfirmed message fails.
func (c *sockConn) uncork() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corks--
	if err := c.flushLocked(); err != nil {
		_ = c.Conn.Close()
	}
}

func (c *sockConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.write(c.buf)
	c.buf = c.buf[:0]
	return err
}

func (c *sockConn) write(b []byte) (int, error) {
	written := 0
	for {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
			return written, err
		}
		n, err := c.Conn.Write(b[written:])
		written += n
		if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) || !c.held.Load() {
			return written, err
		}
		// blocked by the broker: the rest goes once it reads again
		if c.stopping != nil && c.stopping.Load() {
			return written, fmt.Errorf("stopping while the broker blocks the connection: %w", err)
		}
		if silent := time.Since(time.Unix(0, c.lastRead.Load())); silent > cmp.Or(c.silence, heldSilence) {
			return written, fmt.Errorf("broker blocked the connection and sent nothing for %s: %w", silent.Round(time.Second), err)
		}
		// amqp091's heartbeater may have set its read deadline just before
		// hold cleared it: none while held
		_ = c.Conn.SetReadDeadline(time.Time{})
	}
}

// heldSilence is how long a broker that blocked the connection may send
// nothing (not even its heartbeats, every 10 s by amqp091's default)
// before a write held for it gives up.
const heldSilence = 30 * time.Second

func (c *sockConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.lastRead.Store(time.Now().UnixNano())
	}
	return n, err
}

// SetReadDeadline is amqp091's (its heartbeater's): none while the broker
// holds the connection (see held).
func (c *sockConn) SetReadDeadline(t time.Time) error {
	if c.held.Load() {
		t = time.Time{}
	}
	return c.Conn.SetReadDeadline(t)
}

// hold says whether the broker blocked the connection (see held).
// dropIfHeld closes the socket when a write is held for the broker (see
// held), which ends that write; otherwise it does nothing.
func (c *sockConn) dropIfHeld() {
	if c != nil && c.held.Load() {
		_ = c.Conn.Close()
	}
}

func (c *sockConn) hold(blocked bool) {
	c.held.Store(blocked)
	if blocked {
		c.lastRead.Store(time.Now().UnixNano()) // its notice was just read
		_ = c.Conn.SetReadDeadline(time.Time{})
	}
}
