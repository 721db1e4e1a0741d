package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
		RingRate: 5000, TargetRate: 5000, Lateness: summarize(append([]time.Duration(nil), lat...)),
		LatenessHist: histogram(lat), Timeline: tl.Export(), Notes: []string{"a <note> & more"},
		Anomalies: map[string]int{"x-clock-ring-at": 2},
	}
	return &Report{
		Tool: "clockbench", RunID: "abcd", StartedAt: start, FinishedAt: start.Add(time.Minute), Addr: "http://127.0.0.1:8080",
		Machine: Machine{NProc: 2, MemTotalMiB: 24000, GoVersion: "go1.26"}, Flags: map[string]string{"n": "5000"},
		Scenarios: []string{"broker", "create", "ring"},
		Broker:    &BrokerResult{Rate: 20000, Acked: 200000, Timeline: tl.Export()},
		Create: &CreateResult{Clients: 64, Clocks: 150000, Rate: 15000, Latency: summarize([]time.Duration{time.Millisecond, 30 * time.Millisecond}),
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
	met := map[string]bool{}
	for _, tg := range r.Targets {
		met[tg.Figure] = tg.Met
	}
	if !met["single-clock creates, 64 clients"] {
		t.Error("15,000/s create target not met")
	}
	if met["single-clock create latency p99"] {
		t.Error("30 ms p99 met a 25 ms target")
	}
	r.Ring.Early, r.Ring.Lost = 0, 0
	r.evaluate()
	if len(r.Failures) != 0 {
		t.Errorf("failures = %q, want none", r.Failures)
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
	for _, k := range []string{"machine", "flags", "ring", "broker", "create", "targets", "failures", "rss"} {
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
	for _, want := range []string{"== ring ==", "p99.9", "early / lost / duplicates", "1 / 1 / 0   FAIL", "== FAILED ==", "15,000/s"} {
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
