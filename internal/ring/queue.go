package ring

import (
	"math"
	"sync"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// Queue is the Schedule shared by the loaders (producers) and the ring loop
// (consumer). Adding an entry earlier than every other wakes the ring loop.
//
// A load reads rows from MySQL while the API may change them: a PATCH that
// commits after the load's SELECT read the row tells the queue the clock's
// new time (Changed, then Add), and the load's answer, arriving later, must
// not put the old time back (the clock would ring at its old time, late).
// So a load takes a stamp before its query (BeginLoad) and hands its rows
// in with it (AddLoaded): clocks changed since the stamp are left out, as
// the change already told the queue where they are.
type Queue struct {
	mu   sync.Mutex
	s    *Schedule
	wake chan struct{}

	seq     uint64           // bumped by each change of a clock by the API
	loads   map[uint64]int   // stamps of the loads running, and how many
	changed map[int64]uint64 // clock → seq of its last change, while a load older runs
	log     []change         // the same changes in seq order, to forget them cheaply
}

type change struct {
	seq uint64
	id  int64
}

// NewQueue returns an empty queue.
func NewQueue() *Queue {
	return &Queue{
		s:       NewSchedule(),
		wake:    make(chan struct{}, 1),
		loads:   map[uint64]int{},
		changed: map[int64]uint64{},
	}
}

// BeginLoad is called before a load reads rows; its stamp goes to
// AddLoaded, which must follow (with no rows when the load failed).
func (q *Queue) BeginLoad() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.loads[q.seq]++
	return q.seq
}

// AddLoaded schedules the rows of a load begun at stamp, except the clocks
// changed by the API since, and ends the load.
func (q *Queue) AddLoaded(stamp uint64, c Class, ds ...alarm.Due) {
	q.mu.Lock()
	changed := false
	for _, d := range ds {
		if seq, ok := q.changed[d.ID]; ok && seq > stamp {
			continue // read before a change that already placed it
		}
		if q.s.Add(d, c) {
			changed = true
		}
	}
	if q.loads[stamp]--; q.loads[stamp] <= 0 {
		delete(q.loads, stamp)
		q.forget()
	}
	q.mu.Unlock()
	if changed {
		q.signal()
	}
}

// ChangedSince reports whether the API changed clock id since stamp (of a
// load that still runs): the change's own offer placed it, and what the
// caller read or wrote before is older.
func (q *Queue) ChangedSince(stamp uint64, id int64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	seq, ok := q.changed[id]
	return ok && seq > stamp
}

// forget drops the changes no running load began before.
func (q *Queue) forget() {
	if len(q.loads) == 0 {
		clear(q.changed)
		q.log = q.log[:0]
		return
	}
	oldest := uint64(math.MaxUint64)
	for s := range q.loads {
		oldest = min(oldest, s)
	}
	n := 0
	for n < len(q.log) && q.log[n].seq <= oldest {
		if q.changed[q.log[n].id] == q.log[n].seq {
			delete(q.changed, q.log[n].id)
		}
		n++
	}
	if n > 0 {
		q.log = append(q.log[:0], q.log[n:]...)
	}
}

// Changed unschedules clocks whose rows the API just changed (moved,
// cancelled, paused), so that a load that read them before the change does
// not put them back; their new place, if any, is added after.
func (q *Queue) Changed(ids ...int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, id := range ids {
		q.s.Remove(id)
		if len(q.loads) > 0 {
			q.seq++
			q.changed[id] = q.seq
			q.log = append(q.log, change{q.seq, id})
		}
	}
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

// At is when a scheduled clock is due (false: it is not scheduled).
func (q *Queue) At(id int64) (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if e, ok := q.s.byID[id]; ok {
		return e.due.At, true
	}
	return time.Time{}, false
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
