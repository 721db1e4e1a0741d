// Package preload owns shards and fills the ring queue: a lease keeper
// holds a fair share of the shards through lease rows in MySQL, and one
// loader per owned shard pulls the clocks due within the preload window
// into the bounded in-memory queue, in batches, without writing to them.
package preload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/ring"
)

// Store is what the preloader needs of MySQL.
type Store interface {
	LoadDue(ctx context.Context, shard int, afterAt time.Time, afterID int64, until time.Time, limit int) ([]alarm.Due, error)
	RecoverFiring(ctx context.Context, shard int, epoch int64, staleBefore time.Time, held []int64, now time.Time) (int64, error)
	Heartbeat(ctx context.Context, instanceID, httpAddr string, started time.Time, ttl time.Duration) error
	LiveInstances(ctx context.Context) ([]string, error)
	RenewLeases(ctx context.Context, owner string, ttl time.Duration) ([]alarm.Lease, error)
	AcquireLeases(ctx context.Context, owner string, n int, ttl time.Duration) ([]alarm.Lease, error)
	ReleaseLeases(ctx context.Context, owner string, shards []int) error
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
	// DrainTimeout bounds Drain; default the lease TTL.
	DrainTimeout time.Duration
	// Held, when set, returns the claim tokens of the clocks the ring loop
	// holds: recovery of firing clocks leaves them alone.
	Held       func() []int64
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// Manager keeps the leases and runs one loader per owned shard. It
// implements alarm.Scheduler and ring.Feeder.
type Manager struct {
	cfg   Config
	store Store
	q     *ring.Queue
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	loaders map[int]*loader
	lastOK  time.Time // last successful lease round
	lastErr error
	joined  bool // leases left under this instance id by a previous process were released

	wg      sync.WaitGroup
	started time.Time

	owned   prometheus.Gauge
	lostCnt prometheus.Counter
}

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
		cfg.DrainTimeout = cfg.LeaseTTL
	}
	if cfg.Held == nil {
		cfg.Held = func() []int64 { return nil }
	}
	m := &Manager{cfg: cfg, store: store, q: q, log: cfg.Logger, now: cfg.Now, loaders: map[int]*loader{}, started: cfg.Now()}
	m.owned = prometheus.NewGauge(prometheus.GaugeOpts{Name: "clockd_shards_owned", Help: "Shards this instance holds a lease on."})
	m.lostCnt = prometheus.NewCounter(prometheus.CounterOpts{Name: "clockd_shard_leases_lost_total", Help: "Shard leases lost to another instance or to expiry."})
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(m.owned, m.lostCnt,
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

// Run keeps the leases until ctx is done, then stops the loaders and gives
// the shards up so that other instances take them over at once.
func (m *Manager) Run(ctx context.Context) error {
	tick := m.cfg.LeaseTTL / 4
	failures := 0
	for {
		if err := m.round(ctx); err != nil {
			failures++
			m.mu.Lock()
			m.lastErr = err
			m.mu.Unlock()
			if ctx.Err() == nil && (failures == 1 || failures%20 == 0) {
				m.log.Warn("lease round failed", "err", err, "failures", failures)
			}
		} else {
			if failures > 0 {
				m.log.Info("lease round works again", "after_failures", failures)
			}
			failures = 0
		}
		select {
		case <-ctx.Done():
			m.shutdown()
			return nil
		case <-time.After(tick):
		}
	}
}

// Ready is nil while lease rounds succeed.
func (m *Manager) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lastOK.IsZero() || time.Since(m.lastOK) > m.cfg.LeaseTTL {
		if m.lastErr != nil {
			return fmt.Errorf("shard leases not renewed: %w", m.lastErr)
		}
		return errors.New("shard leases not renewed yet")
	}
	return nil
}

// target is this instance's fair share of the shards.
func target(shards int, live []string, me string) int {
	i := sort.SearchStrings(live, me) // my rank among the live instances
	n := len(live)
	if i == n || live[i] != me {
		n++ // my heartbeat is not visible yet: count me in at my rank
	}
	t := shards / n
	if i < shards%n {
		t++
	}
	return t
}

func (m *Manager) round(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseTTL/2)
	defer cancel()
	start := time.Now() // local monotonic time the renewal is counted from
	ttl := m.cfg.LeaseTTL
	if err := m.store.Heartbeat(ctx, m.cfg.InstanceID, m.cfg.HTTPAddr, m.started, ttl); err != nil {
		return err
	}
	live, err := m.store.LiveInstances(ctx)
	if err != nil {
		return err
	}
	if !m.joined {
		// A previous process under this instance id (restarted at once
		// after a crash) may still hold leases. Renewing them would keep
		// their epoch: that process would not be fenced and the clocks it
		// left firing (claimed under that epoch) would wait for the firing
		// timeout. Give them up so they are acquired under new epochs.
		all := make([]int, m.cfg.Shards)
		for i := range all {
			all[i] = i
		}
		if err := m.store.ReleaseLeases(ctx, m.cfg.InstanceID, all); err != nil {
			return err
		}
		m.joined = true
	}
	want := target(m.cfg.Shards, live, m.cfg.InstanceID)
	leases, err := m.store.RenewLeases(ctx, m.cfg.InstanceID, ttl)
	if err != nil {
		return err
	}
	if extra := len(leases) - want; extra > 0 {
		// hand the highest shards over: stop ringing them first
		give := make([]int, 0, extra)
		for _, l := range leases[len(leases)-extra:] {
			give = append(give, l.Shard)
		}
		for _, s := range give {
			m.stopLoader(s)
		}
		// Drain, then release: the next owner must find none of their
		// clocks armed or in flight here, or it recovers and rings them a
		// second time.
		if m.cfg.Drain != nil {
			dctx, cancel := context.WithTimeout(context.Background(), m.cfg.DrainTimeout)
			err := m.cfg.Drain(dctx, give)
			cancel()
			if err != nil {
				m.log.Warn("shards handed over before their rings in flight were recorded; the next owner may ring some again", "shards", give, "err", err)
			}
		}
		if err := m.store.ReleaseLeases(ctx, m.cfg.InstanceID, give); err != nil {
			return err
		}
		leases = leases[:len(leases)-extra]
		m.log.Info("released shards for rebalancing", "shards", give, "live_instances", len(live))
	} else if extra < 0 {
		if leases, err = m.store.AcquireLeases(ctx, m.cfg.InstanceID, -extra, ttl); err != nil {
			return err
		}
	}
	validUntil := start.Add(ttl - ttl/5)
	held := map[int]alarm.Lease{}
	for _, l := range leases {
		held[l.Shard] = l
	}
	m.mu.Lock()
	var lost []int
	for s, ld := range m.loaders {
		if l, ok := held[s]; !ok || l.Epoch != ld.epoch {
			lost = append(lost, s)
		}
	}
	m.mu.Unlock()
	for _, s := range lost {
		m.lostCnt.Inc()
		m.log.Warn("shard lease lost", "shard", s)
		m.stopLoader(s)
	}
	var gained []int
	for _, l := range leases {
		m.mu.Lock()
		ld, ok := m.loaders[l.Shard]
		if ok {
			ld.setValid(validUntil)
		}
		m.mu.Unlock()
		if !ok {
			n, err := m.store.RecoverFiring(ctx, l.Shard, l.Epoch, m.now().Add(-m.cfg.FiringTimeout), m.cfg.Held(), m.now())
			if err != nil {
				return err
			}
			if n > 0 {
				m.log.Info("recovered clocks left firing by a previous owner", "shard", l.Shard, "clocks", n)
			}
			m.startLoader(l, validUntil)
			gained = append(gained, l.Shard)
		}
	}
	if len(gained) > 0 {
		m.log.Info("acquired shards", "shards", gained, "live_instances", len(live))
	}
	m.mu.Lock()
	m.lastOK = time.Now()
	m.lastErr = nil
	m.owned.Set(float64(len(m.loaders)))
	m.mu.Unlock()
	return nil
}

func (m *Manager) startLoader(l alarm.Lease, validUntil time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	ld := &loader{
		m: m, shard: l.Shard, epoch: l.Epoch, boundary: m.now().Truncate(time.Millisecond),
		wake: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{}),
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

func (m *Manager) shutdown() {
	m.mu.Lock()
	var shards []int
	for s := range m.loaders {
		shards = append(shards, s)
	}
	m.mu.Unlock()
	for _, s := range shards {
		m.stopLoader(s)
	}
	m.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.store.ReleaseLeases(ctx, m.cfg.InstanceID, shards); err != nil {
		m.log.Warn("could not release shard leases; they expire by themselves", "err", err)
	}
	if err := m.store.Leave(ctx, m.cfg.InstanceID); err != nil {
		m.log.Warn("could not remove instance heartbeat", "err", err)
	}
	m.owned.Set(0)
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
	m.mu.Unlock()
	if !ok || ld.epoch != epoch {
		return time.Time{}
	}
	return ld.until()
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

// Offer takes a clock whose next try is known (new, moved, retried): it
// goes into memory at once when its shard is owned here and it is due
// within the window; otherwise its loader will find it.
func (m *Manager) Offer(d alarm.Due) {
	m.mu.Lock()
	ld, ok := m.loaders[d.Shard]
	m.mu.Unlock()
	if !ok {
		return
	}
	ld.offer(d)
}

// Scheduled implements alarm.Scheduler.
func (m *Manager) Scheduled(clocks []alarm.Clock) {
	var remote []alarm.Due
	horizon := m.now().Add(m.cfg.Window)
	for _, c := range clocks {
		m.q.Remove(c.ID)
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
	if len(remote) > 0 {
		m.cfg.Forward(remote)
	}
}

// Unscheduled implements alarm.Scheduler.
func (m *Manager) Unscheduled(ids []int64) { m.q.Remove(ids...) }

// Drained tells the loaders of these shards that the ring loop took clocks
// out of memory, so they may load more.
func (m *Manager) Drained(shards []int) {
	q := m.quota()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range shards {
		if ld, ok := m.loaders[s]; ok && ld.capped.Load() && m.q.Count(s, ring.Live)+m.q.Count(s, ring.Backlog) < q {
			select {
			case ld.wake <- struct{}{}:
			default:
			}
		}
	}
}
