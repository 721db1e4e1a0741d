package main

import (
	"fmt"
	"math"
	"time"
)

// The targets of issue 15 are ratios to ceilings measured in the same run,
// because the absolute figures of one machine are not those of the next.
// This file holds the pure parts: checking a target, picking a ring rate
// from the broker ceiling, the sweep's bookkeeping and CPU cost.

// Target statuses.
const (
	statusPass = "PASS"
	statusFail = "FAIL"
	statusSkip = "SKIP" // the ceiling it is judged against was not measured in this run
)

// Target is one performance target checked against this run.
type Target struct {
	Figure   string  `json:"figure"`
	Target   string  `json:"target"`
	Measured string  `json:"measured"`
	Ceiling  string  `json:"ceiling,omitempty"`
	Ratio    float64 `json:"ratio_to_ceiling,omitempty"` // measured ÷ ceiling
	Status   string  `json:"status"`
	Met      bool    `json:"met"`
}

func statusOf(met bool) string {
	if met {
		return statusPass
	}
	return statusFail
}

// ratioTarget checks that measured is at least want × ceiling. A ceiling
// of 0 (not measured in this run) gives SKIP.
func ratioTarget(figure, target string, measured float64, ceilingName string, ceiling, want float64) Target {
	t := Target{Figure: figure, Target: target, Measured: fmtRate(measured)}
	if ceiling <= 0 || math.IsNaN(ceiling) {
		t.Status = statusSkip
		t.Ceiling = ceilingName + ": not measured in this run"
		return t
	}
	t.Ratio = measured / ceiling
	t.Ceiling = ceilingName + " " + fmtRate(ceiling)
	t.Measured += " = " + fmtRatio(t.Ratio, want)
	// a little slack for the float division: 0.85 × c ÷ c is not always 0.85
	t.Met = t.Ratio >= want-1e-9
	t.Status = statusOf(t.Met)
	return t
}

// limitTarget checks that a latency (ms) is at most limit; with no samples
// it is missed.
func limitTarget(figure string, valueMs, limitMs float64, samples int) Target {
	t := Target{Figure: figure, Target: "<= " + fmtMs(limitMs), Measured: fmtMs(valueMs)}
	if samples == 0 {
		t.Measured = "no samples"
	}
	t.Met = samples > 0 && valueMs <= limitMs
	t.Status = statusOf(t.Met)
	return t
}

// fmtRatio formats a ratio the way its target is written: "1.02×" against
// a target of 1× or more, "42%" below.
func fmtRatio(r, want float64) string {
	if want >= 1 {
		return fmt.Sprintf("%.2f×", r)
	}
	return fmt.Sprintf("%.0f%%", 100*r)
}

// ringN returns how many clocks spread over span make a ring rate of pct
// percent of ceiling (at least 1), or 0 when there is no ceiling.
func ringN(ceiling, pct float64, span time.Duration) int {
	if ceiling <= 0 || pct <= 0 || span <= 0 {
		return 0
	}
	return max(1, int(math.Round(ceiling*pct/100*span.Seconds())))
}

// SweepResult is a series of ring scenarios at increasing rates, each a
// percentage of the broker ceiling, and the knee: the first rate whose
// lateness p99 passes the limit.
type SweepResult struct {
	Ceiling   float64      `json:"broker_ceiling_per_s"`
	SpanS     float64      `json:"span_s"`
	KneeP99Ms float64      `json:"knee_p99_limit_ms"`
	Points    []SweepPoint `json:"points"`
	// Knee is the index in Points of the first point past the limit, -1
	// when every point stayed under it.
	Knee     int       `json:"knee_index"`
	KneePct  float64   `json:"knee_pct_of_ceiling,omitempty"`
	KneeRate float64   `json:"knee_rate,omitempty"`
	Skipped  []float64 `json:"skipped_pcts,omitempty"`
	Notes    []string  `json:"notes,omitempty"`
}

// SweepPoint is one ring scenario of the sweep.
type SweepPoint struct {
	Pct         float64 `json:"pct_of_ceiling"`
	TargetRate  float64 `json:"target_rate"`
	N           int     `json:"n"`
	Application string  `json:"application,omitempty"`
	FromRing    bool    `json:"from_ring_scenario,omitempty"`
	Created     int     `json:"created"`
	Received    int     `json:"received"`
	RingRate    float64 `json:"ring_rate"`
	Lateness    Summary `json:"lateness"`
	Early       int     `json:"early"`
	Lost        int     `json:"lost"`
	Duplicates  int     `json:"duplicates"`
	// clockd's CPU time during the ring phase, in all and per 1,000 rings
	// (0 when clockd's pid is not known).
	ClockdCPUS         float64 `json:"clockd_cpu_ring_phase_s,omitempty"`
	ClockdCPUMsPer1000 float64 `json:"clockd_cpu_ms_per_1000_rings,omitempty"`
	// the local MySQL and RabbitMQ processes' CPU seconds in the ring phase
	ServerCPUS map[string]float64 `json:"server_cpu_ring_phase_s,omitempty"`
	Error      string             `json:"error,omitempty"`
}

// newSweep plans the points: each percentage of ceiling over span.
func newSweep(pcts []float64, ceiling float64, span time.Duration, kneeMs float64) *SweepResult {
	s := &SweepResult{Ceiling: ceiling, SpanS: span.Seconds(), KneeP99Ms: kneeMs, Knee: -1}
	for _, p := range pcts {
		n := ringN(ceiling, p, span)
		s.Points = append(s.Points, SweepPoint{Pct: p, N: n, TargetRate: float64(n) / span.Seconds()})
	}
	return s
}

// fill completes a planned point from a ring result.
func (p *SweepPoint) fill(g *RingResult) {
	p.Application = g.Application
	p.Created, p.Received, p.RingRate = g.Created, g.Received, g.RingRate
	p.Lateness, p.Early, p.Lost, p.Duplicates = g.Lateness, g.Early, g.Lost, g.Duplicates
	p.ClockdCPUS = g.ClockdCPURingS
	p.ClockdCPUMsPer1000 = msPer1000(g.ClockdCPURingS, g.Received)
	p.ServerCPUS = g.ServerCPURingS
}

// pastKnee tells whether a measured point is past the knee: its lateness
// p99 passes the limit, or more than 1 % of its clocks were lost (a lost
// clock is infinitely late), or it failed to run.
func (p *SweepPoint) pastKnee(limitMs float64) bool {
	if p.Error != "" || p.Created == 0 {
		return true
	}
	if p.Lost*100 > p.Created {
		return true
	}
	return p.Received > 0 && p.Lateness.P99 > limitMs
}

// record notes that point i was measured; it returns false when the sweep
// should stop there (past the knee, unless all is set). Points after a
// stop are listed as skipped by finish.
func (s *SweepResult) record(i int, all bool) bool {
	if s.Knee < 0 && s.Points[i].pastKnee(s.KneeP99Ms) {
		s.Knee = i
		s.KneePct, s.KneeRate = s.Points[i].Pct, s.Points[i].TargetRate
	}
	return all || s.Knee < 0
}

// finish drops the points after the first measured-and-stopped one, listing
// their percentages as skipped.
func (s *SweepResult) finish(measured int) {
	for _, p := range s.Points[measured:] {
		s.Skipped = append(s.Skipped, p.Pct)
	}
	s.Points = s.Points[:measured]
}

// Cost is clockd's CPU time (utime+stime of its process) per 1,000 units
// of work in one scenario or phase, and that of the local MySQL and
// RabbitMQ processes (by name) when they were found.
type Cost struct {
	Scenario        string             `json:"scenario"`
	Per             string             `json:"per"` // "creates" or "rings"
	Count           int                `json:"count"`
	ClockdCPUS      float64            `json:"clockd_cpu_s"`
	MsPer1000       float64            `json:"clockd_cpu_ms_per_1000"`
	ServerCPUS      map[string]float64 `json:"server_cpu_s,omitempty"`
	ServerMsPer1000 map[string]float64 `json:"server_cpu_ms_per_1000,omitempty"`
}

// msPer1000 returns CPU milliseconds per 1,000 units, 0 for no units.
func msPer1000(cpuS float64, count int) float64 {
	if count <= 0 || cpuS < 0 {
		return 0
	}
	return cpuS * 1000 / (float64(count) / 1000)
}

func newCost(scenario, per string, count int, cpuS float64, servers map[string]float64) Cost {
	c := Cost{Scenario: scenario, Per: per, Count: count, ClockdCPUS: cpuS, MsPer1000: msPer1000(cpuS, count)}
	if len(servers) > 0 {
		c.ServerCPUS, c.ServerMsPer1000 = servers, map[string]float64{}
		for k, v := range servers {
			c.ServerMsPer1000[k] = msPer1000(v, count)
		}
	}
	return c
}
