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
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/backoff"
)

// Message is one ring.
type Message struct {
	ID          int64     // clock id -> AMQP message_id in decimal
	Application string    // routing key and header x-clock-application
	BusinessID  string    // header x-clock-business-id
	RingAt      time.Time // header x-clock-ring-at, RFC 3339 with milliseconds, UTC
	Attempt     int       // header x-clock-attempt (1, 2, ...), an int32 header value
	ContentType string
	Body        []byte
}

// Header names of a ring.
const (
	HeaderApplication = "x-clock-application"
	HeaderBusinessID  = "x-clock-business-id"
	HeaderRingAt      = "x-clock-ring-at"
	HeaderAttempt     = "x-clock-attempt"
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
	// ErrNotSent comes with ErrUnavailable when the message surely did not
	// leave this process (not connected, or the connection is blocked).
	ErrNotSent = errors.New("not connected: message not sent")
)

// Config configures a Publisher. Zero durations take their defaults.
type Config struct {
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

	// unroutable holds back repeated warnings about an application whose
	// rings no queue takes.
	unroutable *logLimiter

	running atomic.Bool
	sess    atomic.Pointer[session] // nil while disconnected

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
	if _, err := amqp.ParseURI(cfg.URL); err != nil {
		return nil, fmt.Errorf("rabbit: URL: %w", err)
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
		log:             cfg.Logger.With("component", "rabbit"),
		metrics:         m,
		retry:           backoff.Policy{Min: cfg.ReconnectMin, Max: cfg.ReconnectMax},
		unroutable:      newLogLimiter(unroutableLogEvery, cfg.Now),
		readyCh:         make(chan struct{}),
		status:          errors.New("rabbitmq: not connected yet"),
		errNotConnected: fmt.Errorf("%w: %w", ErrUnavailable, ErrNotSent),
	}, nil
}

// Ready returns nil when connected with confirm channels and not blocked by
// the broker; otherwise an error saying why.
func (p *Publisher) Ready() error {
	if s := p.sess.Load(); s != nil {
		if reason := s.blockedReason(); reason != "" {
			return fmt.Errorf("rabbitmq: connection blocked by broker: %s", reason)
		}
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
// It returns nil on ctx cancel, after closing the connection and stopping
// every goroutine it started. It must not be called twice.
func (p *Publisher) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("rabbit: Run called twice")
	}
	defer p.running.Store(false)

	var (
		attempt   int  // failed attempts since the last good connection
		warned    bool // a Warn was logged for the current outage
		connected bool // at least one connection was made
		lostAt    time.Time
	)
	for {
		s, err := p.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.setStatus(fmt.Errorf("rabbitmq: not connected: %w", err))
			if !warned {
				p.log.Warn("rabbitmq unavailable, retrying", "err", err)
				warned = true
			} else {
				p.log.Debug("rabbitmq connect failed", "err", err, "attempt", attempt+1)
			}
			if !sleep(ctx, p.retry.Delay(attempt)) {
				return nil
			}
			attempt++
			continue
		}

		if connected {
			p.metrics.reconnects.Inc()
			p.log.Info("rabbitmq reconnected", "down_for", time.Since(lostAt).Round(time.Millisecond).String(), "channels", len(s.lanes))
		} else {
			p.log.Info("rabbitmq connected", "channels", len(s.lanes))
		}
		connected, warned = true, false
		upAt := time.Now()
		p.publish(s)

		reason := p.serve(ctx, s)
		p.unpublish(s, reason)
		s.teardown()
		if ctx.Err() != nil {
			return nil
		}
		lostAt = time.Now()
		p.log.Warn("rabbitmq connection lost", "err", reason)
		warned = true
		if time.Since(upAt) > p.cfg.ReconnectMax {
			attempt = 0
		}
		if !sleep(ctx, p.retry.Delay(attempt)) {
			return nil
		}
		attempt++
	}
}

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
				p.log.Warn("rabbitmq connection blocked by broker", "reason", b.Reason)
			} else {
				s.blockReason.Store(nil)
				p.log.Info("rabbitmq connection unblocked")
			}
		}
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
