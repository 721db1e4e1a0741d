package ring

// The ring loop is three loops: the claimer claims due clocks from the
// in-memory queue in MySQL a little ahead of their deadline (claim.go), the
// firer publishes each at its deadline (fire.go), and the recorder writes
// what became of it (record.go). This file holds the state they share.

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/lograte"
)

// Store is what the ring loop needs of MySQL.
type Store interface {
	// Claim moves pending clocks to firing and counts the attempt about
	// to be made: the claimed clocks' Attempts is that attempt's number.
	Claim(ctx context.Context, owner string, leases []alarm.Lease, ids []int64, token int64, until, now time.Time) ([]alarm.Clock, error)
	// Waiting returns those of ids that are pending, not claimed and due
	// after until, with their next try: clocks a claim did not take
	// because their row moved later than the time memory had for them.
	Waiting(ctx context.Context, ids []int64, until time.Time) ([]alarm.Due, error)
	// Release puts back to pending those of ids that a claim with token
	// left firing (a claim that failed may have been applied).
	Release(ctx context.Context, token int64, ids []int64, now time.Time) error
	// The outcome writes apply only to clocks still firing under one of
	// the given claim tokens (fencing: a previous owner of a shard that
	// records late must not overwrite the claim of the new owner).
	MarkRung(ctx context.Context, rungs []alarm.Rung, tokens []int64) error
	Fail(ctx context.Context, outs []alarm.Outcome, tokens []int64, now time.Time) error
	Expire(ctx context.Context, ids, tokens []int64, now time.Time) error
	Unclaim(ctx context.Context, ids, tokens []int64, now time.Time) error
	// Advance records the outcome of recurring clocks' current
	// occurrences (rung, expired or dead) and moves each to its next
	// occurrence, in one transaction.
	Advance(ctx context.Context, advs []alarm.Advance, tokens []int64, now time.Time) error
}

// Ring is one message to publish: a claimed clock and its attempt number.
type Ring struct {
	Clock   alarm.Clock
	Attempt int
}

// Publisher publishes rings with confirms, one Result per ring. It gives up
// waiting for confirms when ctx's deadline passes.
type Publisher interface {
	Publish(ctx context.Context, rings []Ring) []Result
	Ready() error
}

// Result is what became of one published ring: Err nil means the broker
// confirmed it, at At (zero: when Publish returned).
type Result struct {
	Err error
	At  time.Time
}

// Feeder owns the shards: it tells their leases and takes clocks back.
type Feeder interface {
	Owner() string
	Leases(shards []int) []alarm.Lease
	// ValidUntil is when this instance's hold on the shard under epoch
	// ends by its own reckoning (zero when it does not hold it).
	ValidUntil(shard int, epoch int64) time.Time
	Offer(d alarm.Due)
	Drained(shards []int)
}

// Config tunes the loop.
type Config struct {
	ClaimAhead time.Duration // claim this long before the deadline
	// ClaimAheadMax: while claims are slow, claim up to this long before
	// the deadline (twice the slowest recent claim); <= ClaimAhead: never
	// earlier than ClaimAhead.
	ClaimAheadMax time.Duration
	ClaimBatch    int
	MaxInFlight   int // claimed but not yet finished
	// Publishers bounds the publish batches waiting for their confirms at
	// once (default 32). When all are waiting, the next due clocks wait for
	// one to end: with 8, the firer spent a third of a 7,500 rings/s run
	// there and half the clocks left over 1 ms after their time
	// (docs/benchmarks.md).
	Publishers int
	Claimers   int // concurrent claims (default 4)
	Recorders  int // concurrent outcome writes (default 4)
	// RecordGap: a write of a few rung outcomes waits for more until this
	// long after the previous write began (0: none).
	RecordGap time.Duration
	// MinLeaseLeft: a publish starts only while the shard's lease has at
	// least this long left, and its wait for confirms ends with the lease.
	MinLeaseLeft time.Duration
	Retry        Retry
	ResultLabel  func(error) string // names a publish error in metrics
	// NotSent tells a publish error for which the message surely never
	// reached the broker (not connected): the clock goes back to pending
	// without counting an attempt.
	NotSent    func(error) bool
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Clock      Clock // nil: the real clock
}

// DefaultMinLeaseLeft is Config.MinLeaseLeft when not set.
const DefaultMinLeaseLeft = 100 * time.Millisecond

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

	// claimMu is read-held by a claim worker for one claim: Drain takes
	// it so that no claim of a shard being handed over is under way.
	claimMu sync.RWMutex

	mu        sync.Mutex
	armed     minHeap           // claimed clocks waiting for their deadline
	clocks    map[int64]claimed // armed clocks by id
	flights   map[int64]flight  // every clock in flight: claimed, not yet recorded
	perShard  map[int]int       // clocks in flight per shard
	claiming  int               // clocks popped for claims under way
	claimJobs int               // claims under way
	claimDone chan struct{}     // signalled when a claim ends
	// claimFailures counts claims failed in a row; claiming pauses until
	// pauseUntil after one.
	claimFailures int
	pauseUntil    time.Time
	// slowClaim is the slowest recent claim, as of slowAt (see claimTook).
	slowClaim time.Duration
	slowAt    time.Time
	slots     chan struct{} // signalled when in-flight drops
	landed    chan struct{} // signalled when in-flight drops, for Drain
	armWake   chan struct{}

	doneMu  sync.Mutex
	done    results
	doneSig chan struct{}

	sem chan struct{} // publish concurrency

	lostMu sync.Mutex
	lost   []lostClaim // claims of unknown outcome, released before the next claim

	failLog *lograte.Limiter // failed ring attempts, per result

	m metrics
}

// flight is a clock in flight: the token of its claim and its shard.
type flight struct {
	token int64
	shard int
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
	rung    []alarm.Rung
	failed  []alarm.Outcome
	failCls []alarm.Clock
	expired []int64
	unclaim []alarm.Clock
	// advance: recurring clocks whose occurrence rang or was given up
	advance []alarm.Advance
}

func (r *results) empty() bool {
	return len(r.rung)+len(r.failed)+len(r.expired)+len(r.unclaim)+len(r.advance) == 0
}

type metrics struct {
	rings    *prometheus.CounterVec
	lateness prometheus.Histogram
	claims   prometheus.Histogram
	claimDur prometheus.Histogram
	// claimedLate counts clocks whose claim ended after their time
	claimedLate prometheus.Counter
	// claimMoved counts clocks a claim missed that were moved later
	claimMoved  prometheus.Counter
	publishDur  prometheus.Histogram
	publishLate prometheus.Histogram
	inFlight    prometheus.GaugeFunc
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
		cfg.Publishers = 32
	}
	if cfg.Claimers <= 0 {
		cfg.Claimers = 4
	}
	if cfg.Recorders <= 0 {
		cfg.Recorders = 4
	}
	if cfg.MinLeaseLeft <= 0 {
		cfg.MinLeaseLeft = DefaultMinLeaseLeft
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
		failLog:   lograte.New(10*time.Second, cfg.Clock.Now),
		clocks:    map[int64]claimed{},
		flights:   map[int64]flight{},
		perShard:  map[int]int{},
		slots:     make(chan struct{}, 1),
		landed:    make(chan struct{}, 1),
		claimDone: make(chan struct{}, 1),
		armWake:   make(chan struct{}, 1),
		doneSig:   make(chan struct{}, 1),
		sem:       make(chan struct{}, cfg.Publishers),
	}
	l.m.rings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clockd_rings_total", Help: "Ring attempts by result (rung, unroutable, nacked, timeout, unavailable) and clocks expired or dead.",
	}, []string{"result"})
	// every result from 0: a series that first appears at 1 has an
	// increase() of 0, so the first dead clocks of a process would never
	// fire an alert on increase(clockd_rings_total{result="dead"}[15m])
	for _, r := range []string{"rung", "unroutable", "nacked", "timeout", "unavailable", "expired", "dead"} {
		l.m.rings.WithLabelValues(r)
	}
	l.m.lateness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "clockd_ring_lateness_seconds", Help: "Broker confirm time minus ring_at, for first attempts.",
		Buckets: []float64{.0005, .001, .002, .003, .005, .0075, .01, .015, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	l.m.claims = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "clockd_claim_batch_clocks", Help: "Clocks claimed per claim round trip.",
		Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
	})
	l.m.claimDur = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "clockd_claim_duration_seconds", Help: "Time of one claim in MySQL (the UPDATE and the read of what it claimed); a claim slower than ring.claim_ahead makes rings late.",
		Buckets: []float64{.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	})
	l.m.claimedLate = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "clockd_ring_claimed_late_total", Help: "Clocks whose claim in MySQL ended after their time: their rings are late because of MySQL, not the broker.",
	})
	l.m.claimMoved = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "clockd_ring_claim_moved_total", Help: "Clocks a claim did not take because their row was due later than memory had it (two changes crossed); offered again at their time.",
	})
	l.m.publishDur = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "clockd_publish_duration_seconds", Help: "Time of one publish batch, from its first message to its last confirm; slow confirms make rings late.",
		Buckets: []float64{.001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	})
	l.m.publishLate = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "clockd_ring_publish_lateness_seconds", Help: "Start of a clock's publish minus ring_at, for first attempts: the lateness a ring has before the broker sees it.",
		Buckets: []float64{.0005, .001, .002, .003, .005, .0075, .01, .015, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	l.m.inFlight = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "clockd_ring_in_flight", Help: "Clocks claimed (firing) and not yet recorded as rung or failed.",
	}, func() float64 { l.mu.Lock(); defer l.mu.Unlock(); return float64(len(l.flights)) })
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(l.m.rings, l.m.lateness, l.m.claims, l.m.claimDur, l.m.claimedLate, l.m.claimMoved, l.m.publishDur, l.m.publishLate, l.m.inFlight)
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

// ahead is how long before their deadline clocks are claimed now:
// ClaimAhead, or twice the slowest recent claim when that is longer, up to
// ClaimAheadMax. A claim that ends after the deadline makes its clocks
// late (a claim takes 100-250 ms while MySQL is busy with thousands of
// rings a second, docs/benchmarks.md); claiming earlier only makes a
// cancel in that last stretch answer 409 (firing).
func (l *Loop) ahead() time.Duration {
	now := l.clk.Now()
	l.mu.Lock()
	slow := l.slowSince(now)
	l.mu.Unlock()
	return max(l.cfg.ClaimAhead, min(2*slow, l.cfg.ClaimAheadMax))
}

// slowSince is slowClaim as forgotten by now (called with mu held).
func (l *Loop) slowSince(now time.Time) time.Duration {
	if l.slowClaim == 0 {
		return 0
	}
	return time.Duration(float64(l.slowClaim) * math.Exp2(-float64(now.Sub(l.slowAt))/float64(slowHalfLife)))
}

// slowHalfLife is how fast the slowest recent claim is forgotten.
const slowHalfLife = 10 * time.Second

// claimTook records the time of a claim for ahead: the slowest recent
// claim halves every slowHalfLife unless a slower one comes. Forgotten by
// count instead (0.9 of it per claim), a slow claim was forgotten within
// half a second at 45 claims a second, and the next one, as slow, ended
// after its clocks' time: 4-7 % of the clocks of an 8,000 rings/s run
// were armed late, 0.7-2.4 % with this (docs/benchmarks.md).
func (l *Loop) claimTook(d time.Duration) {
	now := l.clk.Now()
	l.mu.Lock()
	l.slowClaim, l.slowAt = max(d, l.slowSince(now)), now
	l.mu.Unlock()
}

// Held returns the claim tokens of the clocks this loop holds (in flight:
// armed, being published, or confirmed and not yet recorded). Recovery of
// stale firing clocks must leave them alone.
func (l *Loop) Held() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[int64]bool{}
	var out []int64
	for _, f := range l.flights {
		if !seen[f.token] {
			seen[f.token] = true
			out = append(out, f.token)
		}
	}
	return out
}

// Busy reports whether the loop has work now or within `within`: clocks
// in flight, or a clock in its queue due by then. The janitor yields
// MySQL to the rings while it is busy.
func (l *Loop) Busy(within time.Duration) bool {
	l.mu.Lock()
	n := len(l.flights)
	l.mu.Unlock()
	if n > 0 {
		return true
	}
	at, ok := l.q.Earliest()
	return ok && !at.After(l.clk.Now().Add(within))
}

// Drain is called before the shards are handed to another instance (a
// rebalance): no claim of theirs is under way when it returns, their armed
// clocks go back to pending, and their rings in flight are confirmed (or
// failed) and recorded, so that the next owner finds no clock of theirs
// firing and rings none twice. It waits at most until ctx is done.
func (l *Loop) Drain(ctx context.Context, shards []int) error {
	drop := map[int]bool{}
	for _, s := range shards {
		drop[s] = true
	}
	l.claimMu.Lock() // a claim under way ends first (the loaders are stopped)
	l.mu.Lock()
	var back []alarm.Clock
	kept := l.armed[:0]
	for _, e := range l.armed {
		if drop[e.due.Shard] {
			back = append(back, l.clocks[e.due.ID].Clock)
			delete(l.clocks, e.due.ID)
			continue
		}
		kept = append(kept, e)
	}
	l.armed = kept
	l.armed.reindex()
	l.mu.Unlock()
	l.claimMu.Unlock()
	if len(back) > 0 {
		l.report(func(r *results) { r.unclaim = append(r.unclaim, back...) })
	}
	for {
		l.mu.Lock()
		n := 0
		for s := range drop {
			n += l.perShard[s]
		}
		l.mu.Unlock()
		if n == 0 {
			return nil
		}
		// landed wakes one waiter: drains of several hand-overs at once
		// (they run beside the lease rounds) also look again every 20 ms
		t := l.clk.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("drain shards %v: %d clocks still in flight: %w", shards, n, ctx.Err())
		case <-l.landed:
		case <-t.C():
		}
		t.Stop()
	}
}

func (l *Loop) hasLost() bool {
	l.lostMu.Lock()
	defer l.lostMu.Unlock()
	return len(l.lost) > 0
}

// releaseLost puts back to pending the clocks of the claims of unknown
// outcome and offers them to the feeder again (they may have been dropped
// from memory meanwhile, and a rescan does not see clocks left firing).
func (l *Loop) releaseLost(ctx context.Context, offer bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		l.lostMu.Lock()
		if len(l.lost) == 0 {
			l.lostMu.Unlock()
			return nil
		}
		lc := l.lost[0]
		l.lostMu.Unlock()
		ids := make([]int64, len(lc.dues))
		for i, d := range lc.dues {
			ids[i] = d.ID
		}
		if err := l.store.Release(ctx, lc.token, ids, l.clk.Now()); err != nil {
			return fmt.Errorf("release the clocks of a failed claim: %w", err)
		}
		l.lostMu.Lock()
		l.lost = l.lost[1:]
		l.lostMu.Unlock()
		if offer {
			for _, d := range lc.dues {
				l.feed.Offer(d)
			}
		}
	}
}

// drainRecorder waits until everything reported is recorded (bounded).
func (l *Loop) drainRecorder(ctx context.Context) {
	limit := l.clk.NewTimer(10 * time.Second)
	defer limit.Stop()
	for {
		l.mu.Lock()
		n := len(l.flights)
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
