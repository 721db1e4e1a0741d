package lograte

import (
	"strconv"
	"testing"
	"time"
)

func TestLogLimiter(t *testing.T) {
	t.Parallel()
	clock := &fakeNow{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := New(time.Minute, clock.now)
	type step struct {
		advance    time.Duration
		key        string
		ok         bool
		suppressed int
	}
	steps := []step{
		{0, "a", true, 0},
		{0, "a", false, 0},
		{30 * time.Second, "a", false, 0},
		{0, "b", true, 0}, // keys are independent
		{29 * time.Second, "a", false, 0},
		{time.Second, "a", true, 3}, // a minute after the last line: the held-back count
		{0, "a", false, 0},
		{10 * time.Minute, "a", true, 1},
		{0, "b", true, 0},
	}
	for i, s := range steps {
		clock.add(s.advance)
		ok, n := l.Allow(s.key, 1)
		if ok != s.ok || n != s.suppressed {
			t.Errorf("step %d (%s): allow = %v, %d; want %v, %d", i, s.key, ok, n, s.ok, s.suppressed)
		}
	}
}

func TestLogLimiterBoundsKeys(t *testing.T) {
	t.Parallel()
	clock := &fakeNow{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := New(time.Minute, clock.now)
	for i := range 3 * maxLimiterKeys {
		if ok, _ := l.Allow("app-"+strconv.Itoa(i), 1); !ok {
			t.Fatalf("key %d: first line held back", i)
		}
	}
	if n := len(l.keys); n > maxLimiterKeys {
		t.Errorf("%d keys kept, want at most %d", n, maxLimiterKeys)
	}
}

type fakeNow struct{ t time.Time }

func (c *fakeNow) now() time.Time      { return c.t }
func (c *fakeNow) add(d time.Duration) { c.t = c.t.Add(d) }
