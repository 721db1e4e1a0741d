package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/benchkit"
)

func sampleReport() *Report {
	start := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	tl := newTimeline(start, 100*time.Millisecond)
	for i := range 50 {
		tl.Add("create", start.Add(time.Duration(i)*20*time.Millisecond), 100)
		tl.Add("due", start.Add(time.Second+time.Duration(i)*20*time.Millisecond), 100)
		tl.Add("ring", start.Add(time.Second+time.Duration(i)*20*time.Millisecond+2*time.Millisecond), 100)
	}
	lat := []time.Duration{-time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 40 * time.Millisecond}
	ring := &RingResult{
		Application: "bench-x-ring", N: 5000, Created: 5000, Received: 4999, Lost: 1, Early: 1,
		RingRate: 5000, TargetRate: 5000, Lateness: benchkit.Summarize(append([]time.Duration(nil), lat...)),
		LatenessHist: histogram(lat), Timeline: tl.Export(), Notes: []string{"a <note> & more"},
		Anomalies:    map[string]int{"x-clock-ring-at": 2},
		WorstWindows: []LateWindow{{StartS: 4.5, Count: 2500, P50: 80, P99: 210, Max: 211}},
	}
	return &Report{
		Tool: "clockbench", RunID: "abcd", StartedAt: start, FinishedAt: start.Add(time.Minute), Addr: "http://127.0.0.1:8080",
		Machine: Machine{NProc: 2, MemTotalMiB: 24000, GoVersion: "go1.26"}, Flags: map[string]string{"n": "5000"},
		Scenarios: []string{"mysql", "broker", "create", "batch", "ring", "hot"},
		Broker: &BrokerResult{BrokerRun: BrokerRun{Publishers: 4, Rate: 20000, Acked: 200000, Timeline: tl.Export(), CPUPerMsgUS: 80},
			Runs: []BrokerRun{{Publishers: 1, Rate: 12000},
				{Publishers: 4, Rate: 20000, CPU: &CPUUse{Machine: 88}, CPUPerMsgUS: 80}},
			Paced: &BrokerRun{Publishers: 1, PacedPct: 25, TargetRate: 5000, Rate: 4990, HopLatency: Summary{Count: 5, P50: 1.25, P99: 7.5, P999: 14},
				CPU: &CPUUse{Machine: 40}, CPUPerMsgUS: 160}},
		MySQL: &MySQLCeilingResult{Version: "10.11", Database: "clockbench_ceiling_abcd", Dropped: true,
			InsertOne:   &CeilingRun{What: "one-row autocommit INSERT", Clients: 64, RowsPerStmt: 1, Rate: 7000},
			InsertBatch: &CeilingRun{What: "500-row INSERT", Clients: 4, RowsPerStmt: 500, Rate: 60000},
			Update:      &CeilingRun{What: "500-id UPDATE", Clients: 4, RowsPerStmt: 500, Rate: 50000}},
		Batch: &CreateResult{Clients: 4, BatchSize: 500, Clocks: 300000, Rate: 30000},
		Hot: &RingResult{Application: "bench-x-hot", N: 100000, Created: 100000, Received: 100000, RingRate: 17500, LastReceiptS: 5.5,
			DrainCPU:     &CPUUse{Machine: 96.5, Cores: 2, Clockd: 30, Clockbench: 15, Servers: map[string]float64{"mysql": 70, "rabbitmq": 75}},
			CPUPerRingUS: 125},
		Create: &CreateResult{Clients: 64, Clocks: 150000, Rate: 15000, Latency: benchkit.Summarize([]time.Duration{time.Millisecond, 30 * time.Millisecond}),
			LatencyHist: histogram([]time.Duration{time.Millisecond, 30 * time.Millisecond}), Timeline: tl.Export()},
		Ring: ring,
		RSS:  &RSSResult{PID: 1, MaxMiB: 120, ByScenario: map[string]float64{"ring": 120}},
	}
}

func TestReportEvaluate(t *testing.T) {
	r := sampleReport()
	r.evaluate()
	if len(r.Failures) != 2 {
		t.Errorf("failures = %q, want early and lost", r.Failures)
	}
	if r.Ring.RingRatePctBroker != 25 {
		t.Errorf("ring %% of broker = %v, want 25", r.Ring.RingRatePctBroker)
	}
	got := map[string]Target{}
	for _, tg := range r.Targets {
		got[tg.Figure] = tg
	}
	for _, tt := range []struct {
		figure string
		status string
		ratio  float64
	}{
		// 15,000/s against a 7,000 rows/s one-row INSERT ceiling: 2.14×
		{"single-clock REST creates, 64 clients", statusPass, 15000.0 / 7000},
		{"single-clock create latency p99", statusFail, 0},
		// 30,000/s against 60,000 rows/s: 50 %
		{"batch creates (500 per batch, 4 clients)", statusFail, 0.5},
		// 17,500/s against the best broker run, 20,000/s: 87.5 %
		{"hot-second drain (100,000 clocks due within one second)", statusPass, 0.875},
		{"hot second of 100,000 clocks: last delivered", statusPass, 0},
		{"lateness p50 (ring at 5,000/s = 25% of the broker ceiling, set by -n)", statusPass, 0},
		{"early / lost rings (ring at 5,000/s = 25% of the broker ceiling, set by -n)", statusFail, 0},
	} {
		tg, ok := got[tt.figure]
		if !ok {
			t.Errorf("no target %q in %v", tt.figure, r.Targets)
			continue
		}
		if tg.Status != tt.status || tg.Met != (tt.status == statusPass) || math.Abs(tg.Ratio-tt.ratio) > 1e-9 {
			t.Errorf("%s: status %s met %v ratio %v, want %s %v", tt.figure, tg.Status, tg.Met, tg.Ratio, tt.status, tt.ratio)
		}
	}
	if tg := got["hot-second drain (100,000 clocks due within one second)"]; !strings.Contains(tg.Ceiling, "4 channel(s) (the best of 1 and 4) 20,000/s") {
		t.Errorf("hot ceiling named %q", tg.Ceiling)
	}
	r.Ring.Early, r.Ring.Lost = 0, 0
	r.evaluate()
	if len(r.Failures) != 0 {
		t.Errorf("failures = %q, want none", r.Failures)
	}

	// without the ceilings, ratio targets are skipped, never passed
	r.MySQL, r.Broker = nil, nil
	r.evaluate()
	for _, tg := range r.Targets {
		if tg.Ratio != 0 || (strings.Contains(tg.Target, "ceiling") && tg.Status != statusSkip) {
			t.Errorf("%s: %s with no ceiling measured", tg.Figure, tg.Status)
		}
	}

	// early and lost rings of sweep points fail the run too
	r.Sweep = &SweepResult{Points: []SweepPoint{{Pct: 50, FromRing: true, Lost: 3}, {Pct: 70, Early: 2, Lost: 1}}}
	r.evaluate()
	if strings.Join(r.Failures, "|") != "sweep 70%: 2 clocks rang early|sweep 70%: 1 clocks lost (not received  after the last ring time)" {
		t.Errorf("failures %q", r.Failures)
	}
}

func TestAddCosts(t *testing.T) {
	r := sampleReport()
	r.CPU = map[string]CPUUse{"create": {ClockdCPUS: 3, ServerCPUS: map[string]float64{"mysql": 4.5}}, "batch": {ClockdCPUS: 6}}
	r.Ring.ClockdCPUCreateS, r.Ring.ClockdCPURingS = 1, 2.5
	r.Ring.ServerCPURingS = map[string]float64{"mysql": 5, "rabbitmq": 4}
	r.Sweep = &SweepResult{Points: []SweepPoint{{Pct: 10, Received: 1000, ClockdCPUS: 0.5, ServerCPUS: map[string]float64{"rabbitmq": 0.25}},
		{Pct: 50, FromRing: true}, {Pct: 85, Error: "x"}}}
	for _, s := range []string{"mysql", "create", "batch", "ring", "sweep"} {
		r.addCosts(s)
	}
	want := []Cost{
		{Scenario: "create", Per: "creates", Count: 150000, MsPer1000: 20, ServerMsPer1000: map[string]float64{"mysql": 30}},
		{Scenario: "batch", Per: "creates", Count: 300000, MsPer1000: 20},
		{Scenario: "ring (create phase)", Per: "creates", Count: 5000, MsPer1000: 200},
		{Scenario: "ring", Per: "rings", Count: 4999, MsPer1000: 2.5 * 1000 / 4.999,
			ServerMsPer1000: map[string]float64{"mysql": 5 * 1000 / 4.999, "rabbitmq": 4 * 1000 / 4.999}},
		{Scenario: "sweep 10%", Per: "rings", Count: 1000, MsPer1000: 500, ServerMsPer1000: map[string]float64{"rabbitmq": 250}},
	}
	if len(r.Costs) != len(want) {
		t.Fatalf("costs %+v, want %+v", r.Costs, want)
	}
	for i := range want {
		c := r.Costs[i]
		if c.Scenario != want[i].Scenario || c.Per != want[i].Per || c.Count != want[i].Count || math.Abs(c.MsPer1000-want[i].MsPer1000) > 1e-6 ||
			len(c.ServerMsPer1000) != len(want[i].ServerMsPer1000) {
			t.Errorf("cost %d = %+v, want %+v", i, c, want[i])
		}
		for k, v := range want[i].ServerMsPer1000 {
			if math.Abs(c.ServerMsPer1000[k]-v) > 1e-6 {
				t.Errorf("cost %d: %s %.3f ms per 1,000, want %.3f", i, k, c.ServerMsPer1000[k], v)
			}
		}
	}
}

func TestReportJSON(t *testing.T) {
	r := sampleReport()
	r.evaluate()
	var buf bytes.Buffer
	if err := r.writeJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if !json.Valid(buf.Bytes()) {
		t.Fatalf("invalid JSON:\n%s", buf.String())
	}
	var back map[string]any
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"machine", "flags", "ring", "broker", "create", "targets", "failures", "rss", "mysql_ceiling"} {
		if _, ok := back[k]; !ok {
			t.Errorf("report.json has no %q", k)
		}
	}
	ring := back["ring"].(map[string]any)
	lat := ring["lateness"].(map[string]any)
	for _, k := range []string{"p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms"} {
		if _, ok := lat[k]; !ok {
			t.Errorf("lateness has no %q", k)
		}
	}
}

func TestReportHTMLAndText(t *testing.T) {
	r := sampleReport()
	r.Ring.PctOfCeiling = 25 // the rate of the broker's paced run: the ring section shows it
	r.CPU = map[string]CPUUse{"ring": {Machine: 60, Clockbench: 10, LoadAvg: "1.00 1.00 1.00"}, "hot": {Machine: 70, LoadAvg: "2.00 1.00 1.00"}}
	r.Quiet = map[string]QuietWait{"ring": {WaitedS: 2.5, BusyPct: 12, Quiet: true}, "hot": {WaitedS: 30, BusyPct: 45}}
	r.evaluate()
	var buf bytes.Buffer
	if err := r.writeHTML(&buf); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	for _, want := range []string{"<!DOCTYPE html>", "<svg", "<polyline", "<rect", "lateness", "a &lt;note&gt; &amp; more"} {
		if !strings.Contains(html, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	if strings.Contains(html, "<script") || strings.Contains(html, "http://cdn") || strings.Contains(html, "https://") {
		t.Error("HTML is not self-contained")
	}
	if n := strings.Count(html, "<svg"); n < 4 {
		t.Errorf("%d charts, want at least 4", n)
	}

	buf.Reset()
	if err := r.writeText(&buf); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{"== ring ==", "p99.9", "early / lost / duplicates", "1 / 1 / 0   FAIL", "== FAILED ==", "15,000/s",
		"== MySQL ceilings ==", "7,000 rows/s", "== broker ceiling ==", "20,000/s with 4 channel(s)", "2.14× the one-row autocommit INSERT ceiling",
		"50% of the 500-row INSERT ceiling", "drain 17,500/s (88% of the broker ceiling 20,000/s)", "PASS", "FAIL",
		"paced at 25% (1 channel)", "5,000/s asked, 4,990/s confirmed",
		"the broker alone           at this rate (broker scenario, paced): publish->consume p50 1.25 ms p99 7.50 ms p99.9 14.0 ms; machine 40% busy, 160 µs of CPU per message",
		"5,000/s asked, 4,990/s confirmed; publish->consume p50 1.25 ms",
		"worst 0.5 s of ring times  4.5-5.0 s: p50 80.0 ms p99 210 ms max 211 ms",
		"load 1.00 1.00 1.00  (began after 2.5 s, the machine 12% busy)",
		"load 2.00 1.00 1.00  (began NOT quiet: the machine still 45% busy after 30.0 s)",
		"20,000/s confirmed (0 in all, 0.0 s), publish->consume p50 0.00 ms p99 0.00 ms; machine 88% busy, 80 µs of CPU per message  <- ceiling",
		// 2 cores at 125 µs a ring: 16,000 rings/s
		"CPU while ringing          first to last receipt: machine 96% busy (2 cores; clockd 30%, mysql 70%, rabbitmq 75%, clockbench 15% of a core); " +
			"125 µs of the machine's CPU per ring (80 µs per message at the broker ceiling); at that cost the cores allow 16,000/s = 80% of the broker ceiling"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}

	dir := filepath.Join(t.TempDir(), "out")
	if err := r.writeFiles(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"report.json", "report.html"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestFmt(t *testing.T) {
	for in, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -5000: "-5,000"} {
		if got := fmtInt(in); got != want {
			t.Errorf("fmtInt(%d) = %q, want %q", in, got, want)
		}
	}
	if got := niceStep(23000, 5); got != 5000 {
		t.Errorf("niceStep = %v", got)
	}
}
