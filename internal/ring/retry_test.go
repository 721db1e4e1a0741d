package ring

import (
	"errors"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

func fixed(f float64) func() float64 { return func() float64 { return f } }

func TestBackoff(t *testing.T) {
	r := Retry{Min: time.Second, Max: time.Minute}
	tests := []struct {
		n    int
		base time.Duration // before jitter: Min·2^(n-1) capped at Max
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{4, 8 * time.Second}, {6, 32 * time.Second}, {7, time.Minute}, {8, time.Minute},
		{64, time.Minute}, {1 << 20, time.Minute},
	}
	for _, tt := range tests {
		// equal jitter: half fixed, half random
		r.Rand = fixed(0)
		if got := r.Backoff(tt.n); got != tt.base/2 {
			t.Errorf("Backoff(%d) with rand 0 = %v, want %v", tt.n, got, tt.base/2)
		}
		r.Rand = fixed(0.5)
		if got, want := r.Backoff(tt.n), tt.base/2+tt.base/4; got != want {
			t.Errorf("Backoff(%d) with rand 0.5 = %v, want %v", tt.n, got, want)
		}
		r.Rand = fixed(0.999999)
		if got := r.Backoff(tt.n); got >= tt.base || got < tt.base-tt.base/1000 {
			t.Errorf("Backoff(%d) with rand ~1 = %v, want just under %v", tt.n, got, tt.base)
		}
	}
}

func TestBackoffCapAndDegenerate(t *testing.T) {
	tests := []struct {
		name string
		r    Retry
		n    int
		want time.Duration // with rand 0.5
	}{
		{"min above max: max wins", Retry{Min: time.Minute, Max: time.Second}, 1, 750 * time.Millisecond},
		{"max not a power-of-two multiple", Retry{Min: 200 * time.Millisecond, Max: time.Second}, 4, 750 * time.Millisecond},
		{"just below the cap", Retry{Min: 200 * time.Millisecond, Max: time.Second}, 3, 600 * time.Millisecond},
		{"zero min falls back to max", Retry{Min: 0, Max: time.Second}, 1, 750 * time.Millisecond},
	}
	for _, tt := range tests {
		tt.r.Rand = fixed(0.5)
		if got := tt.r.Backoff(tt.n); got != tt.want {
			t.Errorf("%s: Backoff(%d) = %v, want %v", tt.name, tt.n, got, tt.want)
		}
	}
}

func TestBackoffJitterBounds(t *testing.T) {
	r := Retry{Min: 100 * time.Millisecond, Max: 10 * time.Second} // real randomness
	for n := 1; n <= 10; n++ {
		base := min(100*time.Millisecond<<(n-1), 10*time.Second)
		lo, hi := base, time.Duration(0)
		for range 2000 {
			d := r.Backoff(n)
			if d < base/2 || d > base {
				t.Fatalf("Backoff(%d) = %v outside [%v, %v]", n, d, base/2, base)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// the jitter really spreads over the random half
		if hi-lo < base/4 {
			t.Errorf("Backoff(%d) spread %v..%v: too little jitter", n, lo, hi)
		}
	}
}

func TestOutcome(t *testing.T) {
	now := t0.Add(123456 * time.Microsecond) // not a whole millisecond
	r := Retry{Min: time.Second, Max: time.Minute, Rand: fixed(0.5)}
	errBroker := errors.New("rabbit: message unroutable")
	tests := []struct {
		name     string
		attempts int // failed attempts before this one
		max      int
		latest   time.Duration // from now; 0 = none
		status   alarm.Status
		next     time.Duration // from now, for pending (before truncation)
	}{
		{"first failure retries", 0, 0, 0, alarm.StatusPending, 750 * time.Millisecond},
		{"backoff doubles", 3, 0, 0, alarm.StatusPending, 6 * time.Second},
		{"backoff is capped", 30, 0, 0, alarm.StatusPending, 45 * time.Second},
		{"below max_attempts retries", 0, 2, 0, alarm.StatusPending, 750 * time.Millisecond},
		{"max_attempts reached: dead", 1, 2, 0, alarm.StatusDead, 0},
		{"max_attempts 1: dead at once", 0, 1, 0, alarm.StatusDead, 0},
		{"beyond max_attempts (lowered by a reschedule): dead", 5, 2, 0, alarm.StatusDead, 0},
		{"next try before latest_ring_at retries", 0, 0, time.Second, alarm.StatusPending, 750 * time.Millisecond},
		{"next try after latest_ring_at: the last try shortly before it", 0, 0, 500 * time.Millisecond, alarm.StatusPending, 400 * time.Millisecond},
		{"next try within the lead of latest_ring_at: the last try shortly before it", 0, 0, 800 * time.Millisecond, alarm.StatusPending, 700 * time.Millisecond},
		{"failed within the lead of latest_ring_at: that was the last try", 0, 0, 60 * time.Millisecond, alarm.StatusExpired, 0},
		{"the last try failed: expired before the limit", 0, 0, alarm.LastTryLead, alarm.StatusExpired, 0},
		{"latest_ring_at passed a moment ago: expired", 0, 0, -time.Millisecond, alarm.StatusExpired, 0},
		{"latest_ring_at already passed: expired", 0, 0, -time.Second, alarm.StatusExpired, 0},
		{"dead wins over expired", 1, 2, -time.Second, alarm.StatusDead, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// as claimed: the claim counted the attempt that failed
			c := alarm.Clock{ID: 42, Attempts: tt.attempts + 1, MaxAttempts: tt.max, RingAt: t0}
			if tt.latest != 0 {
				c.LatestRingAt = now.Add(tt.latest)
			}
			o := r.Outcome(c, now, errBroker)
			if o.ID != 42 || o.Status != tt.status || o.Error != errBroker.Error() {
				t.Fatalf("outcome %+v, want id 42, status %s, error %q", o, tt.status, errBroker)
			}
			if tt.status != alarm.StatusPending {
				if !o.NextTryAt.IsZero() {
					t.Errorf("NextTryAt %v set for %s", o.NextTryAt, o.Status)
				}
				return
			}
			want := now.Add(tt.next).Truncate(time.Millisecond)
			if !o.NextTryAt.Equal(want) {
				t.Errorf("NextTryAt %v, want %v", o.NextTryAt, want)
			}
			if o.NextTryAt.Sub(o.NextTryAt.Truncate(time.Millisecond)) != 0 {
				t.Errorf("NextTryAt %v is not whole milliseconds (the column is)", o.NextTryAt)
			}
		})
	}
}

// A ring is after latest_ring_at only from the millisecond after it: the
// times are kept to the millisecond, so a clock whose latest_ring_at is its
// ring_at rings when it fires within that millisecond.
func TestPassedToTheMillisecond(t *testing.T) {
	by := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC).Add(250 * time.Millisecond)
	for _, tt := range []struct {
		now  time.Duration // from by
		want bool
	}{
		{-time.Millisecond, false},
		{0, false},
		{400 * time.Microsecond, false},
		{999 * time.Microsecond, false},
		{time.Millisecond, true},
		{time.Second, true},
	} {
		if got := passed(by.Add(tt.now), by); got != tt.want {
			t.Errorf("passed(by%+v) = %v, want %v", tt.now, got, tt.want)
		}
	}
}
