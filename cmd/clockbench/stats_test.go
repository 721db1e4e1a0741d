package main

import (
	"slices"
	"testing"
	"time"
)

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
