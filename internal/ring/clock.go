package ring

import "time"

// Clock is the loop's source of time: the real clock by default, a fake one
// in tests of the timer gate.
type Clock interface {
	Now() time.Time
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

// NewTimer returns a time.Timer.
func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

// localClock is a Clock whose Now is moved off the local clock (clocksync:
// the ring times are reckoned by MySQL's clock when the two differ). Shard
// leases are reckoned by the local clock (preload's ValidUntil), so the
// loop checks them against Local.
type localClock interface {
	Local() time.Time
}

// leaseNow is the time to check leases against: the local clock.
func (l *Loop) leaseNow() time.Time {
	if c, ok := l.clk.(localClock); ok {
		return c.Local()
	}
	return l.clk.Now()
}
