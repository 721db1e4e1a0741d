package rabbit

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/alarm"
)

// Hints tell the owner of a shard, at once, about a clock created or moved
// through another instance that is due within the preload window. They go
// through a fanout exchange (<exchange>.hints) to one exclusive queue per
// instance. Hints are best effort: a lost one costs only punctuality, since
// the owner's loader finds the clock at its next scan.
type Hints struct {
	url, exchange, self string
	log                 *slog.Logger
	onHint              func(alarm.Due)

	mu      sync.Mutex
	pending []alarm.Due
	signal  chan struct{}
}

// HintConfig configures Hints.
type HintConfig struct {
	URL        string
	Exchange   string // the ring exchange; hints use Exchange + ".hints"
	InstanceID string
	Logger     *slog.Logger
	OnHint     func(alarm.Due) // called for each hint from another instance
}

const hintSize = 20 // id (8) + shard (4) + due ms (8)

// maxPendingHints bounds the memory of hints waiting for a connection.
const maxPendingHints = 100000

// NewHints returns the hint bus; Run connects it.
func NewHints(cfg HintConfig) *Hints {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Hints{url: cfg.URL, exchange: cfg.Exchange + ".hints", self: cfg.InstanceID,
		log: cfg.Logger, onHint: cfg.OnHint, signal: make(chan struct{}, 1)}
}

// Send queues hints for the other instances; it never blocks.
func (h *Hints) Send(ds []alarm.Due) {
	if len(ds) == 0 {
		return
	}
	h.mu.Lock()
	if len(h.pending)+len(ds) <= maxPendingHints {
		h.pending = append(h.pending, ds...)
	}
	h.mu.Unlock()
	select {
	case h.signal <- struct{}{}:
	default:
	}
}

// Run keeps a connection, publishes queued hints and consumes others'
// until ctx is done.
func (h *Hints) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := h.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		h.log.Debug("hint connection lost", "err", err)
		d := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	return nil
}

func (h *Hints) session(ctx context.Context) error {
	conn, err := amqp.DialConfig(h.url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second), Properties: amqp.Table{"connection_name": "clockd-hints " + h.self}})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
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
					return fmt.Errorf("publish hints: %w", err)
				}
				ds = ds[n:]
			}
		}
	}
}

func (h *Hints) deliver(body []byte) {
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
