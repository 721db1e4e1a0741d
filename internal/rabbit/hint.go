package rabbit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/backoff"
	"github.com/clockd/clockd/internal/lograte"
)

// Hints tell the owner of a shard, at once, about a clock created or moved
// through another instance that is due within the preload window. They go
// through a fanout exchange (<exchange>.hints) to one exclusive queue per
// instance. The owner's loader has already read that part of the shard, so
// without a hint it would find the clock only at its next full rescan.
// When a hint cannot go (no connection, the queue of waiting hints full, a
// failed send), OnUndelivered asks the owner by another way (clockd: a
// stamp on the shard's row, read at the owner's next lease round). Every
// hint dropped here is counted (clockd_hints_dropped_total) and logged, at
// most once a minute per reason.
type Hints struct {
	urls           []string // the nodes, tried in turn
	exchange, self string
	log            *slog.Logger
	onHint         func(alarm.Due)
	retry          backoff.Policy
	maxPending     int
	dropped        *prometheus.CounterVec
	dropLog        *lograte.Limiter

	mu      sync.Mutex
	pending []alarm.Due
	signal  chan struct{}

	connected     atomic.Bool // a session is up: hints sent now arrive
	onUndelivered func(ctx context.Context, shards []int) error
	onConnected   func()
	asks          map[int]struct{} // shards whose hints could not go, to ask about (under mu)
	askSignal     chan struct{}
}

// HintConfig configures Hints.
type HintConfig struct {
	URL        string // one broker URL or several separated by commas, as Config.URL
	Exchange   string // the ring exchange; hints use Exchange + ".hints"
	InstanceID string
	Logger     *slog.Logger
	OnHint     func(alarm.Due)       // called for each hint from another instance
	Registerer prometheus.Registerer // nil: no metrics registered
	// OnUndelivered, when set, is called (from one goroutine, with the
	// shards of hints that could not go since its last call) so that the
	// owners learn of those clocks another way.
	OnUndelivered func(ctx context.Context, shards []int) error
	// OnConnected, when set, is called each time this instance's hint
	// queue is bound and consumed again after a connection was lost (and
	// at the first connection): hints the others sent while it had no
	// queue went nowhere, without an error for their senders, so the
	// caller reads again what they would have told (clockd: every shard
	// owned here is rescanned).
	OnConnected func()
}

const hintSize = 20 // id (8) + shard (4) + due ms (8)

// maxPendingHints bounds the memory of hints waiting for a connection.
const maxPendingHints = 100000

// Reasons a hint is dropped: the values of the reason label of
// clockd_hints_dropped_total.
const (
	dropQueueFull = "queue_full" // more than maxPendingHints waited for a connection
	dropNotSent   = "not_sent"   // the connection failed while they were published
	dropShutdown  = "shutdown"   // still waiting when the instance stopped
	dropMalformed = "malformed"  // received: a message whose length is not whole hints
)

// dropLogEvery is how often a WARN about dropped hints may be logged per reason.
const dropLogEvery = time.Minute

// NewHints returns the hint bus; Run connects it.
func NewHints(cfg HintConfig) *Hints {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Hints{urls: SplitURLs(cfg.URL), exchange: cfg.Exchange + ".hints", self: cfg.InstanceID,
		log: cfg.Logger, onHint: cfg.OnHint, signal: make(chan struct{}, 1),
		onUndelivered: cfg.OnUndelivered, onConnected: cfg.OnConnected, asks: map[int]struct{}{}, askSignal: make(chan struct{}, 1),
		retry:      backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second},
		maxPending: maxPendingHints,
		dropLog:    lograte.New(dropLogEvery, time.Now),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clockd_hints_dropped_total",
			Help: "Hints (a clock due soon, for the owner of its shard) dropped, by reason: queue_full, not_sent, shutdown, malformed. A dropped hint costs punctuality only: its shard's owner is asked to rescan the shard (OnUndelivered), or finds the clock at its next full rescan.",
		}, []string{"reason"}),
	}
	for _, r := range []string{dropQueueFull, dropNotSent, dropShutdown, dropMalformed} {
		h.dropped.WithLabelValues(r) // exported at 0 from the start
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(h.dropped); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if c, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					h.dropped = c
				}
			} else {
				h.log.Error("hints: register metrics", "err", err)
			}
		}
	}
	return h
}

// drop counts n dropped hints and logs them, rate-limited per reason.
func (h *Hints) drop(reason string, n int, err error) {
	if n <= 0 {
		return
	}
	h.dropped.WithLabelValues(reason).Add(float64(n))
	ok, heldBack := h.dropLog.Allow(reason, n)
	if !ok {
		return
	}
	args := []any{"reason", reason, "hints", n, "hints_not_logged", heldBack}
	if err != nil {
		args = append(args, "err", err)
	}
	h.log.Warn("hints dropped: their clocks ring when their owners rescan the shards, later than they could",
		args...)
}

// Send queues hints for the other instances; it never blocks. Without a
// connection it also asks for their shards' rescans at once (the hints
// still go when the connection is back, if it comes back soon).
func (h *Hints) Send(ds []alarm.Due) {
	if len(ds) == 0 {
		return
	}
	h.mu.Lock()
	room := h.maxPending - len(h.pending)
	take := min(len(ds), max(room, 0))
	h.pending = append(h.pending, ds[:take]...)
	h.mu.Unlock()
	h.drop(dropQueueFull, len(ds)-take, nil)
	if !h.connected.Load() {
		h.ask(ds)
	} else {
		h.ask(ds[take:])
	}
	select {
	case h.signal <- struct{}{}:
	default:
	}
}

// ask queues a request for the rescan of the shards of ds (see
// OnUndelivered).
func (h *Hints) ask(ds []alarm.Due) {
	if h.onUndelivered == nil || len(ds) == 0 {
		return
	}
	h.mu.Lock()
	for _, d := range ds {
		h.asks[d.Shard] = struct{}{}
	}
	h.mu.Unlock()
	select {
	case h.askSignal <- struct{}{}:
	default:
	}
}

// askLoop hands the shards of undelivered hints to OnUndelivered, as they
// come, until ctx is done.
func (h *Hints) askLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.askSignal:
		}
		h.mu.Lock()
		shards := make([]int, 0, len(h.asks))
		for sh := range h.asks {
			shards = append(shards, sh)
		}
		clear(h.asks)
		h.mu.Unlock()
		slices.Sort(shards)
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := h.onUndelivered(actx, shards)
		cancel()
		if err != nil && ctx.Err() == nil {
			if ok, _ := h.dropLog.Allow("ask", 1); ok {
				h.log.Warn("hints not sent, and the owners not asked to rescan: their clocks ring at the owners' next full rescan",
					"shards", shards, "err", err)
			}
		}
	}
}

// Run keeps a connection, publishes queued hints and consumes others'
// until ctx is done.
func (h *Hints) Run(ctx context.Context) error {
	if h.onUndelivered != nil {
		go h.askLoop(ctx)
	}
	defer func() {
		h.mu.Lock()
		n := len(h.pending)
		h.pending = nil
		h.mu.Unlock()
		h.drop(dropShutdown, n, nil)
	}()
	// Like the publisher: the next node at once after a loss, a backoff
	// only after a whole round through the list failed.
	attempt, next := 0, 0
	for ctx.Err() == nil {
		start := time.Now()
		err := h.session(ctx, h.urls[next])
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > 10*time.Second {
			attempt = 0
		}
		h.log.Debug("hint connection lost", "node", nodeName(h.urls[next]), "err", err)
		next = (next + 1) % len(h.urls)
		attempt++
		if attempt%len(h.urls) != 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(h.retry.Delay(attempt/len(h.urls) - 1)):
		}
	}
	return nil
}

func (h *Hints) session(ctx context.Context, url string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Properties: amqp.Table{"connection_name": "clockd-hints " + h.self}})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	// bounded like the publisher's: a slow or stalled broker link must not
	// hold up the shutdown (amqp091's Close waits without a deadline)
	defer func() { _ = conn.CloseDeadline(time.Now().Add(closeTimeout)) }()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("channel: %w", err)
	}
	// auto-delete: gone when the last instance's queue is
	// (tests and renamed exchanges leave nothing behind)
	if err := ch.ExchangeDeclare(h.exchange, "fanout", false, true, false, false, nil); err != nil {
		return fmt.Errorf("declare %s: %w", h.exchange, err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{"x-message-ttl": int32(30000)})
	if err != nil {
		return fmt.Errorf("declare hint queue: %w", err)
	}
	if err := ch.QueueBind(q.Name, "", h.exchange, false, nil); err != nil {
		return fmt.Errorf("bind hint queue: %w", err)
	}
	msgs, err := ch.Consume(q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume hints: %w", err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	h.connected.Store(true)
	if h.onConnected != nil {
		h.onConnected()
	}
	defer func() {
		// the hints still waiting go at the next connection, if any: ask
		// for their rescans now
		h.connected.Store(false)
		h.mu.Lock()
		waiting := slices.Clone(h.pending)
		h.mu.Unlock()
		h.ask(waiting)
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-closed:
			return fmt.Errorf("connection closed: %v", e)
		case m, ok := <-msgs:
			if !ok {
				return fmt.Errorf("hint consumer closed")
			}
			if m.AppId != h.self {
				h.deliver(m.Body)
			}
		case <-h.signal:
			h.mu.Lock()
			ds := h.pending
			h.pending = nil
			h.mu.Unlock()
			for len(ds) > 0 {
				n := min(len(ds), 2000)
				body := make([]byte, 0, n*hintSize)
				for _, d := range ds[:n] {
					body = binary.BigEndian.AppendUint64(body, uint64(d.ID))
					body = binary.BigEndian.AppendUint32(body, uint32(d.Shard))
					body = binary.BigEndian.AppendUint64(body, uint64(d.At.UnixMilli()))
				}
				if err := ch.PublishWithContext(ctx, h.exchange, "", false, false,
					amqp.Publishing{AppId: h.self, ContentType: "application/octet-stream", Body: body}); err != nil {
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
		}
	}
}

func (h *Hints) deliver(body []byte) {
	if rest := len(body) % hintSize; rest != 0 {
		h.drop(dropMalformed, 1, fmt.Errorf("hint message of %d bytes: %d bytes left over", len(body), rest))
	}
	for len(body) >= hintSize {
		d := alarm.Due{
			ID:    int64(binary.BigEndian.Uint64(body)),
			Shard: int(binary.BigEndian.Uint32(body[8:])),
			At:    time.UnixMilli(int64(binary.BigEndian.Uint64(body[12:]))).UTC(),
		}
		body = body[hintSize:]
		h.onHint(d)
	}
}
