// Package rabbit publishes rings to RabbitMQ with amqp091-go: mandatory
// publishes on confirm channels, pipelined per batch, with returns matched to
// their messages and a connection that Run keeps alive.
package rabbit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/backoff"
	"github.com/clockd/clockd/internal/lograte"
)

// Message is one ring.
type Message struct {
	ID          int64     // clock id -> AMQP message_id in decimal
	Application string    // routing key and header x-clock-application
	BusinessID  string    // header x-clock-business-id
	RingAt      time.Time // header x-clock-ring-at, RFC 3339 with milliseconds, UTC
	Attempt     int       // header x-clock-attempt (1, 2, ...), an int32 header value
	// Occurrence is set for an occurrence of a recurring clock: its
	// scheduled time; the message_id is then "<id>:<ms since the epoch>"
	// and the header x-clock-occurrence carries it (RFC 3339).
	Occurrence  time.Time
	ContentType string
	Body        []byte
}

// Header names of a ring.
const (
	HeaderApplication = "x-clock-application"
	HeaderBusinessID  = "x-clock-business-id"
	HeaderRingAt      = "x-clock-ring-at"
	HeaderAttempt     = "x-clock-attempt"
	HeaderOccurrence  = "x-clock-occurrence"
)

// RingAtFormat is the layout of the x-clock-ring-at header (always UTC).
const RingAtFormat = "2006-01-02T15:04:05.000Z07:00"

// Per-message results of PublishBatch other than nil. Errors returned by
// PublishBatch wrap one of these (check with errors.Is); an error caused by
// the caller's context also wraps ctx.Err().
var (
	// ErrUnroutable: the broker returned the message (mandatory, no queue bound).
	ErrUnroutable = errors.New("rabbit: message unroutable")
	// ErrNacked: the broker nacked the message.
	ErrNacked = errors.New("rabbit: message nacked by broker")
	// ErrTimeout: no confirm within ConfirmTimeout (or the caller's deadline).
	ErrTimeout = errors.New("rabbit: confirm timeout")
	// ErrUnavailable: not connected, connection blocked, or connection or
	// channel lost before the confirm.
	ErrUnavailable = errors.New("rabbit: broker unavailable")
	// ErrTooLarge: the message's body is larger than the broker takes
	// (its max_message_size). The broker refuses such a message by
	// closing the channel; once it has, the publisher knows the limit and
	// fails larger messages without sending them. Counted as nacked.
	ErrTooLarge = errors.New("rabbit: message larger than the broker's max_message_size")
	// ErrNotSent comes with another error when the message surely did not
	// leave this process: not connected, the connection blocked, or the
	// batch stopped before it (its lane died, the caller's deadline).
	ErrNotSent = errors.New("message not sent")
)

// Config configures a Publisher. Zero durations take their defaults.
type Config struct {
	// URL is one broker URL, or the URLs of several nodes of one cluster
	// separated by commas. The publisher is connected to one node at a time
	// and moves to the next in the list when it loses it.
	URL            string
	Exchange       string        // declared durable, type direct, at each (re)connect
	ConfirmTimeout time.Duration // default 5s; also bounds a blocked socket write
	ReconnectMin   time.Duration // default 100ms
	ReconnectMax   time.Duration // default 5s
	Logger         *slog.Logger
	Registerer     prometheus.Registerer // nil: no metrics registered
	Now            func() time.Time      // timestamp property; default time.Now

	// Channels is the number of confirm channels on the connection; a batch
	// goes to one of them, so concurrent batches do not wait for each other's
	// publishing. Default 2.
	Channels int
	// DialTimeout bounds one connection attempt: TCP connect, AMQP handshake,
	// exchange declaration and channel setup. Default 5s.
	DialTimeout time.Duration
	// ConnectionName is shown by the broker (connection_name client property).
	// Default "clockd".
	ConnectionName string
}

const (
	defaultConfirmTimeout = 5 * time.Second
	defaultReconnectMin   = 100 * time.Millisecond
	defaultReconnectMax   = 5 * time.Second
	defaultChannels       = 2
	defaultDialTimeout    = 5 * time.Second
	maxChannels           = 64
	closeTimeout          = 2 * time.Second
	// unroutableLogEvery: at most one WARN per application this often about
	// rings that no queue takes.
	unroutableLogEvery = time.Minute
	// specExchange is the ring exchange of the SPEC, which clockctl bind assumes.
	specExchange = "clock.ring"
)

// Publisher publishes rings. Create it with New, keep it connected with Run.
type Publisher struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	retry   backoff.Policy // reconnect delays
	// stopping: the process is stopping (Stopping); a write held for a
	// broker that blocked the connection gives up
	stopping atomic.Bool

	// unroutable holds back repeated warnings about an application whose
	// rings no queue takes.
	unroutable *lograte.Limiter
	// flapLog holds back repeats of a connection lost soon after it was
	// made, for the same reason
	flapLog *lograte.Limiter

	urls []string // the nodes, tried in turn from the first

	running atomic.Bool
	sess    atomic.Pointer[session] // nil while disconnected
	// maxBody is the largest body the broker takes, learned from its
	// refusal of a larger one (0: not known). It is forgotten when a
	// connection is lost for any other reason: a broker restarted with
	// another max_message_size is tried again.
	maxBody atomic.Int64
	// movingSince is set (unix nanoseconds) while the publisher moves to
	// another node after losing one, for the first round through the list.
	movingSince atomic.Int64

	mu      sync.Mutex
	readyCh chan struct{} // closed while connected; replaced on loss
	status  error         // why not ready; guarded by mu

	errNotConnected error

	// testConn, when set, sees each raw connection (tests cut it).
	testConn func(net.Conn)
}

// New validates cfg, fills defaults and registers metrics. It does not connect.
func New(cfg Config) (*Publisher, error) {
	if cfg.URL == "" {
		return nil, errors.New("rabbit: URL is required")
	}
	urls := SplitURLs(cfg.URL)
	for i, u := range urls {
		if _, err := amqp.ParseURI(u); err != nil {
			if len(urls) == 1 {
				return nil, fmt.Errorf("rabbit: URL: %w", err)
			}
			return nil, fmt.Errorf("rabbit: URL %d of %d: %w", i+1, len(urls), err)
		}
	}
	if cfg.Exchange == "" {
		return nil, errors.New("rabbit: Exchange is required")
	}
	if cfg.ConfirmTimeout < 0 || cfg.ReconnectMin < 0 || cfg.ReconnectMax < 0 || cfg.DialTimeout < 0 {
		return nil, errors.New("rabbit: durations must not be negative")
	}
	if cfg.Channels < 0 || cfg.Channels > maxChannels {
		return nil, fmt.Errorf("rabbit: Channels must be between 1 and %d", maxChannels)
	}
	if cfg.ConfirmTimeout == 0 {
		cfg.ConfirmTimeout = defaultConfirmTimeout
	}
	if cfg.ReconnectMin == 0 {
		cfg.ReconnectMin = defaultReconnectMin
	}
	if cfg.ReconnectMax == 0 {
		cfg.ReconnectMax = defaultReconnectMax
	}
	if cfg.ReconnectMin > cfg.ReconnectMax {
		return nil, fmt.Errorf("rabbit: ReconnectMin %s exceeds ReconnectMax %s", cfg.ReconnectMin, cfg.ReconnectMax)
	}
	if cfg.Channels == 0 {
		cfg.Channels = defaultChannels
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.ConnectionName == "" {
		cfg.ConnectionName = "clockd"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Publisher{
		cfg:             cfg,
		urls:            urls,
		log:             cfg.Logger.With("component", "rabbit"),
		metrics:         m,
		retry:           backoff.Policy{Min: cfg.ReconnectMin, Max: cfg.ReconnectMax},
		unroutable:      lograte.New(unroutableLogEvery, cfg.Now),
		flapLog:         lograte.New(time.Minute, time.Now),
		readyCh:         make(chan struct{}),
		status:          errors.New("rabbitmq: not connected yet"),
		errNotConnected: fmt.Errorf("%w: %w", ErrUnavailable, ErrNotSent),
	}, nil
}

// SplitURLs splits a list of broker URLs separated by commas, trimming
// spaces around each. An empty element stays (as "") for New to refuse.
func SplitURLs(list string) []string {
	urls := strings.Split(list, ",")
	for i, u := range urls {
		urls[i] = strings.TrimSpace(u)
	}
	return urls
}

// nodeName names the node of a URL for logs: host:port, never the password.
func nodeName(u string) string {
	uri, err := amqp.ParseURI(u)
	if err != nil {
		return "?"
	}
	return net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
}

// Ready returns nil when connected with confirm channels and not blocked by
// the broker; otherwise an error saying why.
//
// While the publisher moves to the next node of a cluster after losing one
// it stays ready for one round through the list, at most DialTimeout: the
// move takes a moment, the API does not need the broker meanwhile (rings
// wait, unsent, with no attempt counted), and a readiness probe that took
// the instance out of service for every node restart would do more harm
// than the wait. If no node answers within that round it is not ready.
func (p *Publisher) Ready() error {
	if s := p.sess.Load(); s != nil {
		if reason := s.blockedReason(); reason != "" {
			return fmt.Errorf("rabbitmq: connection blocked by broker: %s", reason)
		}
		return nil
	}
	if since := p.movingSince.Load(); since != 0 && time.Since(time.Unix(0, since)) < p.cfg.DialTimeout {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// WaitReady blocks until connected or ctx is done.
func (p *Publisher) WaitReady(ctx context.Context) error {
	for {
		p.mu.Lock()
		ch := p.readyCh
		p.mu.Unlock()
		if p.sess.Load() != nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for rabbitmq: %w", ctx.Err())
		}
	}
}

// Run connects, and reconnects with capped exponential backoff and jitter
// whenever the connection or one of its channels is lost, until ctx is done.
// With several URLs it connects to the first and, when a node is lost or
// does not answer, goes on at once with the next (wrapping around); it backs
// off only after a whole round through the list failed. Unconfirmed
// messages of a lost connection fail with ErrUnavailable, so the ring loop
// publishes them again (same message_id) on the next node.
// It returns nil on ctx cancel, after closing the connection and stopping
// every goroutine it started. It must not be called twice.
func (p *Publisher) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("rabbit: Run called twice")
	}
	defer p.running.Store(false)
	defer p.movingSince.Store(0)

	var (
		next      int  // index in p.urls of the node to try next
		tries     int  // failed attempts (or short sessions) since the last good connection
		warned    bool // a Warn was logged for the current outage
		connected bool // at least one connection was made
		lostAt    time.Time
		// lossLogged: the last loss was logged at WARN (else its
		// reconnection is not logged at INFO either)
		lossLogged bool
	)
	n := len(p.urls)
	// pause is called after each failed attempt: it moves to the next node
	// and sleeps only when a whole round through the list has failed.
	pause := func() bool {
		next = (next + 1) % n
		tries++
		if tries%n != 0 {
			return true
		}
		p.movingSince.Store(0) // a round failed: no longer "moving"
		return sleep(ctx, p.retry.Delay(tries/n-1))
	}
	for {
		url := p.urls[next]
		s, err := p.connect(ctx, url)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.setStatus(fmt.Errorf("rabbitmq: not connected: %w", err))
			if !warned {
				p.log.Warn("rabbitmq unavailable, retrying", "node", nodeName(url), "err", err)
				warned = true
			} else {
				p.log.Debug("rabbitmq connect failed", "node", nodeName(url), "err", err, "attempt", tries+1)
			}
			if !pause() {
				return nil
			}
			continue
		}

		if connected {
			p.metrics.reconnects.Inc()
			level := slog.LevelInfo
			if !lossLogged {
				level = slog.LevelDebug
			}
			p.log.Log(ctx, level, "rabbitmq reconnected", "node", nodeName(url), "down_for", time.Since(lostAt).Round(time.Millisecond).String(), "channels", len(s.lanes))
		} else {
			p.log.Info("rabbitmq connected", "node", nodeName(url), "channels", len(s.lanes))
		}
		connected, warned = true, false
		upAt := time.Now()
		p.publish(s)
		p.movingSince.Store(0)

		reason := p.serve(ctx, s)
		if n > 1 && ctx.Err() == nil {
			p.movingSince.Store(time.Now().UnixNano())
		}
		p.unpublish(s, reason)
		s.teardown()
		if brokerMaxBody(reason) == 0 {
			p.maxBody.Store(0)
		}
		if ctx.Err() != nil {
			return nil
		}
		lostAt = time.Now()
		// A connection that dies soon after it was made, again and again
		// for the same reason (write permission revoked: each publish
		// closes it), is said once a minute, not at every turn.
		lossLogged = true
		var heldBack int
		if time.Since(upAt) < flapWithin {
			lossLogged, heldBack = p.flapLog.Allow(flapKey(reason), 1)
		}
		if lossLogged {
			p.log.Warn("rabbitmq connection lost", "node", nodeName(url), "err", reason, "like_losses_not_logged", heldBack)
		} else {
			p.log.Debug("rabbitmq connection lost", "node", nodeName(url), "err", reason)
		}
		warned = true
		if time.Since(upAt) > p.cfg.ReconnectMax {
			tries = 0
		}
		if !pause() {
			return nil
		}
	}
}

// flapKey is the kind of a connection loss: its message without numbers,
// which name a local port or a channel and differ from loss to loss.
func flapKey(err error) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return '#'
		}
		return r
	}, err.Error())
}

// flapWithin: a connection lost sooner than this after it was made is
// flapping, and its loss is logged at most once a minute per reason.
const flapWithin = time.Minute

// serve watches a live session until it dies or ctx is done; it returns why.
func (p *Publisher) serve(ctx context.Context, s *session) error {
	blocked, connClosed := s.blocked, s.connClosed
	for {
		select {
		case <-ctx.Done():
			return errors.New("shutting down")
		case e, ok := <-connClosed:
			connClosed = nil
			if ok && e != nil {
				s.kill(fmt.Errorf("connection closed: %w", e))
			} else {
				s.kill(errors.New("connection closed"))
			}
		case <-s.dead:
			return s.reason()
		case b, ok := <-blocked:
			if !ok {
				blocked = nil
				continue
			}
			if b.Active {
				reason := b.Reason
				if reason == "" {
					reason = "unknown"
				}
				s.blockReason.Store(&reason)
				s.hold(true)
				p.metrics.blocked.Set(1)
				p.log.Warn("rabbitmq connection blocked by broker", "reason", b.Reason)
			} else {
				s.blockReason.Store(nil)
				s.hold(false)
				p.metrics.blocked.Set(0)
				p.log.Info("rabbitmq connection unblocked")
			}
		}
	}
}

// Stopping tells the publisher the process is stopping: a write held for a
// broker that blocked the connection (see sockConn.held) gives up within
// the confirm timeout instead of waiting out the alarm, so that the rings
// in flight, which shutdown waits for, end (found by review: a SIGTERM
// during a memory alarm hung until it cleared).
func (p *Publisher) Stopping() {
	p.stopping.Store(true)
	if s := p.sess.Load(); s != nil {
		s.sock.dropIfHeld()
	}
}

// publish makes s the current session.
func (p *Publisher) publish(s *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sess.Store(s)
	p.status = nil
	close(p.readyCh)
	p.metrics.connected.Set(1)
}

// unpublish removes s so that new batches fail fast.
func (p *Publisher) unpublish(s *session, reason error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sess.CompareAndSwap(s, nil)
	p.status = fmt.Errorf("rabbitmq: not connected: %w", reason)
	p.readyCh = make(chan struct{})
	p.metrics.connected.Set(0)
	p.metrics.blocked.Set(0) // a new connection is not blocked until the broker says so
}

func (p *Publisher) setStatus(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status = err
}

// sleep waits d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
