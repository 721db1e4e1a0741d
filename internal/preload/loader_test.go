package preload

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/ring"
	"github.com/clockd/clockd/internal/testenv"
)

// loadStore serves LoadDue from a list of pending clocks; the first call
// can be held (hold) to let the test act while the query runs.
type loadStore struct {
	Store // the lease methods are not used here

	mu      sync.Mutex
	rows    []alarm.Due // pending clocks, in (At, ID) order
	hold    chan struct{}
	started chan struct{}
}

func (s *loadStore) LoadDue(_ context.Context, shard int, afterAt time.Time, afterID int64, until time.Time, limit int) ([]alarm.Due, error) {
	s.mu.Lock()
	var out []alarm.Due
	for _, d := range s.rows {
		after := d.At.After(afterAt) || (d.At.Equal(afterAt) && d.ID > afterID)
		if d.Shard == shard && after && !d.At.After(until) && len(out) < limit {
			out = append(out, d)
		}
	}
	hold, started := s.hold, s.started
	s.hold = nil
	s.mu.Unlock()
	if hold != nil {
		close(started)
		<-hold
	}
	return out, nil
}

func (s *loadStore) insert(d alarm.Due) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = append(s.rows, d)
	slices.SortFunc(s.rows, func(a, b alarm.Due) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
}

// A clock offered while the shard is at its quota moves the live cursor
// back so that the loader reads it in turn. When that happens while a load
// query runs, the end of the query must not move the cursor past the clock
// again: it would wait for the next full rescan (30 s by default). That
// holds for a clock due in the range loaded before and for one due in the
// very range the running query reads (its snapshot is older than the
// clock's commit, so it cannot return it).
func TestOfferDuringLoadIsNotSkipped(t *testing.T) {
	for _, tt := range []struct {
		name string
		at   int // ms after t0; the running load reads (10 s, 11 s]
	}{
		{"due in the range loaded before", 1500},
		{"due in the range the load reads", 10500},
	} {
		t.Run(tt.name, func(t *testing.T) { offerDuringLoad(t, tt.at) })
	}
}

func offerDuringLoad(t *testing.T, dueMS int) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var nowMu sync.Mutex
	now := t0
	clock := func() time.Time { nowMu.Lock(); defer nowMu.Unlock(); return now }
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	st := &loadStore{}
	st.insert(alarm.Due{ID: 1, At: at(1000)})
	q := ring.NewQueue()
	m := New(Config{Shards: 1, Window: 10 * time.Second, HeapCap: 4, Batch: 100, Now: clock}, st, q)
	ld := &loader{m: m, shard: 0, boundary: t0, wake: make(chan struct{}, 1)}
	ld.reset()
	m.loaders[0] = ld // quota: 4/(2*1) = 2 per class

	// first pass: everything up to t0+10s is loaded
	if err := ld.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !q.Has(1) {
		t.Fatal("clock 1 not loaded")
	}
	// a second later the loader reads (t0+10s, t0+11s]; while that query
	// runs, the shard reaches its quota and clock 3, due in the range
	// already loaded, is created and offered
	nowMu.Lock()
	now = now.Add(time.Second)
	nowMu.Unlock()
	hold := make(chan struct{})
	st.mu.Lock()
	st.hold, st.started = hold, make(chan struct{})
	started := st.started
	st.mu.Unlock()
	done := make(chan error)
	go func() { done <- ld.load(context.Background()) }()
	<-started
	q.Add(ring.Live, alarm.Due{ID: 100, At: at(500)})
	d := alarm.Due{ID: 3, At: at(dueMS)}
	st.insert(d)
	ld.offer(d)
	if q.Has(3) {
		t.Fatal("offered into a full shard quota")
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// the ring loop takes clocks out; the next load has room for clock 3
	q.Remove(1, 100)
	if err := ld.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !q.Has(3) {
		ld.mu.Lock()
		defer ld.mu.Unlock()
		t.Errorf("clock 3, offered while a load ran, was skipped: live cursor at t0+%v (id max: %v)",
			ld.liveAt.Sub(t0), ld.liveID == math.MaxInt64)
	}
}

// The lease keeper resets a loader's cursors (a full rescan) when the local
// lease reckoning lapsed and is renewed, since the ring loop dropped the
// clocks it could not claim meanwhile. A load running at that moment must
// not move the cursors forward again when its query ends.
func TestResetDuringLoadIsNotLost(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var nowMu sync.Mutex
	now := t0
	clock := func() time.Time { nowMu.Lock(); defer nowMu.Unlock(); return now }
	st := &loadStore{}
	st.insert(alarm.Due{ID: 1, At: t0.Add(1500 * time.Millisecond)})
	q := ring.NewQueue()
	m := New(Config{Shards: 1, Window: 10 * time.Second, HeapCap: 1000, Batch: 100, Now: clock}, st, q)
	ld := &loader{m: m, shard: 0, boundary: t0, wake: make(chan struct{}, 1)}
	ld.reset()
	m.loaders[0] = ld
	if err := ld.load(context.Background()); err != nil || !q.Has(1) {
		t.Fatalf("first load: %v, clock 1 in memory: %v", err, q.Has(1))
	}
	q.Remove(1) // the ring loop popped it and could not claim it: dropped

	nowMu.Lock()
	now = now.Add(time.Second)
	nowMu.Unlock()
	hold := make(chan struct{})
	st.mu.Lock()
	st.hold, st.started = hold, make(chan struct{})
	started := st.started
	st.mu.Unlock()
	done := make(chan error)
	go func() { done <- ld.load(context.Background()) }()
	<-started // reading (t0+10s, t0+11s]
	ld.reset()
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !q.Has(1) {
		if err := ld.load(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !q.Has(1) {
		ld.mu.Lock()
		defer ld.mu.Unlock()
		t.Errorf("the rescan asked for during a load was lost: live cursor at t0+%v", ld.liveAt.Sub(t0))
	}
}

// A loader that stopped at its quota is woken by Drained once a quarter of
// the quota is free again, not for every clock rung: at high ring rates
// that was a storm of load queries of a few rows each.
func TestDrainedWakesAtAQuarterOfTheQuota(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &loadStore{}
	for id := int64(1); id <= 100; id++ {
		st.insert(alarm.Due{ID: id, At: t0.Add(time.Second + time.Duration(id)*time.Millisecond)})
	}
	q := ring.NewQueue()
	m := New(Config{Shards: 1, Window: 10 * time.Second, HeapCap: 64, Batch: 100,
		Now: func() time.Time { return t0 }}, st, q)
	ld := &loader{m: m, shard: 0, boundary: t0, wake: make(chan struct{}, 1)}
	ld.reset()
	m.loaders[0] = ld // quota: 64/(2*1) = 32 per class
	if err := ld.load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := q.Count(0, ring.Live); n != 32 || !ld.capped.Load() {
		t.Fatalf("%d clocks loaded, capped %v; want 32, capped", n, ld.capped.Load())
	}
	for id := int64(1); id <= 8; id++ {
		q.Remove(id) // rung
		m.Drained([]int{0})
		woken := false
		select {
		case <-ld.wake:
			woken = true
		default:
		}
		if want := id == 8; woken != want {
			t.Fatalf("after %d of 32 clocks rung: woken %v, want %v (at a quarter free)", id, woken, want)
		}
	}
}

// A load reads rows while the API changes them. When a change commits after
// the load's query read the row, the API tells the queue the clock's new
// place first; the load's answer, arriving after, must not put the old time
// back (a clock moved earlier rang at its old time, 2.1 s late, in a full
// test run) nor bring back a clock cancelled or paused. Nor may it undo the
// ring loop's offer of a recurring clock's next occurrence: the old time
// would be claimed at once, claim nothing, and the next occurrence would
// wait for the next full rescan.
func TestChangeDuringLoadIsNotUndone(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name   string
		change func(m *Manager, st *loadStore)
		want   time.Time // zero: not in memory
	}{
		{"moved earlier", func(m *Manager, st *loadStore) {
			st.rows[0].At = at(500)
			m.Scheduled([]alarm.Clock{{ID: 1, Status: alarm.StatusPending, NextTryAt: at(500)}})
		}, at(500)},
		{"moved later", func(m *Manager, st *loadStore) {
			st.rows[0].At = at(4000)
			m.Scheduled([]alarm.Clock{{ID: 1, Status: alarm.StatusPending, NextTryAt: at(4000)}})
		}, at(4000)},
		{"cancelled", func(m *Manager, st *loadStore) {
			st.rows = nil
			m.Unscheduled([]int64{1})
		}, time.Time{}},
		{"moved by another instance (a hint)", func(m *Manager, st *loadStore) {
			st.rows[0].At = at(700)
			m.Offer(alarm.Due{ID: 1, At: at(700)})
		}, at(700)},
		// the ring loop claimed the clock before the load read it (a load
		// reads claimed clocks too), rang it and recorded the outcome: a
		// recurring clock's next occurrence, or a failed attempt's retry
		{"rung, next occurrence", func(m *Manager, st *loadStore) {
			st.rows[0].At = at(5000)
			m.Offer(alarm.Due{ID: 1, At: at(5000)})
		}, at(5000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &loadStore{}
			st.insert(alarm.Due{ID: 1, At: at(2000)})
			q := ring.NewQueue()
			m := New(Config{Shards: 1, Window: 10 * time.Second, HeapCap: 1000, Batch: 100,
				Now: func() time.Time { return t0 }}, st, q)
			ld := &loader{m: m, shard: 0, boundary: t0, wake: make(chan struct{}, 1)}
			ld.reset()
			ld.backDone = true // no backlog: the query held is the live range's
			ld.setValid(time.Now().Add(time.Hour))
			m.loaders[0] = ld

			hold := make(chan struct{})
			st.hold, st.started = hold, make(chan struct{})
			started := st.started
			done := make(chan error)
			go func() { done <- ld.load(context.Background()) }()
			<-started // the query has read clock 1 at t0+2s
			st.mu.Lock()
			tc.change(m, st) // commits, then tells the queue
			st.mu.Unlock()
			close(hold)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			got, ok := q.Earliest()
			switch {
			case tc.want.IsZero() && ok:
				t.Errorf("clock 1 is in memory at t0+%v; it was cancelled while the load ran", got.Sub(t0))
			case !tc.want.IsZero() && !ok:
				t.Errorf("clock 1 is not in memory; want it at t0+%v", tc.want.Sub(t0))
			case !tc.want.IsZero() && !got.Equal(tc.want):
				t.Errorf("clock 1 is in memory at t0+%v, want t0+%v (the load read it before the change)",
					got.Sub(t0), tc.want.Sub(t0))
			}
			// the next load reads the row as it is now, and keeps it
			if err := ld.load(context.Background()); err != nil {
				t.Fatal(err)
			}
			ld.reset()
			if err := ld.load(context.Background()); err != nil {
				t.Fatal(err)
			}
			got, ok = q.Earliest()
			switch {
			case tc.want.IsZero() && ok:
				t.Errorf("after a full rescan: clock 1 is in memory at t0+%v; it was cancelled", got.Sub(t0))
			case !tc.want.IsZero() && (!ok || !got.Equal(tc.want)):
				t.Errorf("after a full rescan: clock 1 in memory %v at t0+%v, want t0+%v", ok, got.Sub(t0), tc.want.Sub(t0))
			}
		})
	}
}

// failingLoads fails every load and recovery, as MySQL in an outage.
type failingLoads struct{ Store }

func (failingLoads) LoadDue(context.Context, int, time.Time, int64, time.Time, int) ([]alarm.Due, error) {
	return nil, alarm.ErrUnavailable
}

func (failingLoads) RecoverFiring(context.Context, int, int64, time.Time, []int64, time.Time) (int64, error) {
	return 0, alarm.ErrUnavailable
}

// In an outage every shard's loads fail at once: a few lines say so, not
// one per shard (found by review: up to 4,096 at the start of an outage,
// and again every 30 failures).
func TestFailedLoadsLoggedSparingly(t *testing.T) {
	var logs testenv.SyncBuffer
	const shards = 256
	m := New(Config{Shards: shards, Window: 10 * time.Second, Interval: 10 * time.Millisecond, Batch: 100,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, failingLoads{}, ring.NewQueue())
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for sh := range shards {
		ld := &loader{m: m, shard: sh, boundary: time.Now(), wake: make(chan struct{}, 1)}
		ld.reset()
		wg.Go(func() { ld.run(ctx) })
	}
	time.Sleep(time.Second) // about 100 failed loads per shard
	cancel()
	wg.Wait()
	if n := strings.Count(logs.String(), "loading shard failed"); n < 1 || n > 2 {
		t.Errorf("%d shards failing for a second wrote %d lines; want 1 (then one per 10 s):\n%.500s", shards, n, logs.String())
	}
}
