package benchkit

import (
	"context"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one sample p50", []time.Duration{7}, 50, 7},
		{"one sample p99.9", []time.Duration{7}, 99.9, 7},
		{"p50 of 1..100", hundred, 50, 50 * time.Millisecond},
		{"p90 of 1..100", hundred, 90, 90 * time.Millisecond},
		{"p99 of 1..100", hundred, 99, 99 * time.Millisecond},
		{"p99.9 of 1..100 is the max", hundred, 99.9, 100 * time.Millisecond},
		{"p100", hundred, 100, 100 * time.Millisecond},
		{"tiny p is the min", hundred, 0.0001, time.Millisecond},
		{"p50 of two is the lower", []time.Duration{1, 2}, 50, 1},
		{"p51 of two is the upper", []time.Duration{1, 2}, 51, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.samples, tt.p); got != tt.want {
				t.Errorf("Percentile(p=%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	if s := Summarize(nil); s != (Summary{}) {
		t.Errorf("Summarize(nil) = %+v", s)
	}
	// 1..1000 ms, shuffled: Summarize must sort
	samples := make([]time.Duration, 1000)
	for i := range samples {
		samples[i] = time.Duration(i+1) * time.Millisecond
	}
	rand.Shuffle(len(samples), func(i, j int) { samples[i], samples[j] = samples[j], samples[i] })
	s := Summarize(samples)
	want := Summary{Count: 1000, Min: 1, Mean: 500.5, P50: 500, P90: 900, P99: 990, P999: 999, Max: 1000}
	if s != want {
		t.Errorf("Summarize = %+v, want %+v", s, want)
	}
	if !slices.IsSorted(samples) {
		t.Error("samples not sorted in place")
	}
}

func TestParseStatTicks(t *testing.T) {
	tail := " 0 0 0 0 0 0 0 0 0"
	tests := []struct {
		name, stat string
		want       float64
		err        bool
	}{
		{"plain", "1234 (clockd) S 1 1234 1234 0 -1 4194560 5000 0 0 0 250 75 0 0 20 0 12 0" + tail, 325, false},
		{"name with spaces and parens", "99 (my (odd) name) R 1 99 99 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0" + tail, 10, false},
		{"large", "1 (x) S 0 0 0 0 0 0 0 0 0 0 123456789 987654321 0 0" + tail, 1111111110, false},
		{"no name", "garbage", 0, true},
		{"too short", "1 (x) S 0 0 0", 0, true},
		{"not a number", "1 (x) S 0 0 0 0 0 0 0 0 0 0 u s 0 0" + tail, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStatTicks(tt.stat)
			if (err != nil) != tt.err || got != tt.want {
				t.Errorf("ParseStatTicks = %v, %v; want %v, error %v", got, err, tt.want, tt.err)
			}
		})
	}
	// this process: a real stat file parses and counts up as it works
	before := ProcTicks("self")
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
	}
	if after := ProcTicks("self"); before <= 0 && after <= 0 || after < before {
		t.Errorf("this process's ticks %v then %v", before, after)
	}
	if got := ProcTicks("no-such-process"); got != 0 {
		t.Errorf("ticks of no process = %v, want 0", got)
	}
}

// Between tells the machine's share busy and this process's.
func TestBetween(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	a := Mark{When: t0, Total: 1000, Idle: 600, Self: 10}
	b := Mark{When: t0.Add(time.Second), Total: 1200, Idle: 650, Self: 60} // 2 cores, 75 % busy
	m := Between(a, b)
	if m.BusyPct != 75 || m.Cores != 2 || math.Abs(m.BusyS-1.5) > 1e-9 || m.WallS != 1 || math.Abs(m.SelfPct-50) > 1e-9 {
		t.Errorf("Between = %+v, want 75 %% of 2 cores, 1.5 CPU s, this process 50 %%", m)
	}
	if m := Between(a, a); m.BusyPct != 0 || m.Cores != 0 || m.SelfPct != 0 {
		t.Errorf("no time between: %+v", m)
	}
	// a real reading: the machine has cores and they tick
	r0 := ReadMark()
	time.Sleep(50 * time.Millisecond)
	if m := Between(r0, ReadMark()); m.Cores < 1 || m.BusyPct < 0 || m.BusyPct > 100 {
		t.Errorf("a real reading: %+v", m)
	}
}

// A series's window is the first reading at or after its start and the
// last one at or before its end.
func TestSeriesWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	s := &Series[Mark]{}
	for i := range 10 {
		s.Add(Mark{When: t0.Add(time.Duration(i) * 100 * time.Millisecond), Total: float64(i) * 20, Idle: float64(i) * 10})
	}
	a, b, ok := s.Window(t0.Add(150*time.Millisecond), t0.Add(720*time.Millisecond))
	if !ok || !a.When.Equal(t0.Add(200*time.Millisecond)) || !b.When.Equal(t0.Add(700*time.Millisecond)) {
		t.Fatalf("window = %v .. %v (%v), want the readings at 200 and 700 ms", a.When, b.When, ok)
	}
	if m := Between(a, b); m.BusyPct != 50 || m.Cores != 2 {
		t.Errorf("use %+v, want 50 %% of 2 cores", m)
	}
	for _, w := range [][2]time.Duration{{150 * time.Millisecond, 180 * time.Millisecond}, {-time.Second, -time.Millisecond}, {850 * time.Millisecond, 2 * time.Second}} {
		if _, _, ok := s.Window(t0.Add(w[0]), t0.Add(w[1])); ok {
			t.Errorf("window %v: ok with fewer than two readings in it", w)
		}
	}
	s.Stop() // built by Add: nothing to stop

	// a started series reads at once and then every interval, until stopped
	var n int
	var mu sync.Mutex
	live := StartSeries(10*time.Millisecond, func() Mark { mu.Lock(); n++; mu.Unlock(); return ReadMark() })
	time.Sleep(55 * time.Millisecond)
	live.Stop()
	live.Stop()
	mu.Lock()
	got := n
	mu.Unlock()
	if got < 2 {
		t.Errorf("%d readings in 55 ms at 10 ms", got)
	}
	time.Sleep(30 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if n != got {
		t.Errorf("readings went on after Stop: %d, then %d", got, n)
	}
}

// Before a run the harnesses wait for a quiet machine; they give up after
// maxWait on a busy one.
func TestWaitQuiet(t *testing.T) {
	ctx := context.Background()
	if q := WaitQuiet(ctx, 100.5, 5*time.Second); !q.Quiet || q.WaitedS < 0.45 || q.WaitedS > 1.5 {
		t.Errorf("any machine is under 100.5%% busy: %+v", q)
	}
	// every core busy
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
			}
		})
	}
	q := WaitQuiet(ctx, 5, 1200*time.Millisecond)
	close(stop)
	wg.Wait()
	if q.Quiet || q.BusyPct < 50 || q.WaitedS < 0.9 || q.WaitedS > 2.5 {
		t.Errorf("with every core spinning: %+v, want not quiet after two looks", q)
	}
	if la := LoadAvg(); la == "" {
		t.Error("no load average")
	}
}
