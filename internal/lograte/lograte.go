package lograte

import (
	"sync"
	"time"
)

// Limiter lets one log line per key through per interval and counts the
// ones it holds back, so that a condition that repeats thousands of times a
// second (every ring of an application without a queue) is visible in the
// logs without flooding them.
type Limiter struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*limitState
}

type limitState struct {
	last       time.Time
	suppressed int
}

// maxLimiterKeys bounds the memory of a limiter keyed by something outside
// our control (application names).
const maxLimiterKeys = 4096

func New(every time.Duration, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{every: every, now: now, keys: map[string]*limitState{}}
}

// Allow is asked about n more events of key; it reports whether a line for
// key may be logged now and, when it may, how many events of key were held
// back since the last line.
func (l *Limiter) Allow(key string, n int) (ok bool, heldBack int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.keys[key]
	if st == nil {
		if len(l.keys) >= maxLimiterKeys {
			for k, s := range l.keys {
				if now.Sub(s.last) >= l.every {
					delete(l.keys, k)
				}
			}
			if len(l.keys) >= maxLimiterKeys {
				clear(l.keys)
			}
		}
		l.keys[key] = &limitState{last: now}
		return true, 0
	}
	if now.Sub(st.last) < l.every {
		st.suppressed += n
		return false, 0
	}
	heldBack = st.suppressed
	st.last, st.suppressed = now, 0
	return true, heldBack
}
