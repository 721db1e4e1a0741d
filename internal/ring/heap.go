// Package ring makes clocks ring: a bounded in-memory schedule of the clocks
// due soon, a timer gate armed for the earliest deadline, batched claims in
// MySQL, pipelined confirmed publishes to RabbitMQ, batched marks, and the
// retry policy for failed attempts.
package ring

import (
	"container/heap"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// Class separates punctual clocks from a backlog of overdue ones, so that a
// backlog draining at full speed never makes punctual clocks wait behind it.
type Class int

// The classes of an entry.
const (
	Live    Class = iota // loaded ahead of its time
	Backlog              // already overdue when loaded (after downtime)
)

type entry struct {
	due   alarm.Due
	class Class
	index int
}

// slot is a heap element: the entry and its key, (At, ID), kept in the
// heap's own array so that a comparison reads no entry. With the entries
// behind pointers, each comparison loaded two entries from anywhere in
// memory: with 200,000 clocks preloaded, minHeap.Less was 11 % of clockd's
// CPU at 10,000 rings/s (docs/benchmarks.md).
type slot struct {
	sec  int64 // At: seconds since the epoch
	nsec int32 // and nanoseconds (no overflow, whatever the year)
	id   int64
	*entry
}

func slotOf(e *entry) slot {
	return slot{sec: e.due.At.Unix(), nsec: int32(e.due.At.Nanosecond()), id: e.due.ID, entry: e}
}

// minHeap orders entries by (At, ID).
type minHeap []slot

func (h minHeap) Len() int { return len(h) }
func (h minHeap) Less(i, j int) bool {
	a, b := &h[i], &h[j]
	if a.sec != b.sec {
		return a.sec < b.sec
	}
	if a.nsec != b.nsec {
		return a.nsec < b.nsec
	}
	return a.id < b.id
}
func (h minHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

// Push takes an *entry.
func (h *minHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, slotOf(e))
}

// Pop returns an *entry.
func (h *minHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1].entry
	old[n-1] = slot{}
	*h = old[:n-1]
	e.index = -1
	return e
}

// fix restores the heap after the due time of its entry at i changed.
func (h *minHeap) fix(i int) {
	(*h)[i] = slotOf((*h)[i].entry)
	heap.Fix(h, i)
}

// reindex restores the heap after entries were removed in place.
func (h *minHeap) reindex() {
	for i, e := range *h {
		e.index = i
	}
	heap.Init(h)
}

// Schedule is the set of clocks loaded into memory: two min-heaps (live and
// backlog) with an index by id and counts per shard and class. It is not
// safe for concurrent use; Queue wraps it with a lock.
type Schedule struct {
	heaps  [2]minHeap
	byID   map[int64]*entry
	counts map[int][2]int
}

// NewSchedule returns an empty schedule.
func NewSchedule() *Schedule {
	return &Schedule{byID: map[int64]*entry{}, counts: map[int][2]int{}}
}

// Len is the number of entries.
func (s *Schedule) Len() int { return len(s.byID) }

// Count is the number of entries of a shard and class.
func (s *Schedule) Count(shard int, c Class) int { return s.counts[shard][c] }

// Has reports whether the clock is scheduled.
func (s *Schedule) Has(id int64) bool { _, ok := s.byID[id]; return ok }

func (s *Schedule) count(shard int, c Class, d int) {
	n := s.counts[shard]
	n[c] += d
	if n == [2]int{} {
		delete(s.counts, shard)
		return
	}
	s.counts[shard] = n
}

// Add schedules d, or moves it when it is already scheduled. It reports
// whether the earliest deadline changed.
func (s *Schedule) Add(d alarm.Due, c Class) bool {
	before, hadMin := s.Earliest()
	if e, ok := s.byID[d.ID]; ok {
		if e.class == c {
			e.due = d
			s.heaps[c].fix(e.index)
		} else {
			s.remove(e)
			s.push(d, c)
		}
	} else {
		s.push(d, c)
	}
	after, _ := s.Earliest()
	return !hadMin || after.Before(before)
}

func (s *Schedule) push(d alarm.Due, c Class) {
	e := &entry{due: d, class: c}
	heap.Push(&s.heaps[c], e)
	s.byID[d.ID] = e
	s.count(d.Shard, c, 1)
}

func (s *Schedule) remove(e *entry) {
	heap.Remove(&s.heaps[e.class], e.index)
	delete(s.byID, e.due.ID)
	s.count(e.due.Shard, e.class, -1)
}

// Remove unschedules a clock; it reports whether it was there.
func (s *Schedule) Remove(id int64) bool {
	e, ok := s.byID[id]
	if ok {
		s.remove(e)
	}
	return ok
}

// DropShard unschedules every clock of a shard.
func (s *Schedule) DropShard(shard int) int {
	if _, ok := s.counts[shard]; !ok {
		return 0
	}
	var drop []*entry
	for _, e := range s.byID {
		if e.due.Shard == shard {
			drop = append(drop, e)
		}
	}
	for _, e := range drop {
		s.remove(e)
	}
	return len(drop)
}

// Earliest is the earliest deadline of either heap.
func (s *Schedule) Earliest() (time.Time, bool) {
	var t time.Time
	ok := false
	for c := range s.heaps {
		if len(s.heaps[c]) > 0 {
			at := s.heaps[c][0].due.At
			if !ok || at.Before(t) {
				t, ok = at, true
			}
		}
	}
	return t, ok
}

// PopDue removes and returns up to max clocks due at or before until.
// Punctual (live) clocks go first, but a quarter of the batch is kept for
// the backlog so that neither starves the other.
func (s *Schedule) PopDue(until time.Time, max int) []alarm.Due {
	var out []alarm.Due
	out = s.pop(out, Live, until, max-max/4)
	out = s.pop(out, Backlog, until, max)
	return s.pop(out, Live, until, max)
}

func (s *Schedule) pop(out []alarm.Due, c Class, until time.Time, max int) []alarm.Due {
	h := &s.heaps[c]
	for len(out) < max && len(*h) > 0 && !(*h)[0].due.At.After(until) {
		e := heap.Pop(h).(*entry)
		delete(s.byID, e.due.ID)
		s.count(e.due.Shard, e.class, -1)
		out = append(out, e.due)
	}
	return out
}

// DueAtLeast reports whether at least n entries are due at or before
// until. It visits only due entries (a heap's due entries form a subtree at
// its root), at most n of them.
func (s *Schedule) DueAtLeast(until time.Time, n int) bool {
	count := 0
	var visit func(h minHeap, i int)
	visit = func(h minHeap, i int) {
		if i >= len(h) || count >= n || h[i].due.At.After(until) {
			return
		}
		count++
		visit(h, 2*i+1)
		visit(h, 2*i+2)
	}
	for c := range s.heaps {
		visit(s.heaps[c], 0)
	}
	return count >= n
}

// NotDue counts the entries due after t (preloaded ahead of their time).
func (s *Schedule) NotDue(t time.Time) int {
	n := 0
	for _, e := range s.byID {
		if e.due.At.After(t) {
			n++
		}
	}
	return n
}
