package preload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/ring"
)

// leaseStore keeps shard leases in memory for the lease keeper's rounds and
// logs, in order, what the keeper did with them.
type leaseStore struct {
	Store // LoadDue only, answered below

	mu     sync.Mutex
	owner  map[int]string // shard -> owner
	epoch  map[int]int64
	live   []string
	mute   map[string]bool // instances whose heartbeat said they cannot ring
	log    []string        // "recover 3 held [7 9]", "release [2 3]", ...
	shards int
	taken  bool // another process holds the instance id (Heartbeat)
}

func newLeaseStore(shards int, live ...string) *leaseStore {
	return &leaseStore{owner: map[int]string{}, epoch: map[int]int64{}, mute: map[string]bool{}, live: live, shards: shards}
}

func (s *leaseStore) note(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf(format, args...))
}

func (s *leaseStore) entries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

func (s *leaseStore) LoadDue(context.Context, int, time.Time, int64, time.Time, int) ([]alarm.Due, error) {
	return nil, nil
}

func (s *leaseStore) Heartbeat(_ context.Context, id, _ string, _ time.Time, _ time.Duration, rings bool, _ time.Duration) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken {
		return 0, fmt.Errorf("heartbeat: %w", alarm.ErrInstanceTaken)
	}
	s.mute[id] = !rings
	return 0, nil
}

func (s *leaseStore) RingingInstances(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, id := range s.live {
		if !s.mute[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

func (s *leaseStore) held(owner string) []alarm.Lease {
	var out []alarm.Lease
	for sh := 0; sh < s.shards; sh++ {
		if s.owner[sh] == owner {
			out = append(out, alarm.Lease{Shard: sh, Epoch: s.epoch[sh]})
		}
	}
	return out
}

func (s *leaseStore) RenewLeases(_ context.Context, owner string, _ time.Duration) ([]alarm.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held(owner), nil
}

func (s *leaseStore) AcquireLeases(_ context.Context, owner string, n int, _ time.Duration) ([]alarm.Lease, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sh := 0; sh < s.shards && n > 0; sh++ {
		if s.owner[sh] == "" {
			s.owner[sh] = owner
			s.epoch[sh]++
			n--
		}
	}
	return s.held(owner), nil
}

// AcquireFreeLeases: the fake's leases never expire, so every shard it
// hands out is a free one.
func (s *leaseStore) AcquireFreeLeases(ctx context.Context, owner string, n int, ttl time.Duration) ([]alarm.Lease, error) {
	return s.AcquireLeases(ctx, owner, n, ttl)
}

func (s *leaseStore) ReleaseLeases(_ context.Context, owner string, shards []int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(shards) == 0 {
		return nil
	}
	for _, sh := range shards {
		if s.owner[sh] == owner {
			delete(s.owner, sh)
		}
	}
	sorted := slices.Sorted(slices.Values(shards))
	s.note("release %v", sorted)
	return nil
}

func (s *leaseStore) ReleaseLeasesAt(_ context.Context, owner string, leases []alarm.Lease) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(leases) == 0 {
		return nil
	}
	var shards []int
	for _, l := range leases {
		if s.owner[l.Shard] == owner && s.epoch[l.Shard] == l.Epoch {
			delete(s.owner, l.Shard)
		}
		shards = append(shards, l.Shard)
	}
	s.note("release %v", slices.Sorted(slices.Values(shards)))
	return nil
}

func (s *leaseStore) RecoverFiring(_ context.Context, shard int, _ int64, _ time.Time, held []int64, _ time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.note("recover %d held %v", shard, held)
	return 0, nil
}

func (s *leaseStore) Leave(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.note("leave %s", id)
	return nil
}

func leaseManager(t *testing.T, store *leaseStore, cfg Config) *Manager {
	t.Helper()
	return leaseManagerOn(t, store, store.shards, cfg)
}

// leaseManagerOn is leaseManager on any store (a leaseStore wrapped to fail).
func leaseManagerOn(t *testing.T, store Store, shards int, cfg Config) *Manager {
	t.Helper()
	cfg.InstanceID, cfg.Shards = "a", shards
	cfg.Window, cfg.Interval, cfg.Rescan = 10*time.Second, time.Hour, time.Hour
	cfg.LeaseTTL, cfg.FiringTimeout, cfg.HeapCap = 10*time.Second, time.Minute, 1000
	m := New(cfg, store, ring.NewQueue())
	t.Cleanup(func() {
		m.handovers.Wait()
		for sh := range shards {
			m.stopLoader(sh)
		}
		m.wg.Wait()
	})
	return m
}

// handingOver starts instance a on 4 shards, lets b join, and returns once
// a hands shards 2 and 3 over and their drain waits: until release is
// closed (confirms still to come).
func handingOver(t *testing.T) (store *leaseStore, m *Manager, release chan struct{}) {
	t.Helper()
	store = newLeaseStore(4, "a")
	release = make(chan struct{})
	draining := make(chan struct{}, 1)
	m = leaseManager(t, store, Config{Drain: func(context.Context, []int) error {
		draining <- struct{}{}
		<-release
		return nil
	}})
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.live = []string{"a", "b"} // b joins: a hands 2 and 3 over
	store.mu.Unlock()
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-draining
	return store, m, release
}

func TestTarget(t *testing.T) {
	tests := []struct {
		shards int
		live   []string
		me     string
		want   int
	}{
		{32, []string{"a"}, "a", 32},
		{32, []string{"a", "b", "c"}, "a", 11},
		{32, []string{"a", "b", "c"}, "b", 11},
		{32, []string{"a", "b", "c"}, "c", 10},
		{32, []string{"a", "c"}, "b", 11}, // not visible yet: counted in at its rank
		{4, []string{"a", "b", "c", "d", "e"}, "e", 0},
	}
	for _, tt := range tests {
		if got := target(tt.shards, tt.live, tt.me); got != tt.want {
			t.Errorf("target(%d, %v, %s) = %d, want %d", tt.shards, tt.live, tt.me, got, tt.want)
		}
	}
}

// A round takes the fair share, recovers each gained shard's firing clocks
// except those the ring loop still holds, and starts its loader.
func TestRoundGainsAndRecoversSkippingHeld(t *testing.T) {
	store := newLeaseStore(4, "a")
	m := leaseManager(t, store, Config{Held: func() []int64 { return []int64{7, 9} }})
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"release [0 1 2 3]"} // a restart under the same id gives old leases up first
	for sh := range 4 {
		want = append(want, fmt.Sprintf("recover %d held [7 9]", sh))
	}
	if got := store.entries(); !slices.Equal(got, want) {
		t.Fatalf("store calls %q, want %q", got, want)
	}
	for sh := range 4 {
		if m.ValidUntil(sh, 1).IsZero() {
			t.Errorf("shard %d not held after the round", sh)
		}
	}
}

// A rebalance drains a shard before it releases it: when Drain runs, the
// shard's loader is stopped (no claim takes its clocks) but its lease is
// still held here (its rings in flight are waited for), and the release
// comes only after Drain returned; then the hold is over.
func TestRebalanceDrainsBeforeRelease(t *testing.T) {
	store := newLeaseStore(4, "a")
	var m *Manager
	m = leaseManager(t, store, Config{Drain: func(_ context.Context, shards []int) error {
		store.mu.Lock()
		defer store.mu.Unlock()
		for _, sh := range shards {
			if len(m.Leases([]int{sh})) != 0 {
				t.Errorf("shard %d can still be claimed here while it is drained", sh)
			}
			if !m.ValidUntil(sh, store.epoch[sh]).After(time.Now()) {
				t.Errorf("shard %d is no longer held here while it is drained: its rings in flight would be cut short", sh)
			}
		}
		store.note("drain %v", shards)
		return nil
	}})
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.live = []string{"a", "b"} // b joins: a keeps 2
	store.log = nil
	store.mu.Unlock()
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.handovers.Wait()
	if got, want := store.entries(), []string{"drain [2 3]", "release [2 3]"}; !slices.Equal(got, want) {
		t.Fatalf("store calls %q, want %q (drain, then release)", got, want)
	}
	for sh, held := range []bool{true, true, false, false} {
		if got := m.ValidUntil(sh, 1).After(time.Now()); got != held {
			t.Errorf("shard %d held: %v, want %v", sh, got, held)
		}
	}
}

// The shards being handed over are renewed with the kept ones by the
// rounds that run while they drain, and count no more in the share: a
// drain that waits for slow confirms longer than the lease's reckoning at
// the give-up keeps the lease, so the confirms are waited for, not
// counted as failed attempts and rung again by the next owner (found by
// review: 25 to 544 clocks rang twice in moves under 2 s confirms).
func TestHandedOverShardsStayHeldWhileDraining(t *testing.T) {
	store, m, release := handingOver(t)
	first := m.ValidUntil(2, 1)
	time.Sleep(10 * time.Millisecond)
	if err := m.round(context.Background()); err != nil { // while draining
		t.Fatal(err)
	}
	if v := m.ValidUntil(2, 1); !v.After(first) {
		t.Errorf("shard 2, draining: held until %v after a round, %v before; want it renewed", v, first)
	}
	store.mu.Lock()
	held := store.held("a")
	store.mu.Unlock()
	if len(held) != 4 {
		t.Errorf("while draining a holds %v in MySQL, want all 4 until the release", held)
	}
	m.mu.Lock()
	loaders := len(m.loaders)
	m.mu.Unlock()
	if loaders != 2 {
		t.Errorf("a runs %d loaders while draining 2 shards, want 2", loaders)
	}
	close(release)
	m.handovers.Wait()
	if m.ValidUntil(2, 1).After(time.Now()) || m.ValidUntil(3, 1).After(time.Now()) {
		t.Error("shards 2 and 3 still held here after their release")
	}
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	held = store.held("a")
	store.mu.Unlock()
	if len(held) != 2 {
		t.Errorf("after the release a holds %v, want 2 shards", held)
	}
}

// ctxLeaseStore fails a release whose context is done, as MySQL does.
type ctxLeaseStore struct{ *leaseStore }

func (s ctxLeaseStore) ReleaseLeases(ctx context.Context, owner string, shards []int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.leaseStore.ReleaseLeases(ctx, owner, shards)
}

func (s ctxLeaseStore) ReleaseLeasesAt(ctx context.Context, owner string, leases []alarm.Lease) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.leaseStore.ReleaseLeasesAt(ctx, owner, leases)
}

// A drain that waits long (slow confirms, up to DrainTimeout) still ends in
// the release of the shards handed over: it used to spend the round's
// context (half the TTL), the release failed, and the shards stayed leased
// here with their loaders stopped: nobody rang them until the lease ran
// out.
func TestSlowDrainStillReleases(t *testing.T) {
	store := newLeaseStore(4, "a")
	ttl := 400 * time.Millisecond
	drained := make(chan []int, 1)
	m := New(Config{
		InstanceID: "a", Shards: 4, Window: 10 * time.Second, Interval: time.Hour, Rescan: time.Hour,
		LeaseTTL: ttl, FiringTimeout: time.Minute, HeapCap: 1000,
		Drain: func(ctx context.Context, shards []int) error {
			drained <- shards
			<-ctx.Done() // confirms that do not come before DrainTimeout
			return ctx.Err()
		},
	}, ctxLeaseStore{store}, ring.NewQueue())
	t.Cleanup(func() {
		for sh := range 4 {
			m.stopLoader(sh)
		}
		m.wg.Wait()
	})
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.live = []string{"a", "b"}
	store.log = nil
	store.mu.Unlock()
	began := time.Now()
	if err := m.round(context.Background()); err != nil {
		t.Fatalf("the round that handed shards over failed after %v: %v", time.Since(began).Round(time.Millisecond), err)
	}
	if took := time.Since(began); took > ttl/4 {
		t.Errorf("the round took %v: it waited for the drain", took)
	}
	if got := <-drained; !slices.Equal(got, []int{2, 3}) {
		t.Errorf("drained %v, want [2 3]", got)
	}
	m.handovers.Wait()
	if got, want := store.entries(), []string{"release [2 3]"}; !slices.Equal(got, want) {
		t.Fatalf("store calls %q, want %q", got, want)
	}
	for sh, held := range []bool{true, true, false, false} {
		if got := m.ValidUntil(sh, 1).After(time.Now()); got != held {
			t.Errorf("shard %d held: %v, want %v", sh, got, held)
		}
	}
}

// A lease another instance took (renewal no longer returns it) stops the
// shard's loader and counts a lost lease; the other shards go on.
func TestLostLeaseStopsLoader(t *testing.T) {
	store := newLeaseStore(2, "a")
	m := leaseManager(t, store, Config{})
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.owner[1] = "z"
	store.epoch[1]++
	store.mu.Unlock()
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !m.ValidUntil(1, 1).IsZero() || !m.ValidUntil(1, 2).IsZero() {
		t.Error("the lost shard is still held here")
	}
	if m.ValidUntil(0, 1).IsZero() {
		t.Error("the kept shard is no longer held")
	}
}

func TestShare(t *testing.T) {
	tests := []struct {
		ringing []string
		me      string
		st      brokerState
		held    int
		want    int
	}{
		{[]string{"a", "b"}, "a", ringing, 0, 16},
		{[]string{"b"}, "a", ringing, 0, 16},  // my heartbeat not visible yet: counted in
		{[]string{"b"}, "a", blip, 5, 5},      // a blip: neither take nor give
		{[]string{"b"}, "a", noBroker, 16, 0}, // b can ring: a gives everything up
		{[]string{}, "a", noBroker, 16, 16},   // nobody can ring: a keeps what it holds
		{[]string{}, "a", noBroker, 0, 0},     // ... and takes nothing
		{[]string{"a"}, "a", noBroker, 5, 5},  // a stale heartbeat of mine is not another instance
		{[]string{"a", "b", "c"}, "c", noBroker, 3, 0},
	}
	for _, tt := range tests {
		if got := share(32, tt.ringing, tt.me, tt.st, tt.held); got != tt.want {
			t.Errorf("share(32, %v, %s, state %d, held %d) = %d, want %d", tt.ringing, tt.me, tt.st, tt.held, got, tt.want)
		}
	}
}

// An instance whose broker fails says so with its next heartbeat but keeps
// its shards for one lease TTL (a node's restart), then gives them all up
// while another instance can ring; once the broker is back it takes its
// share again.
func TestBrokerLossGivesShardsUp(t *testing.T) {
	store := newLeaseStore(4, "a", "b")
	var clock atomic.Int64 // the loaders read it too
	clock.Store(time.Unix(1_700_000_000, 0).UnixNano())
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	var brokerErr error
	m := leaseManager(t, store, Config{
		Now:     func() time.Time { return time.Unix(0, clock.Load()) },
		CanRing: func() error { return brokerErr },
	})
	round := func() { t.Helper(); roundAndWait(t, m) }
	heldHere := func() int {
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.held("a"))
	}
	round()
	if got := heldHere(); got != 2 {
		t.Fatalf("a holds %d shards, want its share 2", got)
	}
	brokerErr = errors.New("rabbitmq: connection refused")
	round()
	if got := heldHere(); got != 2 || !store.mute["a"] {
		t.Fatalf("just after the broker failed a holds %d shards (muted %v), want 2, muted at once", got, store.mute["a"])
	}
	advance(9 * time.Second) // under the lease TTL (10 s): a restart of the node
	round()
	if got := heldHere(); got != 2 {
		t.Fatalf("after 9 s without the broker a holds %d shards, want still 2", got)
	}
	advance(2 * time.Second)
	round()
	if got := heldHere(); got != 0 || !store.mute["a"] {
		t.Fatalf("after 11 s without the broker a holds %d shards (muted %v), want none, muted", got, store.mute["a"])
	}
	round()
	if got := heldHere(); got != 0 {
		t.Fatalf("a took %d shards back while it cannot ring", got)
	}
	brokerErr = nil
	round()
	if got := heldHere(); got != 2 || store.mute["a"] {
		t.Fatalf("with the broker back a holds %d shards (muted %v), want its share 2", got, store.mute["a"])
	}
}

// An instance that cannot reach the broker at its start takes no shards
// from the others; alone, with no instance able to ring, it keeps what it
// holds rather than leave the shards unowned.
func TestNoBrokerAtStart(t *testing.T) {
	store := newLeaseStore(4, "a", "b")
	m := leaseManager(t, store, Config{CanRing: func() error { return errors.New("dial: connection refused") }})
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	n := len(store.held("a"))
	store.mu.Unlock()
	if n != 0 || !store.mute["a"] {
		t.Fatalf("a holds %d shards (muted %v) at a start without the broker, want none", n, store.mute["a"])
	}
}

// rowLeaseStore is a leaseStore whose LoadDue serves pending clocks.
type rowLeaseStore struct {
	*leaseStore
	rows loadStore
}

func (s *rowLeaseStore) LoadDue(ctx context.Context, shard int, afterAt time.Time, afterID int64, until time.Time, limit int) ([]alarm.Due, error) {
	return s.rows.LoadDue(ctx, shard, afterAt, afterID, until, limit)
}

// RecheckAll (called when this instance's hint queue is bound again after
// a lost connection) has every owned shard read again: a clock created
// through another instance while the hint queue was gone, due in a range
// the loader read before, is found at once, not at the next full rescan.
func TestRecheckAllFindsClocksWhoseHintsWereLost(t *testing.T) {
	store := &rowLeaseStore{leaseStore: newLeaseStore(2, "a")}
	m := leaseManager(t, store.leaseStore, Config{})
	m.store = store
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitLoaded := func(what string, ids ...int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for _, id := range ids {
			for !m.q.Has(id) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: clock %d not in memory after 5 s", what, id)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	now := time.Now()
	store.rows.insert(alarm.Due{ID: 1, Shard: 0, At: now.Add(3 * time.Second)})
	m.RecheckAll()
	waitLoaded("a clock stored before the first load", 1)
	// both loaders have read their windows; clocks due within them are
	// stored without an offer (their hints went nowhere)
	time.Sleep(50 * time.Millisecond)
	store.rows.insert(alarm.Due{ID: 2, Shard: 0, At: now.Add(2 * time.Second)})
	store.rows.insert(alarm.Due{ID: 3, Shard: 1, At: now.Add(time.Second)})
	time.Sleep(100 * time.Millisecond)
	if m.q.Has(2) || m.q.Has(3) {
		t.Fatal("clocks behind the loaders' cursors were found without a rescan: the test shows nothing")
	}
	m.RecheckAll()
	waitLoaded("after RecheckAll", 2, 3)
}

// failingRelease fails the first fail releases of hand-overs.
type failingRelease struct {
	*leaseStore
	fail int
}

func (s *failingRelease) ReleaseLeasesAt(ctx context.Context, owner string, leases []alarm.Lease) error {
	if s.fail > 0 {
		s.fail--
		return errors.New("lost connection to MySQL")
	}
	return s.leaseStore.ReleaseLeasesAt(ctx, owner, leases)
}

// A hand-over whose release fails leaves the shards with this instance: the
// next round takes them up again (a loader rings them) instead of renewing
// their leases with nobody ringing them, and a later round hands them over
// again.
func TestFailedReleaseKeepsShardsRung(t *testing.T) {
	store := &failingRelease{leaseStore: newLeaseStore(4, "a"), fail: 1}
	m := leaseManagerOn(t, store, 4, Config{})
	round := func() { t.Helper(); roundAndWait(t, m) }
	round()
	store.mu.Lock()
	store.live = []string{"a", "b"}
	store.mu.Unlock()
	round() // hands 2 and 3 over; the release fails
	round() // takes them up again, hands them over again
	round()
	store.mu.Lock()
	held := store.held("a")
	store.mu.Unlock()
	if len(held) != 2 {
		t.Errorf("a holds %v after a failed release and two more rounds, want its share of 2", held)
	}
	for sh := range 2 {
		if len(m.Leases([]int{sh})) != 1 {
			t.Errorf("kept shard %d is not rung here", sh)
		}
	}
}

// roundAndWait runs one lease round of m, failing the test on its error,
// and waits for the hand-overs it started.
func roundAndWait(t *testing.T, m *Manager) {
	t.Helper()
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.handovers.Wait()
}

// Another process took the instance id (this one was frozen or cut off past
// its heartbeat): Run stops, with alarm.ErrInstanceTaken, its loaders
// stopped, and neither releases the leases under the id nor removes its
// heartbeat: they are the other process's now.
func TestInstanceIDTakenStopsWithoutReleasing(t *testing.T) {
	store := newLeaseStore(4, "a")
	m := leaseManager(t, store, Config{})
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.taken = true
	store.log = nil
	store.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, alarm.ErrInstanceTaken) {
			t.Fatalf("Run returned %v, want alarm.ErrInstanceTaken", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run went on under an instance id another process holds")
	}
	if got := store.entries(); len(got) != 0 {
		t.Errorf("store calls %q after the id was taken, want none (no release, no leave)", got)
	}
	m.mu.Lock()
	loaders := len(m.loaders)
	m.mu.Unlock()
	if loaders != 0 {
		t.Errorf("%d loaders still run", loaders)
	}
}
