package ring

import (
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/backoff"
)

// Retry is the policy for failed attempts: capped exponential backoff with
// jitter (the last try shortly before latest_ring_at), expiry past
// latest_ring_at, death after max_attempts.
type Retry struct {
	Min, Max time.Duration
	// Rand returns a number in [0, 1); nil means math/rand/v2.
	Rand func() float64
}

// Backoff is the wait after the n-th failed attempt (n >= 1): Min·2^(n-1)
// capped at Max, then "equal jitter": half of it fixed, half random.
func (r Retry) Backoff(n int) time.Duration {
	return backoff.Policy{Min: r.Min, Max: r.Max, Rand: r.Rand}.Delay(max(n-1, 0))
}

// Outcome decides what becomes of clock c, as claimed, whose attempt
// (c.Attempts: the claim counted it) failed at now with err.
func (r Retry) Outcome(c alarm.Clock, now time.Time, err error) alarm.Outcome {
	attempt := max(c.Attempts, 1)
	o := alarm.Outcome{ID: c.ID, Error: err.Error()}
	if c.MaxAttempts > 0 && attempt >= c.MaxAttempts {
		o.Status = alarm.StatusDead
		return o
	}
	next := now.Add(r.Backoff(attempt)).Truncate(time.Millisecond)
	if by := c.RingBy(); !by.IsZero() {
		// the last try comes alarm.LastTryLead before latest_ring_at (or the
		// occurrence's deadline), so that a try a little late still rings
		// in time; a clock expires once that try has failed, not while
		// it may still ring (a queue bound meanwhile gets it)
		if last := alarm.LastTry(by); next.After(last) {
			if !now.Before(last) {
				// this was the last try (or came even later): none is left
				o.Status = alarm.StatusExpired
				return o
			}
			next = last
		}
	}
	o.Status = alarm.StatusPending
	o.NextTryAt = next
	return o
}

// passed reports whether a ring at now would come after by (latest_ring_at
// or an occurrence's deadline). Clocks keep their times to the millisecond,
// so a ring within by's own millisecond is at by, not after it: a clock
// whose latest_ring_at is its ring_at rings when it fires on time.
func passed(now, by time.Time) bool {
	return now.Truncate(time.Millisecond).After(by)
}
