package rabbit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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
// most once a minute per reason. A hint counts as sent once the broker
// confirmed it; one the broker did not take (its exchange deleted, routed
// to no queue, the connection lost first) is dropped and asked for.
//
// An operator may delete the exchanges on the broker: every queue loses its
// binding, silently. Each instance therefore checks, every checkEvery, that
// a probe it publishes on each exchange comes back to its own queue, and
// declares and binds again when it does not (see hintSession).
type Hints struct {
	urls           []string // the nodes, tried in turn
	exchange, self string
	tokens         string // the exchange of revoked tokens
	log            *slog.Logger
	onHint         func(alarm.Due)
	retry          backoff.Policy
	maxPending     int
	dropped        *prometheus.CounterVec
	rebinds        *prometheus.CounterVec
	dropLog        *lograte.Limiter
	checkEvery     time.Duration // how often a session checks its bindings (bindCheckEvery)
	// bound counts the sessions whose queue was bound; failWarned: the
	// connection's failure was logged as a WARN, and its end will be too
	bound      atomic.Uint64
	failWarned atomic.Bool

	mu      sync.Mutex
	pending []alarm.Due
	signal  chan struct{}

	connected     atomic.Bool // a session is up: hints sent now arrive
	onUndelivered func(ctx context.Context, shards []int) error
	onConnected   func()
	asks          map[int]struct{} // shards whose hints could not go, to ask about (under mu)
	askSignal     chan struct{}

	onRevoked func(id int64)
	revokes   []int64       // revoked token ids to tell the others (under mu)
	forgotten []int64       // others' revoked token ids forgotten here, to acknowledge (under mu)
	waits     []*revokeWait // Revoke calls waiting for the others' acknowledgements (under mu)
}

// revokeWait is a Revoke call waiting until every instance it names has
// acknowledged the revocation of token id.
type revokeWait struct {
	id   int64
	need map[string]bool // instance ids not heard from yet
	done chan struct{}   // closed once need is empty
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
	// at the first connection), and each time its binding to the hints or
	// tokens exchange was found gone and made again: hints and revocations
	// the others sent while it was not bound went nowhere, without an
	// error for their senders, so the caller reads again what they would
	// have told (clockd: every shard owned here is rescanned, and cached
	// tokens are forgotten).
	OnConnected func()
	// OnRevoked, when set, is called for each token another instance
	// revoked (Revoke), so that this one stops accepting it at once.
	OnRevoked func(id int64)
}

// Revoked tokens' ids (8 bytes each) go through a fanout exchange of their
// own, <exchange>.tokens, bound to the same queue as the hints: an instance
// of a release before it, in a rolling upgrade, binds only the hints and
// so never takes a revocation for a hint. Each instance that forgets a
// token acknowledges it there, so that the revoking one knows when every
// other has.
const (
	tokenRevokedType   = "clockd.token-revoked"
	tokenForgottenType = "clockd.token-forgotten"
)

// maxPendingRevokes bounds the revocations (and acknowledgements) waiting
// for a connection; past it the others learn of a revocation from their
// caches' expiry only.
const maxPendingRevokes = 10000

// revokeWaitMax bounds how long Revoke waits for the acknowledgements.
const revokeWaitMax = time.Second

// hintFailWarnAfter is how long the hint connection fails before it is
// logged as a WARN.
const hintFailWarnAfter = 2 * time.Second

// bindCheckEvery is how often each instance probes its bindings to the
// hints and tokens exchanges: an instance whose binding an operator
// removed (by deleting the exchange) binds again within probeLost + 1 of
// it.
const bindCheckEvery = time.Second

const hintSize = 20 // id (8) + shard (4) + due ms (8)

// maxPendingHints bounds the memory of hints waiting for a connection.
const maxPendingHints = 100000

// Reasons a hint is dropped: the values of the reason label of
// clockd_hints_dropped_total.
const (
	dropQueueFull = "queue_full" // more than maxPendingHints waited for a connection
	dropNotSent   = "not_sent"   // not confirmed by the broker: the connection or channel failed first (an exchange deleted), or no queue took them
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
	h := &Hints{urls: SplitURLs(cfg.URL), exchange: cfg.Exchange + ".hints", tokens: cfg.Exchange + ".tokens", self: cfg.InstanceID,
		log: cfg.Logger, onHint: cfg.OnHint, signal: make(chan struct{}, 1),
		onUndelivered: cfg.OnUndelivered, onConnected: cfg.OnConnected, asks: map[int]struct{}{}, askSignal: make(chan struct{}, 1),
		onRevoked:  cfg.OnRevoked,
		retry:      backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second},
		maxPending: maxPendingHints,
		checkEvery: bindCheckEvery,
		dropLog:    lograte.New(dropLogEvery, time.Now),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clockd_hints_dropped_total",
			Help: "Hints (a clock due soon, for the owner of its shard) dropped, by reason: queue_full, not_sent, shutdown, malformed. A dropped hint costs punctuality only: its shard's owner is asked to rescan the shard (OnUndelivered), or finds the clock at its next full rescan.",
		}, []string{"reason"}),
		rebinds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "clockd_hints_rebinds_total",
			Help: "Times this instance found the hints or tokens exchange (label exchange: hints, tokens) gone, or its queue no longer bound to it (the exchange was deleted on the broker), and declared and bound it again. What the others sent on it meanwhile went nowhere: the instance rescanned the shards it owns and forgot its cached tokens.",
		}, []string{"exchange"}),
	}
	h.dropped = h.register(cfg.Registerer, h.dropped)
	h.rebinds = h.register(cfg.Registerer, h.rebinds)
	for _, r := range []string{dropQueueFull, dropNotSent, dropShutdown, dropMalformed} {
		h.dropped.WithLabelValues(r) // exported at 0 from the start
	}
	for _, x := range []string{"hints", "tokens"} {
		h.rebinds.WithLabelValues(x)
	}
	return h
}

// register registers c (reg nil: nothing) and returns it, or the
// collector of that name already registered (a second bus shares it).
func (h *Hints) register(reg prometheus.Registerer, c *prometheus.CounterVec) *prometheus.CounterVec {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if ec, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return ec
			}
		}
		h.log.Error("hints: register metrics", "err", err)
	}
	return c
}

// rebound counts and logs (once a minute per exchange at most) that
// exchange x was found gone or unbound from this instance's queue and is
// declared and bound again.
func (h *Hints) rebound(x, cause string) {
	label := "hints"
	if x == h.tokens {
		label = "tokens"
	}
	h.rebinds.WithLabelValues(label).Inc()
	ok, heldBack := h.dropLog.Allow("rebind "+x, 1)
	if !ok {
		return
	}
	h.log.Warn("hints: exchange deleted on the broker, or this instance's queue unbound from it: declared and bound again (what the others sent on it meanwhile is lost: the shards owned here are rescanned, cached tokens forgotten)",
		"exchange", x, "cause", cause, "rebinds_not_logged", heldBack)
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
	h.wake()
}

// Revoke tells the other instances that token id was revoked (their
// OnRevoked) and, with a connection, waits until each of peers (the
// instance ids that should hear of it) has acknowledged that it forgot the
// token, revokeWaitMax at most: a request sent to any of them after Revoke
// returns finds the token revoked. Without a connection it does not wait:
// the word goes when the connection is back, and meanwhile the others stop
// accepting the token when their cache entries expire.
func (h *Hints) Revoke(ctx context.Context, id int64, peers []string) {
	w := &revokeWait{id: id, need: map[string]bool{}, done: make(chan struct{})}
	for _, p := range peers {
		if p != h.self {
			w.need[p] = true
		}
	}
	h.mu.Lock()
	if len(h.revokes) < maxPendingRevokes {
		h.revokes = append(h.revokes, id)
	}
	wait := len(w.need) > 0 && h.connected.Load()
	if wait {
		h.waits = append(h.waits, w)
	}
	h.mu.Unlock()
	h.wake()
	if !wait {
		return
	}
	t := time.NewTimer(revokeWaitMax)
	select {
	case <-w.done:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	h.mu.Lock()
	h.waits = slices.DeleteFunc(h.waits, func(x *revokeWait) bool { return x == w })
	h.mu.Unlock()
}

// wake has the session publish what waits.
func (h *Hints) wake() {
	select {
	case h.signal <- struct{}{}:
	default:
	}
}

// tokenMessage handles a message of the token exchange from another instance: a
// revocation is forgotten here (OnRevoked) and acknowledged; an
// acknowledgement counts for the Revoke calls waiting for it.
func (h *Hints) tokenMessage(m amqp.Delivery) {
	var ids []int64
	for body := m.Body; len(body) >= 8; body = body[8:] {
		ids = append(ids, int64(binary.BigEndian.Uint64(body)))
	}
	switch m.Type {
	case tokenRevokedType:
		for _, id := range ids {
			if h.onRevoked != nil {
				h.onRevoked(id)
			}
		}
		h.mu.Lock()
		if len(h.forgotten)+len(ids) <= maxPendingRevokes {
			h.forgotten = append(h.forgotten, ids...)
		}
		h.mu.Unlock()
		h.wake()
	case tokenForgottenType:
		h.mu.Lock()
		for _, w := range h.waits {
			if w.need[m.AppId] && slices.Contains(ids, w.id) {
				delete(w.need, m.AppId)
				if len(w.need) == 0 {
					close(w.done)
				}
			}
		}
		h.mu.Unlock()
	}
}

// putBack returns what a session took to publish and could not, ahead of
// what came since: it goes at the next connection (the others' token
// caches expire meanwhile, auth.cache_ttl).
func (h *Hints) putBack(ds []alarm.Due, revokes, forgotten []int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pending = append(ds, h.pending...)
	h.revokes = append(revokes, h.revokes...)
	h.forgotten = append(forgotten, h.forgotten...)
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
	var failingSince, warnedAt time.Time
	var seen uint64 // h.bound as of the last failure
	for ctx.Err() == nil {
		start := time.Now()
		err := h.session(ctx, h.urls[next])
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > 10*time.Second {
			attempt = 0
		}
		if x, ok := h.missingExchange(err); ok {
			// the next session declares it again, binds and calls
			// OnConnected
			h.rebound(x, err.Error())
		} else {
			h.log.Debug("hint connection lost", "node", nodeName(h.urls[next]), "err", err)
			// A loss the broker's restart explains is the publisher's to
			// log; one that lasts (a broker user without rights on
			// <exchange>.tokens, found by review) is said here, at most
			// once a minute, and its end when the queue is bound again.
			now := time.Now()
			if b := h.bound.Load(); b != seen || failingSince.IsZero() {
				seen, failingSince = b, now // it had worked since
			}
			if now.Sub(failingSince) >= hintFailWarnAfter && now.Sub(warnedAt) >= time.Minute {
				warnedAt = now
				h.failWarned.Store(true)
				h.log.Warn("hint connection fails: clocks created through other instances for shards owned here, and token revocations, reach this instance late (at the next lease round, or auth.cache_ttl)",
					"for", now.Sub(failingSince).Round(time.Second).String(), "node", nodeName(h.urls[next]), "err", err)
			}
		}
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

// missingExchange reports whether err ended a session because the broker
// found no exchange of ours (deleted on the broker: a publish on it closes
// the channel), and which.
func (h *Hints) missingExchange(err error) (string, bool) {
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.NotFound {
		return "", false
	}
	for _, x := range []string{h.exchange, h.tokens} {
		if strings.Contains(ae.Reason, "'"+x+"'") {
			return x, true
		}
	}
	return "", false
}

func (h *Hints) deliver(body []byte) {
	if rest := len(body) % hintSize; rest != 0 {
		h.drop(dropMalformed, 1, fmt.Errorf("hint message of %d bytes: %d bytes left over", len(body), rest))
	}
	for _, d := range decodeHints(body) {
		h.onHint(d)
	}
}

// encodeHints is the body of a hint message.
func encodeHints(ds []alarm.Due) []byte {
	body := make([]byte, 0, len(ds)*hintSize)
	for _, d := range ds {
		body = binary.BigEndian.AppendUint64(body, uint64(d.ID))
		body = binary.BigEndian.AppendUint32(body, uint32(d.Shard))
		body = binary.BigEndian.AppendUint64(body, uint64(d.At.UnixMilli()))
	}
	return body
}

// decodeHints reads the whole hints of a hint message (a partial one at
// its end is left out).
func decodeHints(body []byte) []alarm.Due {
	ds := make([]alarm.Due, 0, len(body)/hintSize)
	for len(body) >= hintSize {
		ds = append(ds, alarm.Due{
			ID:    int64(binary.BigEndian.Uint64(body)),
			Shard: int(binary.BigEndian.Uint32(body[8:])),
			At:    time.UnixMilli(int64(binary.BigEndian.Uint64(body[12:]))).UTC(),
		})
		body = body[hintSize:]
	}
	return ds
}
