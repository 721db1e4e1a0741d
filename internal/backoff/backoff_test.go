package backoff

import (
	"math"
	"testing"
	"time"
)

func fixed(f float64) func() float64 { return func() float64 { return f } }

func TestCap(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Policy
		n    int
		want time.Duration
	}{
		{"first retry is Min", Policy{Min: time.Second, Max: time.Minute}, 0, time.Second},
		{"negative n counts as 0", Policy{Min: time.Second, Max: time.Minute}, -3, time.Second},
		{"doubles", Policy{Min: time.Second, Max: time.Minute}, 1, 2 * time.Second},
		{"doubles again", Policy{Min: time.Second, Max: time.Minute}, 5, 32 * time.Second},
		{"capped", Policy{Min: time.Second, Max: time.Minute}, 6, time.Minute},
		{"far past the cap", Policy{Min: time.Second, Max: time.Minute}, 1 << 30, time.Minute},
		{"max not a power-of-two multiple", Policy{Min: 200 * time.Millisecond, Max: time.Second}, 3, time.Second},
		{"just below the cap", Policy{Min: 200 * time.Millisecond, Max: time.Second}, 2, 800 * time.Millisecond},
		{"min above max: max", Policy{Min: time.Minute, Max: time.Second}, 0, time.Second},
		{"min equal to max", Policy{Min: time.Second, Max: time.Second}, 4, time.Second},
		{"zero min: max", Policy{Max: time.Second}, 0, time.Second},
		{"negative min: max", Policy{Min: -time.Second, Max: time.Second}, 2, time.Second},
		{"huge max does not overflow", Policy{Min: time.Nanosecond, Max: math.MaxInt64}, 200, math.MaxInt64},
		{"zero policy", Policy{}, 3, 0},
		{"negative max", Policy{Max: -time.Second}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Cap(tt.n); got != tt.want {
				t.Errorf("Cap(%d) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
}

func TestDelayEqualJitter(t *testing.T) {
	t.Parallel()
	p := Policy{Min: time.Second, Max: time.Minute}
	tests := []struct {
		name string
		n    int
		rand float64
		want time.Duration
	}{
		{"rand 0: the fixed half", 0, 0, 500 * time.Millisecond},
		{"rand 0.5: three quarters", 0, 0.5, 750 * time.Millisecond},
		{"rand 0.5, third retry", 2, 0.5, 3 * time.Second},
		{"rand 0.5, capped", 30, 0.5, 45 * time.Second},
		{"rand 0, capped", 30, 0, 30 * time.Second},
		{"rand just under 1", 0, 0.999999, 999999500 * time.Nanosecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := p
			p.Rand = fixed(tt.rand)
			if got := p.Delay(tt.n); got != tt.want {
				t.Errorf("Delay(%d) with rand %v = %v, want %v", tt.n, tt.rand, got, tt.want)
			}
		})
	}
	if got := (Policy{}).Delay(0); got != 0 {
		t.Errorf("zero policy: Delay = %v, want 0", got)
	}
}

func TestDelayJitterBounds(t *testing.T) {
	t.Parallel()
	p := Policy{Min: 100 * time.Millisecond, Max: 10 * time.Second} // real randomness
	for n := range 10 {
		c := p.Cap(n)
		lo, hi := c, time.Duration(0)
		for range 2000 {
			d := p.Delay(n)
			if d < c/2 || d > c {
				t.Fatalf("Delay(%d) = %v outside [%v, %v]", n, d, c/2, c)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if hi-lo < c/4 { // the jitter really spreads over the random half
			t.Errorf("Delay(%d) spread %v..%v: too little jitter", n, lo, hi)
		}
	}
}
