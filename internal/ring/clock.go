package ring

import "time"

// Clock is the loop's source of time: the real clock by default, a fake one
// in tests of the timer gate.
type Clock interface {
	// Now is the ring time: when a clock is due is judged by it.
	Now() time.Time
	// Local is the local clock, by which shard leases are reckoned
	// (preload's ValidUntil); Now may be moved off it (clocksync).
	Local() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is what the loop needs of a timer. Stop and Reset follow the
// semantics of time.Timer since Go 1.23: after either returns, no stale
// value is received from C.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// RealClock is the wall clock (time.Now, time.NewTimer).
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// Local returns time.Now().
func (RealClock) Local() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
