package preload

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/ring"
)

// Each shard's full rescan falls due at a moment of its own in every
// interval: shard i of n at i/n of it. The next is always after t and at
// most one interval later.
func TestRescanMomentsAreSpreadOverTheInterval(t *testing.T) {
	const shards, every = 32, 30 * time.Second
	m := &Manager{cfg: Config{Shards: shards, Rescan: every}}
	for _, t0 := range []time.Time{time.Unix(1795502873, 589000000), time.Unix(0, 0), time.Unix(1795502880, 0)} {
		seen := map[time.Duration]bool{}
		for shard := range shards {
			l := &loader{m: m, shard: shard}
			next := l.rescanAfter(t0)
			if !next.After(t0) || next.Sub(t0) > every {
				t.Fatalf("shard %d: next rescan %v after %v, want within (0, %v]", shard, next.Sub(t0), t0, every)
			}
			phase := time.Duration(next.UnixNano() % int64(every))
			if want := every / shards * time.Duration(shard); phase != want {
				t.Fatalf("shard %d: rescans at %v into the interval, want %v", shard, phase, want)
			}
			seen[phase] = true
			if again := l.rescanAfter(next); again.Sub(next) != every {
				t.Fatalf("shard %d: the rescan after %v comes %v later, want %v", shard, next, again.Sub(next), every)
			}
		}
		if len(seen) != shards {
			t.Fatalf("%d distinct moments for %d shards", len(seen), shards)
		}
	}
	// no interval: a rescan at every pass, as before
	m.cfg.Rescan = 0
	if l, now := (&loader{m: m}), time.Now(); !l.rescanAfter(now).Equal(now) {
		t.Fatal("no interval: the rescan is not due at once")
	}
}

// recoverStore records when each shard's loader ran its full rescan (it
// recovers stale firing clocks first) and loads nothing.
type recoverStore struct {
	Store
	mu  sync.Mutex
	at  map[int][]time.Time
	rec chan struct{}
}

func (s *recoverStore) RecoverFiring(_ context.Context, shard int, _ int64, _ time.Time, _ []int64, _ time.Time) (int64, error) {
	s.mu.Lock()
	s.at[shard] = append(s.at[shard], time.Now())
	s.mu.Unlock()
	return 0, nil
}

func (s *recoverStore) LoadDue(context.Context, int, time.Time, int64, time.Time, int) ([]alarm.Due, error) {
	return nil, nil
}

// Loaders started together (an instance acquiring its shards) do not
// rescan together: each at its own moment, once per interval.
func TestLoadersStartedTogetherRescanApart(t *testing.T) {
	const shards, every = 4, time.Second
	st := &recoverStore{at: map[int][]time.Time{}}
	m := New(Config{Shards: shards, Window: time.Second, Interval: 5 * time.Millisecond, Rescan: every, HeapCap: 100}, st, ring.NewQueue())
	for s := range shards {
		m.startLoader(alarm.Lease{Shard: s, Epoch: 1}, time.Now().Add(time.Hour))
	}
	time.Sleep(2*every + every/2)
	for s := range shards {
		m.stopLoader(s)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	var first []time.Time
	for s := range shards {
		at := st.at[s]
		if len(at) < 2 {
			t.Fatalf("shard %d rescanned %d times in 2.5 intervals, want 2 or more", s, len(at))
		}
		for i := 1; i < len(at); i++ {
			if gap := at[i].Sub(at[i-1]); gap < every*3/4 {
				t.Fatalf("shard %d rescanned %v after its previous rescan, want about %v", s, gap, every)
			}
		}
		first = append(first, at[0])
	}
	lo, hi := first[0], first[0]
	for _, f := range first {
		if f.Before(lo) {
			lo = f
		}
		if f.After(hi) {
			hi = f
		}
	}
	if spread := hi.Sub(lo); spread < every/2 {
		t.Fatalf("the %d shards' first rescans came within %v of each other, want them spread over the interval (%v apart)",
			shards, spread, every/shards)
	}
}

// The moment of the next rescan keeps the monotonic reading of the time it
// was reckoned from: a step of the wall clock does not move it.
func TestRescanMomentKeepsTheMonotonicClock(t *testing.T) {
	m := &Manager{cfg: Config{Shards: 4, Rescan: 30 * time.Second}}
	l := &loader{m: m, shard: 1}
	now := time.Now()
	next := l.rescanAfter(now)
	if d := next.Sub(now); d <= 0 || d > 30*time.Second {
		t.Fatalf("next rescan in %v", d)
	}
	if next == next.Round(0) { // Round(0) strips the monotonic reading
		t.Fatalf("the next rescan (%s) lost the monotonic reading of now (%s)", next, now)
	}
}
