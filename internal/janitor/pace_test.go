package janitor

import (
	"context"
	"fmt"
	"math"
	"sync"
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
		p.moved(p.batch(), 10*time.Millisecond)
	}
	if got := p.batch(); got != 1000 {
		t.Fatalf("after quick moves the batch is %d, want the largest, 1000", got)
	}
	p.moved(1000, 150*time.Millisecond)
	if got := p.batch(); got != 500 {
		t.Fatalf("after a slow move the batch is %d, want 500", got)
	}
	p.moved(500, 70*time.Millisecond) // between half the target and the target: kept
	if got := p.batch(); got != 500 {
		t.Fatalf("after a move within the target the batch is %d, want 500", got)
	}
	p.moved(120, 10*time.Millisecond) // a short last batch says nothing of speed
	if got := p.batch(); got != 500 {
		t.Fatalf("after a short batch the batch is %d, want 500", got)
	}
	for range 20 {
		p.moved(p.batch(), time.Second)
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
	if rest := p.moved(250, 20*time.Millisecond); rest != 0 {
		t.Fatalf("rest %v with no rings due, want none", rest)
	}
	busy = true
	if rest := p.moved(250, 20*time.Millisecond); rest != 180*time.Millisecond {
		t.Fatalf("rest %v after a 20ms batch while busy, want 180ms (a 10%% share)", rest)
	}
	if rest := p.moved(250, time.Millisecond); rest != 10*time.Millisecond {
		t.Fatalf("rest %v after a 1ms batch while busy, want the pause, 10ms", rest)
	}
	now = now.Add(10 * 30 * time.Second) // ten intervals into the run: twice the share
	if rest := p.moved(250, 20*time.Millisecond); rest != 80*time.Millisecond {
		t.Fatalf("rest %v ten intervals into a run, want 80ms (a 20%% share)", rest)
	}
	now = now.Add(100 * 30 * time.Second)
	if rest := p.moved(250, 20*time.Millisecond); rest != 0 {
		t.Fatalf("rest %v after a very long run, want none", rest)
	}
}

// memStore is a janitor Store of n finished (rung) clocks in memory whose
// moves take moveTime each, recording when each began.
type memStore struct {
	moveTime time.Duration

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

func (m *memStore) FinishedBefore(_ context.Context, st alarm.Status, _, afterAt time.Time, afterID int64, limit int) ([]int64, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int64
	for _, id := range m.ids {
		if st == alarm.StatusRung && id > afterID && len(out) < limit {
			out = append(out, id)
		}
	}
	return out, afterAt, nil
}

func (m *memStore) MoveFinished(_ context.Context, _ alarm.Status, ids []int64, _, _ time.Time, _ bool) (int64, int64, error) {
	m.mu.Lock()
	m.starts = append(m.starts, time.Now())
	m.mu.Unlock()
	time.Sleep(m.moveTime)
	return int64(len(ids)), 0, nil
}

// A run moves batch after batch without rest while no ring is due, and
// rests 9× each batch's time (a 10 % share) while rings are due.
func TestRunYieldsWhileRingsAreDue(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busy=%v", busy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := &memStore{moveTime: 10 * time.Millisecond}
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
				want := 10 * 10 * time.Millisecond // ten moves, no rest
				if busy {
					want = 10*10*time.Millisecond + 9*90*time.Millisecond // a rest of 9x between two
				}
				if took < want-5*time.Millisecond || took > want+50*time.Millisecond {
					t.Errorf("the run took %v, want %v", took, want)
				}
				wantYield := 0.0
				if busy {
					wantYield = 9 * 0.090
				}
				if got := testenv.Metric(t, reg, "clockd_janitor_yield_seconds_total"); math.Abs(got-wantYield) > 0.005 {
					t.Errorf("clockd_janitor_yield_seconds_total %.3f, want %.3f", got, wantYield)
				}
			})
		})
	}
}
