package ring

import (
	"sync"
	"time"
)

// fakeClock is a Clock that only moves when the test says so. Its timers
// fire (a value in C) when Advance passes their deadline.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]bool // armed timers
}

func newFakeClock(now time.Time) *fakeClock {
	return &fakeClock{now: now, timers: map[*fakeTimer]bool{}}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Local is Now: the fake loop clock is the local one.
func (c *fakeClock) Local() time.Time { return c.Now() }

// Advance moves the time forward by d and fires the timers due by then.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		if !t.when.After(c.now) {
			t.fireLocked()
		}
	}
}

// Armed is the number of armed timers.
func (c *fakeClock) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

type fakeTimer struct {
	c    *fakeClock
	ch   chan time.Time
	when time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

// fireLocked sends the time and disarms the timer; c.mu is held.
func (t *fakeTimer) fireLocked() {
	delete(t.c.timers, t)
	select {
	case t.ch <- t.c.now:
	default:
	}
}

// drainLocked drops a value not received yet (Go 1.23 timer semantics).
func (t *fakeTimer) drainLocked() {
	select {
	case <-t.ch:
	default:
	}
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	armed := t.c.timers[t]
	delete(t.c.timers, t)
	t.drainLocked()
	return armed
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	armed := t.c.timers[t]
	t.drainLocked()
	t.when = t.c.now.Add(d)
	t.c.timers[t] = true
	if d <= 0 {
		t.fireLocked()
	}
	return armed
}
