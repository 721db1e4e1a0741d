package main

import (
	"math/rand/v2"
	"slices"
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
			if got := percentile(tt.samples, tt.p); got != tt.want {
				t.Errorf("percentile(p=%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	if s := summarize(nil); s != (Summary{}) {
		t.Errorf("summarize(nil) = %+v", s)
	}
	// 1..1000 ms, shuffled: summarize must sort
	samples := make([]time.Duration, 1000)
	for i := range samples {
		samples[i] = time.Duration(i+1) * time.Millisecond
	}
	rand.Shuffle(len(samples), func(i, j int) { samples[i], samples[j] = samples[j], samples[i] })
	s := summarize(samples)
	want := Summary{Count: 1000, Min: 1, Mean: 500.5, P50: 500, P90: 900, P99: 990, P999: 999, Max: 1000}
	if s != want {
		t.Errorf("summarize = %+v, want %+v", s, want)
	}
	if !slices.IsSorted(samples) {
		t.Error("samples not sorted in place")
	}
}

func TestBucketIndex(t *testing.T) {
	tests := []struct {
		d      time.Duration
		lo, hi time.Duration // the bucket's edges
	}{
		{0, 0, 100 * time.Microsecond},
		{99 * time.Microsecond, 0, 100 * time.Microsecond},
		{100 * time.Microsecond, 100 * time.Microsecond, 125 * time.Microsecond},
		{124 * time.Microsecond, 100 * time.Microsecond, 125 * time.Microsecond},
		{time.Millisecond, time.Millisecond, 1250 * time.Microsecond},
		{1999 * time.Microsecond, 1600 * time.Microsecond, 2 * time.Millisecond},
		{3 * time.Millisecond, 2500 * time.Microsecond, 3150 * time.Microsecond},
		{15 * time.Millisecond, 12500 * time.Microsecond, 16 * time.Millisecond},
		{time.Second, time.Second, 1250 * time.Millisecond},
		{90 * time.Second, 80 * time.Second, 100 * time.Second},
	}
	for _, tt := range tests {
		i := bucketIndex(tt.d)
		if i < 0 || i+1 >= len(histEdges) {
			t.Fatalf("bucketIndex(%v) = %d", tt.d, i)
		}
		if histEdges[i] != tt.lo || histEdges[i+1] != tt.hi {
			t.Errorf("bucketIndex(%v): bucket [%v, %v), want [%v, %v)", tt.d, histEdges[i], histEdges[i+1], tt.lo, tt.hi)
		}
	}
	if i := bucketIndex(-time.Nanosecond); i != -1 {
		t.Errorf("bucketIndex(-1ns) = %d, want -1", i)
	}
	if i := bucketIndex(time.Hour * 24); i != len(histEdges)-1 {
		t.Errorf("bucketIndex(24h) = %d, want the last bucket %d", i, len(histEdges)-1)
	}
	if !slices.IsSorted(histEdges) {
		t.Error("edges not sorted")
	}
}

func TestHistogram(t *testing.T) {
	if h := histogram(nil); len(h) != 0 {
		t.Errorf("histogram(nil) = %v", h)
	}
	samples := []time.Duration{
		-3 * time.Millisecond, -time.Millisecond, // early
		time.Millisecond, 1100 * time.Microsecond, // [1, 1.25)
		2 * time.Millisecond, // [2, 2.5)
	}
	h := histogram(samples)
	want := []Bucket{
		{Lo: -3, Hi: 0, Count: 2},
		{Lo: 1, Hi: 1.25, Count: 2},
		{Lo: 1.25, Hi: 1.6, Count: 0},
		{Lo: 1.6, Hi: 2, Count: 0},
		{Lo: 2, Hi: 2.5, Count: 1},
	}
	if !slices.Equal(h, want) {
		t.Errorf("histogram = %v, want %v", h, want)
	}
	total := 0
	for _, b := range histogram([]time.Duration{0, time.Hour * 48, time.Second}) {
		total += b.Count
		if b.Hi <= b.Lo {
			t.Errorf("bucket %+v: hi <= lo", b)
		}
	}
	if total != 3 {
		t.Errorf("total = %d, want 3", total)
	}
}

func TestTimeline(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tl := newTimeline(start, 100*time.Millisecond)
	tl.Add("create", start.Add(-time.Second), 1) // before the start: first bucket
	tl.Add("create", start.Add(50*time.Millisecond), 2)
	tl.Add("ring", start.Add(350*time.Millisecond), 5)
	e := tl.Export()
	if e.BucketMs != 100 || len(e.Series) != 2 {
		t.Fatalf("export = %+v", e)
	}
	if got := e.Series[0]; got.Name != "create" || !slices.Equal(got.Counts, []int{3, 0, 0, 0}) {
		t.Errorf("create = %+v", got)
	}
	if got := e.Series[1]; got.Name != "ring" || !slices.Equal(got.Counts, []int{0, 0, 0, 5}) {
		t.Errorf("ring = %+v", got)
	}
	if r := rate(10, 2*time.Second); r != 5 {
		t.Errorf("rate = %v", r)
	}
	if r := rate(10, 0); r != 0 {
		t.Errorf("rate over 0 = %v", r)
	}
}
