package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/alarm"
)

// The live tail: a server-named, exclusive, auto-delete queue bound to the
// exchange with the application as binding key receives a copy of each of
// the application's rings (a direct exchange delivers a message to every
// queue bound with its key), so watching never takes a message from the
// application's own queue. The queue goes away with the connection.
//
// One thing to know: a ring counts as delivered once any queue takes it.
// While a tail is open, an application that has not bound a queue of its
// own gets its rings marked rung (the tail took them) instead of retried
// as unroutable.

// Ring is one ring seen by a tail.
type Ring struct {
	Application  string    `json:"application"`
	BusinessID   string    `json:"business_id"`
	MessageID    string    `json:"message_id"`
	Attempt      int       `json:"attempt"`
	RingAt       time.Time `json:"ring_at"`
	Occurrence   string    `json:"occurrence,omitempty"`
	Received     time.Time `json:"received_at"`
	LatenessMS   float64   `json:"lateness_ms"`
	ContentType  string    `json:"content_type"`
	PayloadBytes int       `json:"payload_bytes"`
	Payload      string    `json:"payload"` // the first PayloadShown bytes, when they are text
}

// PayloadShown is how much of a payload a tail shows.
const PayloadShown = 512

// tailWriteTimeout bounds each write of a tail's stream, and tailKeepAlive
// is how often an idle stream is written to (and its session checked).
var (
	tailWriteTimeout = 10 * time.Second
	tailKeepAlive    = 15 * time.Second
)

// WatchConfig says what to tail.
type WatchConfig struct {
	// URL: one AMQP URL, or several separated by commas (tried in turn).
	URL         string
	Exchange    string
	Application string
	// MaxQueued bounds the watch queue: a watcher that falls behind loses
	// the oldest rings, the broker never piles them up (default 10000).
	MaxQueued int
}

// Watch tails the rings of an application until ctx is done or the
// connection is lost (then it returns the error). ready, when set, is
// called once the queue is bound: rings from then on reach fn.
func Watch(ctx context.Context, cfg WatchConfig, ready func(queue string), fn func(Ring)) error {
	if err := alarm.CheckApplication(cfg.Application); err != nil {
		return err
	}
	if cfg.MaxQueued <= 0 {
		cfg.MaxQueued = 10000
	}
	conn, err := dial(cfg.URL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp channel: %w", err)
	}
	// The same declaration clockd makes, so it is a no-op when it exists.
	if err := ch.ExchangeDeclare(cfg.Exchange, "direct", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", cfg.Exchange, err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, amqp.Table{
		"x-max-length": int32(cfg.MaxQueued), "x-overflow": "drop-head",
	})
	if err != nil {
		return fmt.Errorf("declare watch queue: %w", err)
	}
	if err := ch.QueueBind(q.Name, cfg.Application, cfg.Exchange, false, nil); err != nil {
		return fmt.Errorf("bind watch queue: %w", err)
	}
	deliveries, err := ch.ConsumeWithContext(ctx, q.Name, "", true, true, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume watch queue: %w", err)
	}
	if ready != nil {
		ready(q.Name)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-closed:
			if e == nil {
				return errors.New("amqp connection closed")
			}
			return fmt.Errorf("amqp connection lost: %w", e)
		case d, ok := <-deliveries:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return errors.New("watch queue consumer closed")
			}
			fn(ringOf(d, time.Now()))
		}
	}
}

// redact hides the password of an AMQP URL.
func redact(raw string) string {
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

func dial(urls string) (*amqp.Connection, error) {
	var errs []error
	for u := range strings.SplitSeq(urls, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		conn, err := amqp.DialConfig(u, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second), Properties: amqp.Table{"connection_name": "clockd watch"}})
		if err == nil {
			return conn, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", redact(u), withoutURL(err)))
	}
	if len(errs) == 0 {
		return nil, errors.New("no AMQP URL")
	}
	return nil, fmt.Errorf("amqp dial: %w", errors.Join(errs...))
}

func ringOf(d amqp.Delivery, received time.Time) Ring {
	r := Ring{Application: hdr(d.Headers, "x-clock-application"), BusinessID: hdr(d.Headers, "x-clock-business-id"),
		MessageID: d.MessageId, ContentType: d.ContentType, PayloadBytes: len(d.Body), Received: received.UTC(),
		Occurrence: hdr(d.Headers, "x-clock-occurrence")}
	if r.Application == "" {
		r.Application = d.RoutingKey
	}
	switch v := d.Headers["x-clock-attempt"].(type) {
	case int32:
		r.Attempt = int(v)
	case int64:
		r.Attempt = int(v)
	case int:
		r.Attempt = v
	case int16:
		r.Attempt = int(v)
	case int8:
		r.Attempt = int(v)
	}
	due := hdr(d.Headers, "x-clock-ring-at")
	if r.Occurrence != "" {
		due = r.Occurrence // a recurring clock's occurrence is what was due
	}
	if t, err := time.Parse(time.RFC3339Nano, due); err == nil {
		r.RingAt = t.UTC()
		r.LatenessMS = float64(received.Sub(t)) / float64(time.Millisecond)
	}
	body := d.Body
	if len(body) > PayloadShown {
		// cut where a character starts, not in the middle of one
		cut := PayloadShown
		for cut > PayloadShown-utf8.UTFMax && !utf8.RuneStart(body[cut]) {
			cut--
		}
		body = body[:cut]
	}
	if utf8.Valid(body) {
		r.Payload = string(body)
	}
	return r
}

func hdr(h amqp.Table, k string) string {
	if s, ok := h[k].(string); ok {
		return s
	}
	return ""
}

// tailEvents streams the rings of ?app= as server-sent events: an event
// "ready" once the queue is bound, then one "ring" event per ring.
func (c *Console) tailEvents(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		// the mux hands HEAD to GET handlers; a tail nobody reads is no tail
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "the live tail is a GET", http.StatusMethodNotAllowed)
		return
	}
	app := r.URL.Query().Get("app")
	if err := alarm.CheckApplication(app); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	// The server's write timeout is for answers, not for a stream that
	// stays open as long as the page does: each write gets its own
	// deadline instead, so a client that stops reading (a frozen tab, a
	// stalled proxy) ends its tail and its queue rather than hold them
	// (and the server's shutdown) for as long as its connection lives.
	_ = rc.SetWriteDeadline(time.Now().Add(tailWriteTimeout))
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	events := make(chan string, 64)
	werr := make(chan error, 1)
	go func() {
		err := Watch(ctx, WatchConfig{URL: c.o.AMQPURL, Exchange: c.o.Exchange, Application: app},
			func(q string) { send(ctx, events, sse("ready", map[string]string{"queue": q, "application": app})) },
			func(rg Ring) { send(ctx, events, sse("ring", rg)) })
		werr <- err
	}()
	keep := time.NewTicker(tailKeepAlive)
	defer keep.Stop()
	c.log.Info("console tail started", "application", app, "remote", r.RemoteAddr)
	defer c.log.Info("console tail ended", "application", app, "remote", r.RemoteAddr)
	write := func(s string) bool {
		if rc.SetWriteDeadline(time.Now().Add(tailWriteTimeout)) != nil {
			return false
		}
		if _, err := fmt.Fprint(w, s); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(": tail of " + app + "\n\n") {
		return
	}
	for {
		select {
		case <-c.closing:
			cancel()
			<-werr
			return
		case <-ctx.Done():
			<-werr
			return
		case ev := <-events:
			if !write(ev) {
				cancel()
			}
		case <-keep.C:
			// the session is checked again: a revoked token or a logout
			// ends the open tails too, not only the next requests
			if id, ok := sessionID(r); c.o.Auth != nil && (!ok || errors.Is(c.checkSession(ctx, id), errNoSession)) {
				write(sse("failed", map[string]string{"error": "the session ended: log in again"}))
				cancel()
				continue
			}
			if !write(": keep-alive\n\n") {
				cancel()
			}
		case err := <-werr:
			if err != nil && ctx.Err() == nil {
				c.storeFailed("console tail stopped", "application", app, "err", err)
				write(sse("failed", map[string]string{"error": err.Error()}))
			}
			return
		}
	}
}

// send hands an event to the writer; a tail whose browser does not keep
// up drops events rather than hold the consumer.
func send(ctx context.Context, ch chan<- string, ev string) {
	select {
	case ch <- ev:
	case <-ctx.Done():
	default:
	}
}

func sse(event string, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{}`)
	}
	return "event: " + event + "\ndata: " + string(b) + "\n\n"
}
