// Package benchkit is what clockbench and its peers harness
// (cmd/clockbench/peers, a module of its own) share to measure the same
// way: latency summaries by nearest rank, and the machine's CPU read from
// /proc (the machine's busy share, a process's CPU time, readings in a
// series, the wait for a quiet machine).
package benchkit

import (
	"math"
	"slices"
	"time"
)

// Summary is the distribution of a set of durations, in milliseconds.
type Summary struct {
	Count int     `json:"count"`
	Min   float64 `json:"min_ms"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

// MS is d in milliseconds.
func MS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted samples: the smallest sample such that at least p% of the samples
// are <= it. It returns 0 for no samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p/100*float64(n) - 1e-9)) // epsilon: 99.9/100*1000 is 999.0000000000001
	return sorted[min(max(rank, 1), n)-1]
}

// Summarize sorts samples in place and returns their summary.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	slices.Sort(samples)
	var sum float64
	for _, d := range samples {
		sum += float64(d)
	}
	return Summary{
		Count: len(samples),
		Min:   MS(samples[0]),
		Mean:  sum / float64(len(samples)) / float64(time.Millisecond),
		P50:   MS(Percentile(samples, 50)),
		P90:   MS(Percentile(samples, 90)),
		P99:   MS(Percentile(samples, 99)),
		P999:  MS(Percentile(samples, 99.9)),
		Max:   MS(samples[len(samples)-1]),
	}
}
