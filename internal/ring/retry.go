package ring

import (
	"math/rand/v2"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// Retry is the policy for failed attempts: capped exponential backoff with
// jitter, expiry at latest_ring_at, death after max_attempts.
type Retry struct {
	Min, Max time.Duration
	// Rand returns a number in [0, 1); nil means math/rand/v2.
	Rand func() float64
}

// Backoff is the wait after the n-th failed attempt (n >= 1): Min·2^(n-1)
// capped at Max, then "equal jitter": half of it fixed, half random.
func (r Retry) Backoff(n int) time.Duration {
	d := r.Min
	for i := 1; i < n && d < r.Max; i++ {
		d *= 2
	}
	if d > r.Max || d <= 0 {
		d = r.Max
	}
	f := rand.Float64
	if r.Rand != nil {
		f = r.Rand
	}
	half := d / 2
	return half + time.Duration(f()*float64(d-half))
}

// Outcome decides what becomes of clock c whose attempt (c.Attempts+1)
// failed at now with err.
func (r Retry) Outcome(c alarm.Clock, now time.Time, err error) alarm.Outcome {
	attempt := c.Attempts + 1
	o := alarm.Outcome{ID: c.ID, Error: err.Error()}
	if c.MaxAttempts > 0 && attempt >= c.MaxAttempts {
		o.Status = alarm.StatusDead
		return o
	}
	next := now.Add(r.Backoff(attempt)).Truncate(time.Millisecond)
	if !c.LatestRingAt.IsZero() && next.After(c.LatestRingAt) {
		o.Status = alarm.StatusExpired
		return o
	}
	o.Status = alarm.StatusPending
	o.NextTryAt = next
	return o
}
