package janitor

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/testenv"
)

func testPace(batch int, busy *bool, now *time.Time) *pace {
	cfg := Config{Batch: batch, BusyShare: 0.1, Pause: 10 * time.Millisecond, Interval: 30 * time.Second,
		Busy: func() bool { return *busy }}
	cfg.defaults()
	p := newPace(cfg)
	p.now = func() time.Time { return *now }
	p.start = *now
	return p
}

// Batches grow while moves are quick, halve when one is slow, and stay
// within [minBatch, Batch].
func TestPaceSizesBatchesByMoveTime(t *testing.T) {
	busy, now := false, time.Unix(1e9, 0)
	p := testPace(1000, &busy, &now)
	if got := p.batch(); got != 250 {
		t.Fatalf("first batch %d, want 250", got)
	}
	for range 20 {
		p.moved(p.batch(), 10*time.Millisecond, false)
	}
	if got := p.batch(); got != 1000 {
		t.Fatalf("after quick moves the batch is %d, want the largest, 1000", got)
	}
	p.moved(1000, 150*time.Millisecond, false)
	if got := p.batch(); got != 500 {
		t.Fatalf("after a slow move the batch is %d, want 500", got)
	}
	p.moved(500, 70*time.Millisecond, false) // between half the target and the target: kept
	if got := p.batch(); got != 500 {
		t.Fatalf("after a move within the target the batch is %d, want 500", got)
	}
	p.moved(120, 10*time.Millisecond, false) // a short last batch says nothing of speed
	if got := p.batch(); got != 500 {
		t.Fatalf("after a short batch the batch is %d, want 500", got)
	}
	for range 20 {
		p.moved(p.batch(), time.Second, false)
	}
	if got := p.batch(); got != minBatch {
		t.Fatalf("after slow moves the batch is %d, want %d", got, minBatch)
	}
	if got := testPace(10, &busy, &now).batch(); got != 10 {
		t.Fatalf("with batch 10 the first batch is %d", got)
	}
}

// Movers rest only while the ring path is busy: then they work
// BusyShare of the time (at least Pause between batches), a share that
// grows with the run's length.
func TestPaceRestsWhileRingsAreDue(t *testing.T) {
	busy, now := false, time.Unix(1e9, 0)
	p := testPace(1000, &busy, &now)
	if rest := p.moved(250, 20*time.Millisecond, false); rest != 0 {
		t.Fatalf("rest %v with no rings due, want none", rest)
	}
	busy = true
	if rest := p.moved(250, 20*time.Millisecond, false); rest != 180*time.Millisecond {
		t.Fatalf("rest %v after a 20ms batch while busy, want 180ms (a 10%% share)", rest)
	}
	if rest := p.moved(250, time.Millisecond, false); rest != 10*time.Millisecond {
		t.Fatalf("rest %v after a 1ms batch while busy, want the pause, 10ms", rest)
	}
	if rest := p.moved(250, 20*time.Millisecond, true); rest != 1980*time.Millisecond {
		t.Fatalf("rest %v after a 20ms backlog batch while busy, want 1.98s (a 1%% share)", rest)
	}
	now = now.Add(10 * 30 * time.Second) // ten intervals into the run: twice the share
	if rest := p.moved(250, 20*time.Millisecond, false); rest != 80*time.Millisecond {
		t.Fatalf("rest %v ten intervals into a run, want 80ms (a 20%% share)", rest)
	}
	if rest := p.moved(250, 20*time.Millisecond, true); rest != 980*time.Millisecond {
		t.Fatalf("rest %v after a backlog batch ten intervals into a run, want 980ms (a 2%% share)", rest)
	}
	now = now.Add(100 * 30 * time.Second)
	if rest := p.moved(250, 20*time.Millisecond, false); rest != 0 {
		t.Fatalf("rest %v after a very long run, want none", rest)
	}
	busy = false
	if rest := p.moved(250, 20*time.Millisecond, true); rest != 0 {
		t.Fatalf("rest %v after a backlog batch with no rings due, want none", rest)
	}
}

// memStore is a janitor Store of n finished (rung) clocks in memory whose
// moves take moveTime each, recording when each began. Its clocks
// finished lag before the retention boundary.
type memStore struct {
	moveTime time.Duration
	lag      time.Duration

	mu     sync.Mutex
	ids    []int64
	starts []time.Time
}

func (m *memStore) HoldLease(context.Context, string, string, time.Duration) (bool, error) {
	return true, nil
}
func (m *memStore) ReleaseLease(context.Context, string, string) error          { return nil }
func (m *memStore) HistoryDays(context.Context) ([]time.Time, error)            { return nil, nil }
func (m *memStore) AddHistoryDays(context.Context, []time.Time) error           { return nil }
func (m *memStore) DropHistoryDays(context.Context, []time.Time) error          { return nil }
func (m *memStore) CountClocks(context.Context) (map[alarm.Status]int64, error) { return nil, nil }

func (m *memStore) FinishedBefore(_ context.Context, st alarm.Status, before, afterAt time.Time, afterID int64, limit int) ([]int64, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int64
	for _, id := range m.ids {
		if st == alarm.StatusRung && id > afterID && len(out) < limit {
			out = append(out, id)
		}
	}
	if len(out) == 0 {
		return nil, afterAt, nil
	}
	return out, before.Add(-m.lag), nil
}

func (m *memStore) MoveFinished(_ context.Context, _ alarm.Status, ids []int64, _, _ time.Time, _ bool) (int64, int64, error) {
	m.mu.Lock()
	m.starts = append(m.starts, time.Now())
	m.mu.Unlock()
	time.Sleep(m.moveTime)
	return int64(len(ids)), 0, nil
}

// A run moves batch after batch without rest while no ring is due, and
// rests 9× each batch's time (a 10 % share) while rings are due; 99× (a
// 1 % share) when its clocks are a backlog, finished long before the
// retention boundary.
func TestRunYieldsWhileRingsAreDue(t *testing.T) {
	for _, tc := range []struct {
		busy      bool
		lag       time.Duration
		restTimes int // the rest after a batch, in batch times
	}{
		{false, 0, 0},
		{true, 0, 9},
		{true, backlogLag - time.Minute, 9},
		{true, backlogLag + time.Minute, 99},
		{false, backlogLag + time.Minute, 0},
	} {
		busy := tc.busy
		t.Run(fmt.Sprintf("busy=%v,lag=%v", busy, tc.lag), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := &memStore{moveTime: 10 * time.Millisecond, lag: tc.lag}
				for id := range int64(1000) {
					m.ids = append(m.ids, id+1)
				}
				reg := prometheus.NewRegistry()
				j := New(Config{InstanceID: "a", Batch: 100, Movers: 1, Busy: func() bool { return busy }, Registerer: reg}, m)
				start := time.Now()
				if err := j.RunOnce(context.Background()); err != nil {
					t.Fatal(err)
				}
				took := time.Since(start)
				if len(m.starts) != 10 {
					t.Fatalf("%d moves of 100, want 10", len(m.starts))
				}
				// ten moves, and a rest between two; the share grows with
				// the run's length (by 3 % in its first 9 s), so the rests
				// may be up to 3 % shorter
				rest := time.Duration(tc.restTimes) * 10 * time.Millisecond
				want := 10*10*time.Millisecond + 9*rest
				if took < want-want*3/100-5*time.Millisecond || took > want+50*time.Millisecond {
					t.Errorf("the run took %v, want %v", took, want)
				}
				wantYield := 9 * rest.Seconds()
				if got := testenv.Metric(t, reg, "clockd_janitor_yield_seconds_total"); math.Abs(got-wantYield) > 0.005+wantYield*0.03 {
					t.Errorf("clockd_janitor_yield_seconds_total %.3f, want %.3f", got, wantYield)
				}
			})
		})
	}
}

// A mover's rest ends soon after the ring path runs out of work: a
// backlog's long rests (99 moves' time) do not hold the drain back once
// the rings stop.
func TestRestEndsWhenRingsStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &memStore{moveTime: 10 * time.Millisecond, lag: backlogLag + time.Minute}
		for id := range int64(1000) {
			m.ids = append(m.ids, id+1)
		}
		var busy atomic.Bool
		busy.Store(true)
		go func() {
			time.Sleep(2500 * time.Millisecond)
			busy.Store(false)
		}()
		reg := prometheus.NewRegistry()
		j := New(Config{InstanceID: "a", Batch: 100, Movers: 1, Busy: busy.Load, Registerer: reg}, m)
		start := time.Now()
		if err := j.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		// moves at 0, 1 and 2 s (each 10 ms, then a rest of 990 ms); the
		// third rest, from 2.01 s, ends at its fifth check, 2.51 s; the
		// seven moves left follow without rest (a rest not cut short
		// would end the run at 3.08 s)
		took := time.Since(start)
		if want := 2580 * time.Millisecond; took < want-30*time.Millisecond || took > want+30*time.Millisecond {
			t.Errorf("the run took %v, want about %v (the rest cut short when the rings stopped)", took, want)
		}
		if got := testenv.Metric(t, reg, "clockd_janitor_yield_seconds_total"); math.Abs(got-(0.99+0.99+0.50)) > 0.03 {
			t.Errorf("clockd_janitor_yield_seconds_total %.3f, want about 2.48 (two rests of 0.99 s and one of 0.5 s)", got)
		}
	})
}
