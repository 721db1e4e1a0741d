package ring

import (
	"sync"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// Queue is the Schedule shared by the loaders (producers) and the ring loop
// (consumer). Adding an entry earlier than every other wakes the ring loop.
type Queue struct {
	mu   sync.Mutex
	s    *Schedule
	wake chan struct{}
}

// NewQueue returns an empty queue.
func NewQueue() *Queue {
	return &Queue{s: NewSchedule(), wake: make(chan struct{}, 1)}
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Wake is signalled when the earliest deadline moved earlier.
func (q *Queue) Wake() <-chan struct{} { return q.wake }

// Add schedules clocks of one class.
func (q *Queue) Add(c Class, ds ...alarm.Due) {
	q.mu.Lock()
	changed := false
	for _, d := range ds {
		if q.s.Add(d, c) {
			changed = true
		}
	}
	q.mu.Unlock()
	if changed {
		q.signal()
	}
}

// Remove unschedules clocks.
func (q *Queue) Remove(ids ...int64) {
	q.mu.Lock()
	for _, id := range ids {
		q.s.Remove(id)
	}
	q.mu.Unlock()
}

// DropShard unschedules every clock of a shard.
func (q *Queue) DropShard(shard int) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.s.DropShard(shard)
}

// Count is the number of entries of a shard and class.
func (q *Queue) Count(shard int, c Class) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.s.Count(shard, c)
}

// Has reports whether a clock is scheduled.
func (q *Queue) Has(id int64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.s.Has(id)
}

// Len is the number of entries.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.s.Len()
}

// NotDue counts the entries due after t.
func (q *Queue) NotDue(t time.Time) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.s.NotDue(t)
}

// Earliest is the earliest deadline.
func (q *Queue) Earliest() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.s.Earliest()
}

// DueAtLeast reports whether at least n clocks are due at or before until.
func (q *Queue) DueAtLeast(until time.Time, n int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.s.DueAtLeast(until, n)
}

// PopDue removes up to max clocks due at or before until.
func (q *Queue) PopDue(until time.Time, max int) []alarm.Due {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.s.PopDue(until, max)
}
