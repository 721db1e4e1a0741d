// Package preload owns shards and fills the ring queue: a lease keeper
// holds a fair share of the shards through lease rows in MySQL, and one
// loader per owned shard pulls the clocks due within the preload window
// into the bounded in-memory queue, in batches, without writing to them.
package preload

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/lograte"
	"github.com/clockd/clockd/internal/ring"
)

// Store is what the preloader needs of MySQL.
type Store interface {
	LoadDue(ctx context.Context, shard int, afterAt time.Time, afterID int64, until time.Time, limit int) ([]alarm.Due, error)
	RecoverFiring(ctx context.Context, shard int, epoch int64, staleBefore time.Time, held []int64, now time.Time) (int64, error)
	Heartbeat(ctx context.Context, instanceID, httpAddr string, started time.Time, ttl time.Duration, rings bool, window time.Duration) (time.Duration, error)
	RingingInstances(ctx context.Context) ([]string, error)
	RenewLeases(ctx context.Context, owner string, ttl time.Duration) ([]alarm.Lease, error)
	AcquireLeases(ctx context.Context, owner string, n int, ttl time.Duration) ([]alarm.Lease, error)
	AcquireFreeLeases(ctx context.Context, owner string, n int, ttl time.Duration) ([]alarm.Lease, error)
	ReleaseLeases(ctx context.Context, owner string, shards []int) error
	ReleaseLeasesAt(ctx context.Context, owner string, leases []alarm.Lease) error
	Leave(ctx context.Context, instanceID string) error
}

// Config tunes the preloader and the lease keeper.
type Config struct {
	InstanceID    string
	HTTPAddr      string
	Shards        int
	Window        time.Duration // load clocks due within now+Window
	Interval      time.Duration // loader tick
	Rescan        time.Duration // full rescan of a shard (safety net)
	Batch         int           // rows per load query
	HeapCap       int           // most clocks held in memory
	LeaseTTL      time.Duration
	FiringTimeout time.Duration // a firing clock older than this is recovered
	// Forward, when set, receives clocks due within the window whose shard
	// another instance owns (or whose lease here has lapsed), so that their
	// owner can be told at once.
	Forward func([]alarm.Due)
	// Drain, when set, is called before shards are given up for a
	// rebalance: it returns once the ring loop holds nothing of theirs.
	Drain func(ctx context.Context, shards []int) error
	// LeaseMargin: the ring loop claims a shard's clocks only while its
	// lease has this long left (claim ahead + the least lease a publish
	// needs), dropping the others; a lease renewed with less than this left
	// counts as lapsed, so that the shard is rescanned for what was dropped.
	LeaseMargin time.Duration
	// DrainTimeout bounds Drain (the rounds go on meanwhile, renewing
	// the leases of the shards drained); default half the lease TTL.
	DrainTimeout time.Duration
	// Held, when set, returns the claim tokens of the clocks the ring loop
	// holds: recovery of firing clocks leaves them alone.
	Held func() []int64
	// CanRing, when set, says whether this instance can publish now (nil:
	// it can). Its heartbeat says so to the others, which share the shards
	// among the instances that can. One that has not been able to for
	// LeaseTTL (longer than a broker node's restart or a move to the next
	// node of a cluster), or cannot at its start, gives its shards up to
	// the instances that can; with none that can, it keeps what it holds.
	// Unset: it always can.
	CanRing func() error
	// Report, when set, is called after each heartbeat: it writes what
	// other instances show of this one (the console's heap sizes). Its
	// failure is logged, never fails the lease round.
	Report     func(ctx context.Context) error
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
	// Started is when the process started, as its heartbeats say (the
	// instance id is claimed with it before the manager runs); zero: Now
	// at New.
	Started time.Time
}

// Manager keeps the leases and runs one loader per owned shard. It
// implements alarm.Scheduler and ring.Feeder.
type Manager struct {
	cfg   Config
	store Store
	q     *ring.Queue
	log   *slog.Logger
	now   func() time.Time
	// peerWindow: the largest preload window of the live instances, as of
	// the last heartbeat (a time.Duration; 0 until then)
	peerWindow atomic.Int64
	// hintMu orders a hint's check and offer (Hinted) with the API's
	// changes made here (Scheduled)
	hintMu sync.Mutex

	mu      sync.Mutex
	loaders map[int]*loader
	handing map[int]*handOff // shards handed over, until some time after their release
	lastOK  time.Time        // last successful lease round
	lastErr error
	joined  bool // leases left under this instance id by a previous process were released
	// backAt: this instance's lease rounds failed for over half a lease
	// TTL and succeeded again at backAt; until one TTL after it, no lease
	// of another instance is taken (see round).
	backAt time.Time

	// the broker as this instance sees it (lease keeper goroutine only)
	judged bool // judged once
	gaveUp bool // it has judged itself unable to ring for want of a broker
	// handedOver: it gave its shards up to instances that can ring (said
	// once per broker outage)
	handedOver bool
	downSince  time.Time // since when CanRing fails; zero while it works

	wg        sync.WaitGroup
	handovers sync.WaitGroup // handOver goroutines
	started   time.Time

	owned   prometheus.Gauge
	lostCnt prometheus.Counter
	asked   prometheus.Counter
	// loadFails rate-limits "loading shard failed" over every shard: in an
	// outage each of up to 4,096 shards fails at once
	loadFails *lograte.Limiter
}

// loadFailLogEvery is how often a failed shard load is logged, whichever
// shard; the next line counts those held back.
const loadFailLogEvery = 10 * time.Second

// New returns a manager; Run starts it.
func New(cfg Config, store Store, q *ring.Queue) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 2000
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = cfg.LeaseTTL / 2
	}
	if cfg.Held == nil {
		cfg.Held = func() []int64 { return nil }
	}
	m := &Manager{cfg: cfg, store: store, q: q, log: cfg.Logger, now: cfg.Now, loaders: map[int]*loader{}, handing: map[int]*handOff{}, started: cmp.Or(cfg.Started, cfg.Now()),
		loadFails: lograte.New(loadFailLogEvery, time.Now)}
	m.owned = prometheus.NewGauge(prometheus.GaugeOpts{Name: "clockd_shards_owned", Help: "Shards this instance holds a lease on."})
	m.lostCnt = prometheus.NewCounter(prometheus.CounterOpts{Name: "clockd_shard_leases_lost_total", Help: "Shard leases lost to another instance or to expiry."})
	m.asked = prometheus.NewCounter(prometheus.CounterOpts{Name: "clockd_shard_rescans_asked_total",
		Help: "Rescans of an owned shard that another instance asked for, having taken a create due soon that it could not hint."})
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(m.owned, m.lostCnt, m.asked,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "clockd_heap_clocks", Help: "Clocks held in the in-memory queue."},
				func() float64 { return float64(q.Len()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "clockd_preloaded_not_due_clocks", Help: "Clocks in memory whose time has not come yet."},
				func() float64 { return float64(q.NotDue(m.now())) }),
		)
	}
	return m
}

// Owner is this instance's id.
func (m *Manager) Owner() string { return m.cfg.InstanceID }

// quota is how many clocks of one class a shard may keep in memory.
func (m *Manager) quota() int {
	m.mu.Lock()
	n := len(m.loaders)
	m.mu.Unlock()
	if n == 0 {
		n = 1
	}
	return max(1, m.cfg.HeapCap/(2*n))
}

func (m *Manager) startLoader(l alarm.Lease, validUntil time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &loader{
		m: m, shard: l.Shard, epoch: l.Epoch, boundary: m.now().Truncate(time.Millisecond),
		wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{}),
		rescanSeen: l.RescanAt, // a new loader reads the whole shard anyway
	}
	ld.validUntil = validUntil
	ld.reset()
	m.mu.Lock()
	m.loaders[l.Shard] = ld
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(ld.done)
		ld.run(ctx)
	}()
}

func (m *Manager) stopLoader(shard int) {
	m.mu.Lock()
	ld, ok := m.loaders[shard]
	delete(m.loaders, shard)
	m.mu.Unlock()
	if !ok {
		return
	}
	ld.invalidate()
	ld.cancel()
	<-ld.done
	m.q.DropShard(shard)
}

// Leases returns the leases held for the given shards (others are left out).
func (m *Manager) Leases(shards []int) []alarm.Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]alarm.Lease, 0, len(shards))
	for _, s := range shards {
		if ld, ok := m.loaders[s]; ok && ld.valid(time.Now()) {
			out = append(out, alarm.Lease{Shard: s, Epoch: ld.epoch})
		}
	}
	return out
}

// ValidUntil is when the hold on the shard under the given epoch ends by the
// local clock's reckoning of the lease (with a safety margin); zero when
// the shard is not held under that epoch.
func (m *Manager) ValidUntil(shard int, epoch int64) time.Time {
	m.mu.Lock()
	ld, ok := m.loaders[shard]
	var handed time.Time // handed over: held until released
	if h, ok := m.handing[shard]; ok && h.epoch == epoch {
		handed = h.until
	}
	m.mu.Unlock()
	if ok && ld.epoch == epoch {
		return ld.until()
	}
	return handed
}

// Recheck reads a shard's window from MySQL again soon: memory may no
// longer match its rows (a change whose outcome could not be learned).
func (m *Manager) Recheck(shard int) {
	m.mu.Lock()
	ld, ok := m.loaders[shard]
	m.mu.Unlock()
	if ok {
		ld.rescan()
	}
}

// RecheckAll reads every owned shard's window from MySQL again soon: hints
// sent to this instance while it had no hint queue (its connection to the
// broker was lost, the broker restarted) are gone, and the clocks they
// named lie in ranges already read.
func (m *Manager) RecheckAll() {
	m.mu.Lock()
	lds := make([]*loader, 0, len(m.loaders))
	for _, ld := range m.loaders {
		lds = append(lds, ld)
	}
	m.mu.Unlock()
	for _, ld := range lds {
		ld.rescan()
	}
}

// Offer takes a clock whose next try is known (new, moved, retried, a
// recurring clock's next occurrence, a hint from another instance): it
// goes into memory at once when its shard is owned here and it is due
// within the window; otherwise its loader will find it. What a load
// running meanwhile read of the clock is left out: it may be older (see
// ring.Queue).
func (m *Manager) Offer(d alarm.Due) {
	m.q.Changed(d.ID)
	m.mu.Lock()
	ld, ok := m.loaders[d.Shard]
	m.mu.Unlock()
	if !ok {
		return
	}
	ld.offer(d)
}

// Hinted takes a hint from another instance: a clock it created or
// changed, due soon in a shard owned here. A hint may be older than a
// change made through this instance since (its message crossed a PATCH
// here): found by review, the owner's queue got the create's time back
// after a PATCH here, and the clock rang 6 s late, or expired unrung past
// the PATCH's latest_ring_at. So a hint never moves a queued clock later;
// a queued time too early corrects itself (the claim misses the clock,
// and its row's time is read back and offered).
func (m *Manager) Hinted(d alarm.Due) {
	m.hintMu.Lock()
	defer m.hintMu.Unlock()
	if at, ok := m.q.At(d.ID); ok && !at.After(d.At) {
		return
	}
	m.Offer(d)
}

// Scheduled implements alarm.Scheduler.
func (m *Manager) Scheduled(clocks []alarm.Clock) {
	var remote []alarm.Due
	// the owner may load further ahead than this instance: hinted within
	// the largest window of the live instances (found by review: with
	// windows of 10 s and 2 s, clocks due in 5 s created through the 2 s
	// instance rang at the owner's next rescan, up to 14 s late)
	horizon := m.now().Add(max(m.cfg.Window, time.Duration(m.peerWindow.Load())))
	m.hintMu.Lock() // a hint's check and offer do not fall between a change's
	for _, c := range clocks {
		m.q.Changed(c.ID)
		if c.Status != alarm.StatusPending {
			continue
		}
		d := alarm.Due{ID: c.ID, Shard: c.Shard, At: c.NextTryAt}
		m.mu.Lock()
		ld, ok := m.loaders[d.Shard]
		m.mu.Unlock()
		switch {
		case ok && ld.valid(time.Now()):
			ld.offer(d)
		case m.cfg.Forward != nil && !d.At.After(horizon):
			remote = append(remote, d)
		}
	}
	m.hintMu.Unlock()
	if len(remote) > 0 {
		m.cfg.Forward(remote)
	}
}

// Unscheduled implements alarm.Scheduler.
func (m *Manager) Unscheduled(ids []int64) { m.q.Changed(ids...) }

// Drained tells the loaders of these shards that the ring loop took clocks
// out of memory, so they may load more. A loader that stopped at its quota
// is woken once a quarter of the quota is free again (and by its own tick),
// not for every few clocks rung: at 11,000 rings/s, with shards at their
// quota, that was a thousand load queries a second of eight rows each, as
// the rings began (docs/benchmarks.md).
func (m *Manager) Drained(shards []int) {
	q := m.quota()
	wakeAt := q - max(1, q/4)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range shards {
		if ld, ok := m.loaders[s]; ok && ld.capped.Load() && m.q.Count(s, ring.Live)+m.q.Count(s, ring.Backlog) <= wakeAt {
			select {
			case ld.wake <- struct{}{}:
			default:
			}
		}
	}
}
