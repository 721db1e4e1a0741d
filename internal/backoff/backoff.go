// Package backoff is clockd's one capped exponential backoff with "equal
// jitter": the wait before retry n is Min·2^n capped at Max, of which half is
// fixed and half random. The fixed half keeps retries from hammering a peer
// that just failed; the random half keeps many clients from retrying in step.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy says how long to wait before each retry.
type Policy struct {
	Min, Max time.Duration
	// Rand returns a number in [0, 1); nil means math/rand/v2's Float64.
	// Tests fix it.
	Rand func() float64
}

// Cap is the wait before retry n without jitter: Min·2^n capped at Max
// (n < 0 counts as 0). A Min that is not positive, or above Max, gives Max.
func (p Policy) Cap(n int) time.Duration {
	if p.Min <= 0 || p.Min >= p.Max {
		return max(p.Max, 0)
	}
	d := p.Min
	for i := 0; i < n && d < p.Max; i++ {
		if d > p.Max/2 { // doubling would pass Max (or overflow)
			return p.Max
		}
		d *= 2
	}
	return d
}

// Delay is the wait before retry n (0 is the first): Cap(n), half of it
// fixed and half random, so a value in [Cap(n)/2, Cap(n)).
func (p Policy) Delay(n int) time.Duration {
	d := p.Cap(n)
	f := rand.Float64
	if p.Rand != nil {
		f = p.Rand
	}
	half := d / 2
	return half + time.Duration(f()*float64(d-half))
}
