package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func TestRatioTarget(t *testing.T) {
	tests := []struct {
		name             string
		measured, ceil   float64
		want             float64
		status           string
		ratio            float64
		measuredContains string
	}{
		{"above", 12000, 10000, 0.85, statusPass, 1.2, "12,000/s = 120%"},
		{"exactly at the ratio", 8500, 10000, 0.85, statusPass, 0.85, "85%"},
		{"float edge 0.8", 48000, 60000, 0.8, statusPass, 0.8, "80%"},
		{"below", 5169, 12268, 0.85, statusFail, 5169.0 / 12268, "42%"},
		{"multiple above", 14000, 6000, 2, statusPass, 14000.0 / 6000, "2.33×"},
		{"multiple below", 6283, 6178, 2, statusFail, 6283.0 / 6178, "1.02×"},
		{"no ceiling", 6283, 0, 2, statusSkip, 0, "6,283/s"},
		{"NaN ceiling", 6283, math.NaN(), 2, statusSkip, 0, "6,283/s"},
		{"nothing measured", 0, 10000, 0.85, statusFail, 0, "0%"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ratioTarget("fig", "target", tt.measured, "ceiling x", tt.ceil, tt.want)
			if got.Status != tt.status || got.Met != (tt.status == statusPass) || math.Abs(got.Ratio-tt.ratio) > 1e-12 {
				t.Errorf("got %+v, want status %s ratio %v", got, tt.status, tt.ratio)
			}
			if !strings.Contains(got.Measured, tt.measuredContains) {
				t.Errorf("measured %q lacks %q", got.Measured, tt.measuredContains)
			}
			if tt.status == statusSkip && !strings.Contains(got.Ceiling, "not measured") {
				t.Errorf("ceiling %q", got.Ceiling)
			}
		})
	}
}

func TestLimitTarget(t *testing.T) {
	tests := []struct {
		value, limit float64
		samples      int
		status       string
	}{
		{2.9, 3, 10, statusPass},
		{3, 3, 10, statusPass},
		{3.01, 3, 10, statusFail},
		{0, 3, 0, statusFail}, // nothing received is not punctual
	}
	for _, tt := range tests {
		if got := limitTarget("p50", tt.value, tt.limit, tt.samples); got.Status != tt.status {
			t.Errorf("limitTarget(%v, %v, %d) = %s, want %s", tt.value, tt.limit, tt.samples, got.Status, tt.status)
		}
	}
}

func TestRingN(t *testing.T) {
	tests := []struct {
		ceiling, pct float64
		span         time.Duration
		want         int
	}{
		{12268, 50, 10 * time.Second, 61340},
		{12268, 10, 10 * time.Second, 12268},
		{10000, 85, 10 * time.Second, 85000},
		{10000, 50, 300 * time.Millisecond, 1500},
		{0.01, 1, time.Second, 1}, // at least one clock
		{0, 50, 10 * time.Second, 0},
		{10000, 0, 10 * time.Second, 0},
		{10000, 50, 0, 0},
	}
	for _, tt := range tests {
		if got := ringN(tt.ceiling, tt.pct, tt.span); got != tt.want {
			t.Errorf("ringN(%v, %v, %v) = %d, want %d", tt.ceiling, tt.pct, tt.span, got, tt.want)
		}
	}
}

func TestSweepBookkeeping(t *testing.T) {
	lat := func(p99 float64) Summary { return Summary{Count: 100, P50: 1, P99: p99, P999: p99 * 2} }
	tests := []struct {
		name     string
		all      bool
		results  []SweepPoint // the measured figures of the planned points, in order
		measured int
		knee     int
		skipped  []float64
	}{
		{"never past the knee", false, []SweepPoint{
			{Created: 10, Received: 10, Lateness: lat(2)}, {Created: 10, Received: 10, Lateness: lat(8)}, {Created: 10, Received: 10, Lateness: lat(40)},
			{Created: 10, Received: 10, Lateness: lat(90)}, {Created: 10, Received: 10, Lateness: lat(100)},
		}, 5, -1, nil},
		{"stops at the knee", false, []SweepPoint{
			{Created: 10, Received: 10, Lateness: lat(2)}, {Created: 10, Received: 10, Lateness: lat(8)}, {Created: 10, Received: 10, Lateness: lat(101)},
		}, 3, 2, []float64{70, 85}},
		{"goes on with all", true, []SweepPoint{
			{Created: 10, Received: 10, Lateness: lat(200)}, {Created: 10, Received: 10, Lateness: lat(8)}, {Created: 10, Received: 10, Lateness: lat(300)},
			{Created: 10, Received: 10, Lateness: lat(400)}, {Created: 10, Received: 10, Lateness: lat(500)},
		}, 5, 0, nil},
		{"lost clocks are infinitely late", false, []SweepPoint{
			{Created: 1000, Received: 980, Lost: 20, Lateness: lat(2)},
		}, 1, 0, []float64{25, 50, 70, 85}},
		{"1% lost is not yet the knee", false, []SweepPoint{
			{Created: 1000, Received: 990, Lost: 10, Lateness: lat(2)}, {Created: 10, Received: 10, Lateness: lat(150)},
		}, 2, 1, []float64{50, 70, 85}},
		{"a failed point is the knee", false, []SweepPoint{
			{Created: 10, Received: 10, Lateness: lat(2)}, {Error: "create failed"},
		}, 2, 1, []float64{50, 70, 85}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSweep([]float64{10, 25, 50, 70, 85}, 10000, 10*time.Second, 100)
			if len(s.Points) != 5 || s.Points[2].N != 50000 || s.Points[2].TargetRate != 5000 || s.Knee != -1 {
				t.Fatalf("plan %+v", s)
			}
			measured := 0
			for i, r := range tt.results {
				r.Pct, r.N, r.TargetRate = s.Points[i].Pct, s.Points[i].N, s.Points[i].TargetRate
				s.Points[i] = r
				measured = i + 1
				if !s.record(i, tt.all) {
					break
				}
			}
			s.finish(measured)
			if len(s.Points) != tt.measured || s.Knee != tt.knee || fmt.Sprint(s.Skipped) != fmt.Sprint(tt.skipped) {
				t.Errorf("points %d knee %d skipped %v, want %d %d %v", len(s.Points), s.Knee, s.Skipped, tt.measured, tt.knee, tt.skipped)
			}
			if tt.knee >= 0 && (s.KneePct != s.Points[tt.knee].Pct || s.KneeRate != s.Points[tt.knee].TargetRate) {
				t.Errorf("knee at %v%% %v/s, point %+v", s.KneePct, s.KneeRate, s.Points[tt.knee])
			}
		})
	}
}

func TestSweepPointFill(t *testing.T) {
	p := SweepPoint{Pct: 50}
	p.fill(&RingResult{Application: "a", Created: 2000, Received: 2000, RingRate: 1000, Lateness: Summary{P99: 3}, Lost: 0, ClockdCPURingS: 0.4})
	if p.Application != "a" || p.Received != 2000 || p.Lateness.P99 != 3 || p.ClockdCPUS != 0.4 || p.ClockdCPUMsPer1000 != 200 {
		t.Errorf("%+v", p)
	}
}

func TestMsPer1000(t *testing.T) {
	tests := []struct {
		cpuS  float64
		count int
		want  float64
	}{
		{1, 1000, 1000},
		{0.5, 100000, 5},
		{2.5, 50000, 50},
		{1, 0, 0},
		{-1, 10, 0},
	}
	for _, tt := range tests {
		if got := msPer1000(tt.cpuS, tt.count); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("msPer1000(%v, %d) = %v, want %v", tt.cpuS, tt.count, got, tt.want)
		}
	}
}

// clockd's CPU between two readings; a process gone away used nothing more.
func TestClockdSeconds(t *testing.T) {
	if got := clockdSeconds(cpuMark{pid: 100}, cpuMark{pid: 350}); got != 2.5 {
		t.Errorf("clockdSeconds = %v, want 2.5", got)
	}
	if got := clockdSeconds(cpuMark{pid: 100}, cpuMark{pid: 0}); got != 0 { // the process went away
		t.Errorf("clockdSeconds = %v, want 0", got)
	}
}

func TestParseScenarios(t *testing.T) {
	tests := []struct {
		in   string
		want string
		err  bool
	}{
		{"all", "mysql,broker,create,batch,ring,hot,sweep", false},
		{"ceilings", "mysql,broker", false},
		{"broker,ceilings", "mysql,broker", false},
		{"hot, ring ,broker", "broker,ring,hot", false},
		{"sweep,mysql", "mysql,sweep", false},
		{"create,create", "create", false},
		{"", "", false},
		{"ring,bogus", "ring", true},
	}
	for _, tt := range tests {
		got, err := parseScenarios(tt.in)
		if strings.Join(got, ",") != tt.want || (err != nil) != tt.err {
			t.Errorf("parseScenarios(%q) = %v, %v; want %s, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func TestParseLists(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string
		err  bool
	}{
		{"1,4", "[1 4]", false}, {"4, 1,4", "[4 1]", false}, {"2", "[2]", false},
		{"", "[]", true}, {"0", "[]", true}, {"1,x", "[]", true},
	} {
		got, err := parseIntList(tt.in)
		if fmt.Sprint(got) != tt.want || (err != nil) != tt.err {
			t.Errorf("parseIntList(%q) = %v, %v", tt.in, got, err)
		}
	}
	for _, tt := range []struct {
		in   string
		want string
		err  bool
	}{
		{"10,25,50,70,85", "[10 25 50 70 85]", false}, {"85%, 10%,50", "[10 50 85]", false}, {"12.5,12.5", "[12.5]", false},
		{"", "[]", false}, {"0", "[]", true}, {"-5", "[]", true}, {"abc", "[]", true}, {"NaN", "[]", true}, {"2000", "[]", true},
	} {
		got, err := parsePctList(tt.in)
		if fmt.Sprint(got) != tt.want || (err != nil) != tt.err {
			t.Errorf("parsePctList(%q) = %v, %v", tt.in, got, err)
		}
	}
}

func TestIDBatches(t *testing.T) {
	ids := make([]int64, 1050)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	b := idBatches(ids, 100, 4)
	// 10 whole batches (the last 50 ids left out), dealt round-robin
	if len(b) != 4 || len(b[0]) != 3 || len(b[1]) != 3 || len(b[2]) != 2 || len(b[3]) != 2 {
		t.Fatalf("batches per client %d %d %d %d", len(b[0]), len(b[1]), len(b[2]), len(b[3]))
	}
	seen := map[int64]bool{}
	for _, client := range b {
		for _, batch := range client {
			if len(batch) != 100 {
				t.Errorf("batch of %d", len(batch))
			}
			for _, id := range batch {
				if seen[id] {
					t.Errorf("id %d in two batches", id)
				}
				seen[id] = true
			}
		}
	}
	if b := idBatches(ids[:150], 100, 4); len(b[0]) != 1 || len(b[1]) != 0 {
		t.Errorf("few ids: %v", b)
	}
	for _, tt := range []struct {
		seq, batches int
		from, to     string
	}{
		{0, 3, "pending", "firing"}, {2, 3, "pending", "firing"}, {3, 3, "firing", "pending"},
		{5, 3, "firing", "pending"}, {6, 3, "pending", "firing"}, {1, 1, "firing", "pending"},
	} {
		if from, to := updateDirection(tt.seq, tt.batches); from != tt.from || to != tt.to {
			t.Errorf("updateDirection(%d, %d) = %s -> %s", tt.seq, tt.batches, from, to)
		}
	}
}

func TestBestRun(t *testing.T) {
	for _, tt := range []struct {
		rates []float64
		want  int
	}{
		{nil, -1}, {[]float64{5}, 0}, {[]float64{12268, 15000}, 1}, {[]float64{20000, 15000}, 0}, {[]float64{7, 7}, 0},
	} {
		var runs []BrokerRun
		for _, r := range tt.rates {
			runs = append(runs, BrokerRun{Rate: r})
		}
		if got := bestRun(runs); got != tt.want {
			t.Errorf("bestRun(%v) = %d, want %d", tt.rates, got, tt.want)
		}
	}
}
