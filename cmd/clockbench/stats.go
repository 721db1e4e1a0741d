package main

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/clockd/clockd/internal/benchkit"
)

// Summary is the distribution of a set of durations, in milliseconds
// (benchkit's, shared with the peers harness).
type Summary = benchkit.Summary

// Bucket is one bar of a histogram: samples in [Lo, Hi).
type Bucket struct {
	Lo    float64 `json:"lo_ms"`
	Hi    float64 `json:"hi_ms"`
	Count int     `json:"count"`
}

// histEdges are the bucket edges of the lateness histogram: 0, then a
// log scale with ten steps per decade (Renard R10: 1, 1.25, 1.6, 2, 2.5,
// 3.15, 4, 5, 6.3, 8) from 0.1 ms to 1000 s. Bucket i is
// [histEdges[i], histEdges[i+1]); the last edge is open-ended.
var histEdges = func() []time.Duration {
	r10 := []float64{1, 1.25, 1.6, 2, 2.5, 3.15, 4, 5, 6.3, 8}
	edges := []time.Duration{0}
	for decade := 100 * time.Microsecond; decade <= 1000*time.Second; decade *= 10 {
		for _, m := range r10 {
			edges = append(edges, time.Duration(math.Round(m*float64(decade))))
		}
	}
	return edges
}()

// bucketIndex returns the index of the histogram bucket holding d, or -1
// for a negative d.
func bucketIndex(d time.Duration) int {
	if d < 0 {
		return -1
	}
	// first edge > d, minus one
	return sort.Search(len(histEdges), func(i int) bool { return histEdges[i] > d }) - 1
}

// histogram counts samples into the log-scaled buckets of histEdges and
// returns the buckets from the first to the last non-empty one. Negative
// samples (early rings) are counted in a leading bucket whose Hi is 0 and
// whose Lo is the smallest sample.
func histogram(samples []time.Duration) []Bucket {
	counts := make([]int, len(histEdges))
	early := 0
	minEarly := time.Duration(0)
	for _, d := range samples {
		i := bucketIndex(d)
		if i < 0 {
			early++
			minEarly = min(minEarly, d)
			continue
		}
		counts[i]++
	}
	first, last := -1, -1
	for i, c := range counts {
		if c > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	var out []Bucket
	if early > 0 {
		out = append(out, Bucket{Lo: benchkit.MS(minEarly), Hi: 0, Count: early})
	}
	if first < 0 {
		return out
	}
	for i := first; i <= last; i++ {
		hi := math.Inf(1)
		if i+1 < len(histEdges) {
			hi = benchkit.MS(histEdges[i+1])
		}
		if math.IsInf(hi, 1) {
			hi = benchkit.MS(histEdges[i]) * 10 // JSON has no infinity; the last bucket is open-ended
		}
		out = append(out, Bucket{Lo: benchkit.MS(histEdges[i]), Hi: hi, Count: counts[i]})
	}
	return out
}

// Timeline counts events per fixed bucket of time, per named series. It
// is safe for concurrent use.
type Timeline struct {
	mu     sync.Mutex
	start  time.Time
	bucket time.Duration
	series map[string][]int
	order  []string
}

func newTimeline(start time.Time, bucket time.Duration) *Timeline {
	return &Timeline{start: start, bucket: bucket, series: map[string][]int{}}
}

// Add counts n events of series at time t; events before the start are
// counted in the first bucket.
func (tl *Timeline) Add(series string, t time.Time, n int) {
	i := int(t.Sub(tl.start) / tl.bucket)
	if i < 0 {
		i = 0
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	s, ok := tl.series[series]
	if !ok {
		tl.order = append(tl.order, series)
	}
	for len(s) <= i {
		s = append(s, 0)
	}
	s[i] += n
	tl.series[series] = s
}

// TimelineJSON is the exported form of a Timeline: every series has the
// same number of buckets; values are events per bucket.
type TimelineJSON struct {
	Start    time.Time `json:"start"`
	BucketMs float64   `json:"bucket_ms"`
	Series   []Series  `json:"series"`
}

// Series is one line of a timeline chart.
type Series struct {
	Name   string `json:"name"`
	Counts []int  `json:"counts"`
}

// Export returns the timeline with all series padded to the same length.
func (tl *Timeline) Export() *TimelineJSON {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := 0
	for _, s := range tl.series {
		n = max(n, len(s))
	}
	out := &TimelineJSON{Start: tl.start.UTC(), BucketMs: benchkit.MS(tl.bucket)}
	for _, name := range tl.order {
		c := make([]int, n)
		copy(c, tl.series[name])
		out.Series = append(out.Series, Series{Name: name, Counts: c})
	}
	return out
}

// rate returns count per second over d, or 0 when d is not positive.
func rate(count int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(count) / d.Seconds()
}
