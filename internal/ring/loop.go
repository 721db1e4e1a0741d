package ring

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
)

// Store is what the ring loop needs of MySQL.
type Store interface {
	Claim(ctx context.Context, owner string, leases []alarm.Lease, ids []int64, token int64, until, now time.Time) ([]alarm.Clock, error)
	// Release puts back to pending those of ids that a claim with token
	// left firing (a claim that failed may have been applied).
	Release(ctx context.Context, token int64, ids []int64, now time.Time) error
	// The outcome writes apply only to clocks still firing under one of
	// the given claim tokens (fencing: a previous owner of a shard that
	// records late must not overwrite the claim of the new owner).
	MarkRung(ctx context.Context, ids, tokens []int64, at time.Time) error
	Fail(ctx context.Context, outs []alarm.Outcome, tokens []int64, now time.Time) error
	Expire(ctx context.Context, ids, tokens []int64, now time.Time) error
	Unclaim(ctx context.Context, ids, tokens []int64, now time.Time) error
}

// Ring is one message to publish: a claimed clock and its attempt number.
type Ring struct {
	Clock   alarm.Clock
	Attempt int
}

// Publisher publishes rings with confirms: nil per ring means confirmed.
type Publisher interface {
	Publish(ctx context.Context, rings []Ring) []error
	Ready() error
}

// Feeder owns the shards: it tells their leases and takes clocks back.
type Feeder interface {
	Owner() string
	Leases(shards []int) []alarm.Lease
	Valid(shard int, epoch int64) bool
	Offer(d alarm.Due)
	Drained(shards []int)
}

// Config tunes the loop.
type Config struct {
	ClaimAhead  time.Duration // claim this long before the deadline
	ClaimBatch  int
	MaxInFlight int // claimed but not yet finished
	Publishers  int // concurrent publish batches
	Retry       Retry
	ResultLabel func(error) string // names a publish error in metrics
	// NotSent tells a publish error for which the message surely never
	// reached the broker (not connected): the clock goes back to pending
	// without counting an attempt.
	NotSent    func(error) bool
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Clock      Clock // nil: the real clock
}

// Loop claims due clocks, publishes them at their time and records the
// outcome.
type Loop struct {
	cfg   Config
	q     *Queue
	store Store
	pub   Publisher
	feed  Feeder
	log   *slog.Logger
	clk   Clock

	mu       sync.Mutex
	armed    minHeap           // claimed clocks waiting for their deadline
	clocks   map[int64]claimed // armed clocks by id
	tokens   map[int64]int64   // claim token of every clock in flight
	inFlight int
	slots    chan struct{} // signalled when in-flight drops
	armWake  chan struct{}

	doneMu  sync.Mutex
	done    results
	doneSig chan struct{}

	sem chan struct{} // publish concurrency

	lost []lostClaim // claims of unknown outcome, released before the next claim (claimer only)

	m metrics
}

// lostClaim is a claim that failed: MySQL may have applied it anyway.
type lostClaim struct {
	token int64
	dues  []alarm.Due
}

// claimed is a clock this loop claimed, with the lease epoch of the claim.
type claimed struct {
	alarm.Clock
	epoch int64
}

type results struct {
	rung    []int64
	rungAt  time.Time
	failed  []alarm.Outcome
	failCls []alarm.Clock
	expired []int64
	unclaim []alarm.Clock
}

func (r *results) empty() bool {
	return len(r.rung)+len(r.failed)+len(r.expired)+len(r.unclaim) == 0
}

type metrics struct {
	rings    *prometheus.CounterVec
	lateness prometheus.Histogram
	claims   prometheus.Histogram
	inFlight prometheus.GaugeFunc
}

// New returns a loop; Run starts it.
func New(cfg Config, q *Queue, store Store, pub Publisher, feed Feeder) *Loop {
	if cfg.ClaimBatch <= 0 {
		cfg.ClaimBatch = 500
	}
	if cfg.MaxInFlight < cfg.ClaimBatch {
		cfg.MaxInFlight = 40 * cfg.ClaimBatch
	}
	if cfg.Publishers <= 0 {
		cfg.Publishers = 8
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.NotSent == nil {
		cfg.NotSent = func(error) bool { return false }
	}
	if cfg.ResultLabel == nil {
		cfg.ResultLabel = func(error) string { return "error" }
	}
	l := &Loop{
		cfg: cfg, q: q, store: store, pub: pub, feed: feed, log: cfg.Logger, clk: cfg.Clock,
		clocks:  map[int64]claimed{},
		tokens:  map[int64]int64{},
		slots:   make(chan struct{}, 1),
		armWake: make(chan struct{}, 1),
		doneSig: make(chan struct{}, 1),
		sem:     make(chan struct{}, cfg.Publishers),
	}
	l.m.rings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clockd_rings_total", Help: "Ring attempts by result (rung, unroutable, nacked, timeout, unavailable, error) and clocks expired or dead.",
	}, []string{"result"})
	l.m.lateness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "clockd_ring_lateness_seconds", Help: "Broker confirm time minus ring_at, for first attempts.",
		Buckets: []float64{.0005, .001, .002, .003, .005, .0075, .01, .015, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	l.m.claims = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "clockd_claim_batch_clocks", Help: "Clocks claimed per claim round trip.",
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
	})
	l.m.inFlight = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "clockd_ring_in_flight", Help: "Clocks claimed (firing) and not yet recorded as rung or failed.",
	}, func() float64 { l.mu.Lock(); defer l.mu.Unlock(); return float64(l.inFlight) })
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(l.m.rings, l.m.lateness, l.m.claims, l.m.inFlight)
	}
	return l
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Run runs the loop until ctx is done, then hands back what it holds:
// armed clocks go back to pending, rings in flight finish and are recorded.
func (l *Loop) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	recCtx, stopRecorder := context.WithCancel(context.Background())
	wg.Add(1)
	go func() { defer wg.Done(); l.recorder(recCtx) }()
	var workers sync.WaitGroup
	workers.Add(2)
	go func() { defer workers.Done(); l.claimer(ctx) }()
	go func() { defer workers.Done(); l.firer(ctx) }()
	workers.Wait()
	relCtx, cancelRel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := l.releaseLost(relCtx, false); err != nil {
		l.log.Warn("clocks of a failed claim left firing; the next owner of their shards recovers them", "err", err)
	}
	cancelRel()
	// publishers still running finish and report
	for i := 0; i < cap(l.sem); i++ {
		l.sem <- struct{}{}
	}
	l.mu.Lock()
	var back []alarm.Clock
	for _, e := range l.armed {
		back = append(back, l.clocks[e.due.ID].Clock)
	}
	l.armed = nil
	l.mu.Unlock()
	l.report(func(r *results) { r.unclaim = append(r.unclaim, back...) })
	l.drainRecorder(recCtx)
	stopRecorder()
	wg.Wait()
	return nil
}

// releaseLost puts back to pending the clocks of the claims of unknown
// outcome and offers them to the feeder again (they may have been dropped
// from memory meanwhile, and a rescan does not see clocks left firing).
func (l *Loop) releaseLost(ctx context.Context, offer bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for len(l.lost) > 0 {
		lc := l.lost[0]
		ids := make([]int64, len(lc.dues))
		for i, d := range lc.dues {
			ids[i] = d.ID
		}
		if err := l.store.Release(ctx, lc.token, ids, l.clk.Now()); err != nil {
			return fmt.Errorf("release the clocks of a failed claim: %w", err)
		}
		l.lost = l.lost[1:]
		if offer {
			for _, d := range lc.dues {
				l.feed.Offer(d)
			}
		}
	}
	return nil
}

// drainRecorder waits until everything reported is recorded (bounded).
func (l *Loop) drainRecorder(ctx context.Context) {
	limit := l.clk.NewTimer(10 * time.Second)
	defer limit.Stop()
	for {
		l.mu.Lock()
		n := l.inFlight
		l.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-l.slots: // finished() signals it; the claimer is gone
		case <-limit.C():
			l.log.Warn("shutdown left clocks firing; the next owner of their shards recovers them", "clocks", n)
			return
		}
	}
}

func (l *Loop) sleep(ctx context.Context, d time.Duration) bool {
	t := l.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// claimer moves due clocks from the queue to the armed set, claiming them
// in MySQL a little ahead of their deadline.
func (l *Loop) claimer(ctx context.Context) {
	timer := l.clk.NewTimer(time.Hour)
	defer timer.Stop()
	failures := 0
	for ctx.Err() == nil {
		// back-pressure: bounded in-flight
		l.mu.Lock()
		full := l.inFlight+l.cfg.ClaimBatch > l.cfg.MaxInFlight
		l.mu.Unlock()
		if full {
			select {
			case <-ctx.Done():
				return
			case <-l.slots:
			}
			continue
		}
		if len(l.lost) > 0 {
			if err := l.releaseLost(ctx, true); err != nil {
				failures++
				if failures == 1 || failures%100 == 0 {
					l.log.Warn("claims paused until MySQL answers", "err", err, "failures", failures)
				}
				if !l.sleep(ctx, min(time.Duration(failures)*100*time.Millisecond, 2*time.Second)) {
					return
				}
				continue
			}
		}
		if err := l.pub.Ready(); err != nil {
			// no broker: leave clocks pending rather than claim what cannot ring
			if !l.sleep(ctx, 50*time.Millisecond) {
				return
			}
			continue
		}
		now := l.clk.Now()
		at, ok := l.q.Earliest()
		if !ok || at.After(now.Add(l.cfg.ClaimAhead)) {
			wait := time.Hour
			if ok {
				wait = at.Sub(now) - l.cfg.ClaimAhead
			}
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C():
			case <-l.q.Wake():
			}
			continue
		}
		dues := l.q.PopDue(now.Add(l.cfg.ClaimAhead), l.cfg.ClaimBatch)
		if len(dues) == 0 {
			continue
		}
		if err := l.claim(ctx, dues, now); err != nil {
			failures++
			if failures == 1 || failures%100 == 0 {
				l.log.Warn("claim failed; ringing paused until it works", "clocks", len(dues), "err", err, "failures", failures)
			}
			if !l.sleep(ctx, min(time.Duration(failures)*100*time.Millisecond, 2*time.Second)) {
				return
			}
			continue
		}
		if failures > 0 {
			l.log.Info("claims work again", "after_failures", failures)
			failures = 0
		}
	}
}

// claim claims dues in MySQL and arms what it got. When MySQL fails, the
// dues are offered back to the feeder (and the claim is remembered as
// lost, see releaseLost). Dues of shards whose lease is not
// valid at the moment are dropped: when the shard is lost its new owner
// loads them; when the local reckoning of the lease lapsed and is renewed,
// the feeder rescans the shard. Offering them back instead would have them
// popped again at once, ahead of the clocks of other shards.
func (l *Loop) claim(ctx context.Context, dues []alarm.Due, now time.Time) error {
	shardSet := map[int]bool{}
	for _, d := range dues {
		shardSet[d.Shard] = true
	}
	shards := make([]int, 0, len(shardSet))
	for s := range shardSet {
		shards = append(shards, s)
	}
	sort.Ints(shards)
	leases := l.feed.Leases(shards)
	held := make(map[int]int64, len(leases))
	for _, ls := range leases {
		held[ls.Shard] = ls.Epoch
	}
	ids := make([]int64, 0, len(dues))
	for _, d := range dues {
		if _, ok := held[d.Shard]; ok {
			ids = append(ids, d.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	token := rand.Int64()
	got, err := l.store.Claim(cctx, l.feed.Owner(), leases, ids, token, now.Add(l.cfg.ClaimAhead), now)
	if err != nil {
		// The claim may have been applied: the claimer releases it before
		// it claims again, else its clocks stay firing until the firing
		// timeout. Until then they wait in memory.
		lc := lostClaim{token: token}
		for _, d := range dues {
			if _, ok := held[d.Shard]; ok {
				lc.dues = append(lc.dues, d)
				l.feed.Offer(d)
			}
		}
		l.lost = append(l.lost, lc)
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil
		}
		return err
	}
	l.feed.Drained(shards)
	l.m.claims.Observe(float64(len(got)))
	if len(got) == 0 {
		return nil
	}
	l.mu.Lock()
	for _, c := range got {
		l.clocks[c.ID] = claimed{Clock: c, epoch: held[c.Shard]}
		l.tokens[c.ID] = token
		heap.Push(&l.armed, &entry{due: alarm.Due{ID: c.ID, Shard: c.Shard, At: c.NextTryAt}})
	}
	l.inFlight += len(got)
	l.mu.Unlock()
	signal(l.armWake)
	return nil
}

// firer publishes armed clocks when their deadline comes: one timer for the
// earliest, never a fixed poll.
func (l *Loop) firer(ctx context.Context) {
	timer := l.clk.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := l.clk.Now()
		l.mu.Lock()
		var batch []claimed
		for len(l.armed) > 0 && len(batch) < l.cfg.ClaimBatch && !l.armed[0].due.At.After(now) {
			e := heap.Pop(&l.armed).(*entry)
			batch = append(batch, l.clocks[e.due.ID])
			delete(l.clocks, e.due.ID)
		}
		wait := time.Hour
		if len(l.armed) > 0 {
			wait = l.armed[0].due.At.Sub(now)
		}
		l.mu.Unlock()
		if len(batch) > 0 {
			l.fire(ctx, batch, now)
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		case <-l.armWake:
		}
	}
}

// fire publishes one batch of due clocks in its own goroutine (bounded by
// the publisher slots) so that the next deadline is not held up by confirms.
func (l *Loop) fire(ctx context.Context, batch []claimed, now time.Time) {
	var rings []Ring
	var expired []int64
	var unclaim []alarm.Clock
	for _, c := range batch {
		switch {
		case !c.LatestRingAt.IsZero() && now.After(c.LatestRingAt):
			expired = append(expired, c.ID)
		case !l.feed.Valid(c.Shard, c.epoch):
			unclaim = append(unclaim, c.Clock)
		default:
			rings = append(rings, Ring{Clock: c.Clock, Attempt: c.Attempts + 1})
		}
	}
	if len(expired)+len(unclaim) > 0 {
		l.m.rings.WithLabelValues("expired").Add(float64(len(expired)))
		l.report(func(r *results) {
			r.expired = append(r.expired, expired...)
			r.unclaim = append(r.unclaim, unclaim...)
		})
	}
	if len(rings) == 0 {
		return
	}
	select {
	case l.sem <- struct{}{}:
	case <-ctx.Done():
		l.report(func(r *results) {
			for _, rg := range rings {
				r.unclaim = append(r.unclaim, rg.Clock)
			}
		})
		return
	}
	go func() {
		defer func() { <-l.sem }()
		errs := l.pub.Publish(context.WithoutCancel(ctx), rings)
		at := l.clk.Now()
		var rung []int64
		var failed []alarm.Outcome
		var failedClocks, notSent []alarm.Clock
		for i, err := range errs {
			c := rings[i].Clock
			if err != nil && l.cfg.NotSent(err) {
				// never left this process (broker away): no attempt was made
				l.m.rings.WithLabelValues(l.cfg.ResultLabel(err)).Inc()
				notSent = append(notSent, c)
				continue
			}
			if err == nil {
				rung = append(rung, c.ID)
				if rings[i].Attempt == 1 {
					l.m.lateness.Observe(at.Sub(c.RingAt).Seconds())
				}
				continue
			}
			l.m.rings.WithLabelValues(l.cfg.ResultLabel(err)).Inc()
			o := l.cfg.Retry.Outcome(c, at, err)
			if o.Status != alarm.StatusPending {
				l.m.rings.WithLabelValues(string(o.Status)).Inc()
			}
			failed = append(failed, o)
			failedClocks = append(failedClocks, c)
		}
		l.m.rings.WithLabelValues("rung").Add(float64(len(rung)))
		l.report(func(r *results) {
			r.rung = append(r.rung, rung...)
			r.rungAt = at
			r.failed = append(r.failed, failed...)
			r.failCls = append(r.failCls, failedClocks...)
			r.unclaim = append(r.unclaim, notSent...)
		})
	}()
}

func (l *Loop) report(f func(r *results)) {
	l.doneMu.Lock()
	f(&l.done)
	l.doneMu.Unlock()
	signal(l.doneSig)
}

// recorder writes outcomes to MySQL in batches: rung, failed, expired and
// unclaimed clocks, retrying while MySQL is away.
func (l *Loop) recorder(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.doneSig:
		}
		l.doneMu.Lock()
		r := l.done
		l.done = results{}
		l.doneMu.Unlock()
		if r.empty() {
			continue
		}
		for attempt := 1; ; attempt++ {
			err := l.record(ctx, &r)
			if err == nil {
				break
			}
			if attempt == 1 || attempt%50 == 0 {
				l.log.Warn("recording ring outcomes failed; retrying", "err", err, "attempt", attempt)
			}
			if !l.sleep(ctx, min(time.Duration(attempt)*100*time.Millisecond, 2*time.Second)) {
				return
			}
		}
	}
}

const recordChunk = 1000

// record writes r, removing from it what is written, so a retry resumes.
func (l *Loop) record(ctx context.Context, r *results) error {
	now := l.clk.Now()
	err := l.write(r.rung, func(ids, toks []int64) error {
		return l.store.MarkRung(ctx, ids, toks, r.rungAt)
	}, func(n int) { r.rung = r.rung[n:] })
	if err != nil {
		return err
	}
	err = l.write(outcomeIDs(r.failed), func(ids, toks []int64) error {
		return l.store.Fail(ctx, r.failed[:len(ids)], toks, now)
	}, func(n int) {
		for i, o := range r.failed[:n] {
			if o.Status == alarm.StatusPending {
				l.feed.Offer(alarm.Due{ID: o.ID, Shard: r.failCls[i].Shard, At: o.NextTryAt})
			}
		}
		r.failed, r.failCls = r.failed[n:], r.failCls[n:]
	})
	if err != nil {
		return err
	}
	err = l.write(r.expired, func(ids, toks []int64) error {
		return l.store.Expire(ctx, ids, toks, now)
	}, func(n int) { r.expired = r.expired[n:] })
	if err != nil {
		return err
	}
	return l.write(clockIDs(r.unclaim), func(ids, toks []int64) error {
		return l.store.Unclaim(ctx, ids, toks, now)
	}, func(n int) {
		for _, c := range r.unclaim[:n] {
			l.feed.Offer(alarm.Due{ID: c.ID, Shard: c.Shard, At: c.NextTryAt})
		}
		r.unclaim = r.unclaim[n:]
	})
}

// write records outcomes of ids in chunks, fenced by their claim tokens;
// written(n) is told after each chunk so that a retry resumes after it.
func (l *Loop) write(ids []int64, store func(ids, toks []int64) error, written func(n int)) error {
	for len(ids) > 0 {
		n := min(len(ids), recordChunk)
		toks, used := l.tokensOf(ids[:n])
		if err := store(ids[:n], toks); err != nil {
			return err
		}
		l.forget(ids[:n], used)
		written(n)
		ids = ids[n:]
		l.finished(n)
	}
	return nil
}

func outcomeIDs(os []alarm.Outcome) []int64 {
	ids := make([]int64, len(os))
	for i, o := range os {
		ids[i] = o.ID
	}
	return ids
}

func clockIDs(cs []alarm.Clock) []int64 {
	ids := make([]int64, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}

// tokensOf returns the distinct claim tokens of ids, and each id's token.
func (l *Loop) tokensOf(ids []int64) (distinct, each []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	each = make([]int64, len(ids))
	seen := map[int64]bool{}
	for i, id := range ids {
		tok := l.tokens[id]
		each[i] = tok
		if !seen[tok] {
			seen[tok] = true
			distinct = append(distinct, tok)
		}
	}
	return distinct, each
}

// forget drops the claim tokens of recorded clocks (unless the clock was
// claimed again meanwhile).
func (l *Loop) forget(ids, used []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, id := range ids {
		if l.tokens[id] == used[i] {
			delete(l.tokens, id)
		}
	}
}

func (l *Loop) finished(n int) {
	l.mu.Lock()
	l.inFlight -= n
	l.mu.Unlock()
	signal(l.slots)
}
