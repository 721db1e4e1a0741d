package ring

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

var t0 = time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)

func due(id int64, shard int, ms int) alarm.Due {
	return alarm.Due{ID: id, Shard: shard, At: t0.Add(time.Duration(ms) * time.Millisecond)}
}

func ids(ds []alarm.Due) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func TestScheduleOrder(t *testing.T) {
	tests := []struct {
		name string
		add  []alarm.Due
		want []int64
	}{
		{"by time", []alarm.Due{due(1, 0, 30), due(2, 0, 10), due(3, 0, 20)}, []int64{2, 3, 1}},
		{"ties by id", []alarm.Due{due(9, 0, 10), due(3, 1, 10), due(5, 2, 10), due(1, 0, 20)}, []int64{3, 5, 9, 1}},
		{"same ms, ids far apart", []alarm.Due{due(1<<40, 0, 0), due(7, 0, 0), due(1<<20, 0, 0)}, []int64{7, 1 << 20, 1 << 40}},
		{"past and future", []alarm.Due{due(1, 0, 5000), due(2, 0, -5000), due(3, 0, 0)}, []int64{2, 3, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSchedule()
			for _, d := range tt.add {
				s.Add(d, Live)
			}
			if got := ids(s.PopDue(t0.Add(time.Hour), 100)); !slices.Equal(got, tt.want) {
				t.Errorf("order %v, want %v", got, tt.want)
			}
			if s.Len() != 0 {
				t.Errorf("Len %d after popping everything", s.Len())
			}
		})
	}
}

func TestScheduleOrderRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := NewSchedule()
	var all []alarm.Due
	for i := range 2000 {
		d := due(int64(i+1), r.IntN(8), r.IntN(50)) // many ties
		all = append(all, d)
		s.Add(d, Class(r.IntN(2)))
	}
	// moves and removals keep the heaps consistent
	for i := range 500 {
		id := int64(r.IntN(2000) + 1)
		if i%2 == 0 {
			if s.Remove(id) {
				all = slices.DeleteFunc(all, func(d alarm.Due) bool { return d.ID == id })
			}
			continue
		}
		if !s.Has(id) {
			continue
		}
		at := r.IntN(50)
		for k := range all {
			if all[k].ID == id {
				all[k].At = t0.Add(time.Duration(at) * time.Millisecond)
				s.Add(all[k], Class(r.IntN(2)))
			}
		}
	}
	slices.SortFunc(all, func(a, b alarm.Due) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
	// pop one millisecond at a time: within it, order by id
	var got []alarm.Due
	for until := 0; until < 50; until++ {
		batch := s.PopDue(t0.Add(time.Duration(until)*time.Millisecond), 1<<20)
		slices.SortFunc(batch, func(a, b alarm.Due) int { return int(a.ID - b.ID) })
		got = append(got, batch...)
	}
	if len(got) != len(all) {
		t.Fatalf("popped %d, want %d", len(got), len(all))
	}
	for i := range got {
		if got[i] != all[i] {
			t.Fatalf("position %d: got %+v, want %+v", i, got[i], all[i])
		}
	}
}

func TestScheduleAddMoves(t *testing.T) {
	s := NewSchedule()
	steps := []struct {
		name    string
		d       alarm.Due
		c       Class
		changed bool // earliest deadline moved earlier (or first entry)
		order   []int64
	}{
		{"first entry", due(1, 0, 50), Live, true, []int64{1}},
		{"later entry", due(2, 0, 80), Live, false, []int64{1, 2}},
		{"earlier entry", due(3, 0, 20), Live, true, []int64{3, 1, 2}},
		{"move later", due(3, 0, 90), Live, false, []int64{1, 2, 3}},
		{"move earlier", due(2, 0, 10), Live, true, []int64{2, 1, 3}},
		{"same time again", due(2, 0, 10), Live, false, []int64{2, 1, 3}},
		{"move to backlog", due(1, 0, 5), Backlog, true, []int64{1, 2, 3}},
		{"move back to live, later", due(1, 0, 60), Live, false, []int64{2, 1, 3}},
	}
	for _, st := range steps {
		if got := s.Add(st.d, st.c); got != st.changed {
			t.Errorf("%s: Add reported %v, want %v", st.name, got, st.changed)
		}
		if s.Len() != len(st.order) {
			t.Errorf("%s: Len %d, want %d", st.name, s.Len(), len(st.order))
		}
		// look without consuming: a copy of the schedule
		c := NewSchedule()
		for _, c2 := range []Class{Live, Backlog} {
			for _, e := range s.heaps[c2] {
				c.Add(e.due, Live)
			}
		}
		if got := ids(c.PopDue(t0.Add(time.Hour), 100)); !slices.Equal(got, st.order) {
			t.Errorf("%s: order %v, want %v", st.name, got, st.order)
		}
	}
	if s.Count(0, Live) != 3 || s.Count(0, Backlog) != 0 {
		t.Errorf("counts live %d backlog %d, want 3 and 0", s.Count(0, Live), s.Count(0, Backlog))
	}
}

func TestScheduleRemoveDropShardCounts(t *testing.T) {
	s := NewSchedule()
	s.Add(due(1, 0, 10), Live)
	s.Add(due(2, 1, 20), Live)
	s.Add(due(3, 1, -20), Backlog)
	s.Add(due(4, 2, 30), Live)
	s.Add(due(5, 1, 40), Live)
	s.Add(due(6, 2, -10), Backlog)

	counts := func() [3][2]int {
		var c [3][2]int
		for sh := range 3 {
			c[sh] = [2]int{s.Count(sh, Live), s.Count(sh, Backlog)}
		}
		return c
	}
	if got, want := counts(), [3][2]int{{1, 0}, {2, 1}, {1, 1}}; got != want {
		t.Fatalf("counts %v, want %v", got, want)
	}
	if !s.Remove(4) || s.Remove(4) || s.Remove(99) {
		t.Error("Remove must report true once for a scheduled clock, false otherwise")
	}
	if s.Has(4) || s.Len() != 5 {
		t.Errorf("after Remove: Has(4)=%v Len=%d", s.Has(4), s.Len())
	}
	if got := s.DropShard(1); got != 3 {
		t.Errorf("DropShard(1) dropped %d, want 3", got)
	}
	if got := s.DropShard(1); got != 0 {
		t.Errorf("DropShard(1) again dropped %d, want 0", got)
	}
	if got := s.DropShard(7); got != 0 {
		t.Errorf("DropShard of an unknown shard dropped %d", got)
	}
	if got, want := counts(), [3][2]int{{1, 0}, {0, 0}, {0, 1}}; got != want {
		t.Errorf("counts after drop %v, want %v", got, want)
	}
	if len(s.counts) != 2 {
		t.Errorf("empty shards must leave the count map: %v", s.counts)
	}
	for _, id := range []int64{2, 3, 5} {
		if s.Has(id) {
			t.Errorf("clock %d of the dropped shard is still scheduled", id)
		}
	}
	if at, ok := s.Earliest(); !ok || !at.Equal(t0.Add(-10*time.Millisecond)) {
		t.Errorf("Earliest %v %v, want the backlog entry at -10ms", at, ok)
	}
	if got := ids(s.PopDue(t0.Add(time.Hour), 10)); !slices.Equal(got, []int64{1, 6}) {
		t.Errorf("remaining %v, want [1 6] (live first)", got)
	}
	if _, ok := s.Earliest(); ok || s.Len() != 0 {
		t.Errorf("schedule not empty: Len %d", s.Len())
	}
}

func TestSchedulePopDuePriority(t *testing.T) {
	tests := []struct {
		name          string
		live, backlog int // due entries of each class
		max           int
		wantLive      int
		wantBacklog   int
	}{
		{"only live", 10, 0, 8, 8, 0},
		{"only backlog", 0, 10, 8, 0, 8},
		{"both: a quarter kept for the backlog", 10, 10, 8, 6, 2},
		{"few live: backlog takes the rest", 2, 10, 8, 2, 6},
		{"few backlog: live takes the rest", 10, 1, 8, 7, 1},
		{"batch of 500", 1000, 1000, 500, 375, 125},
		{"batch of 4", 10, 10, 4, 3, 1},
		{"batch of 1 goes to live", 10, 10, 1, 1, 0},
		{"everything fits", 3, 4, 100, 3, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSchedule()
			id := int64(0)
			for i := range tt.live {
				id++
				s.Add(due(id, 0, i), Live)
			}
			for i := range tt.backlog {
				id++
				s.Add(due(id, 1, -100000+i), Backlog) // overdue: earlier than every live one
			}
			got := s.PopDue(t0.Add(time.Hour), tt.max)
			var nl, nb int
			for _, d := range got {
				if d.Shard == 0 {
					nl++
				} else {
					nb++
				}
			}
			if nl != tt.wantLive || nb != tt.wantBacklog {
				t.Errorf("popped %d live and %d backlog, want %d and %d", nl, nb, tt.wantLive, tt.wantBacklog)
			}
			// within a class, the earliest go first
			for i := 1; i < len(got); i++ {
				if got[i].Shard == got[i-1].Shard && got[i].At.Before(got[i-1].At) {
					t.Errorf("out of order within a class: %v before %v", got[i-1], got[i])
				}
			}
			if s.Len() != tt.live+tt.backlog-len(got) || s.Count(0, Live)+s.Count(1, Backlog) != s.Len() {
				t.Errorf("Len %d, counts %d+%d after popping %d", s.Len(), s.Count(0, Live), s.Count(1, Backlog), len(got))
			}
		})
	}
}

func TestSchedulePopDueUntil(t *testing.T) {
	s := NewSchedule()
	s.Add(due(1, 0, 0), Live)
	s.Add(due(2, 0, 100), Live)
	s.Add(due(3, 0, 101), Live)
	s.Add(due(4, 0, -5), Backlog)
	s.Add(due(5, 0, 200), Backlog) // a backlog entry not due yet stays
	if got := s.PopDue(t0.Add(-6*time.Millisecond), 10); len(got) != 0 {
		t.Errorf("nothing is due 6ms before: got %v", got)
	}
	if got := ids(s.PopDue(t0.Add(100*time.Millisecond), 10)); !slices.Equal(got, []int64{1, 2, 4}) {
		t.Errorf("due at +100ms (inclusive): %v, want [1 2 4]", got)
	}
	if got := s.NotDue(t0.Add(100 * time.Millisecond)); got != 2 {
		t.Errorf("NotDue %d, want 2", got)
	}
	if got := s.NotDue(t0.Add(101 * time.Millisecond)); got != 1 {
		t.Errorf("NotDue at +101ms %d, want 1 (due at exactly t is due)", got)
	}
	if got := s.NotDue(t0.Add(time.Hour)); got != 0 {
		t.Errorf("NotDue in an hour %d", got)
	}
	if at, _ := s.Earliest(); !at.Equal(t0.Add(101 * time.Millisecond)) {
		t.Errorf("Earliest %v", at)
	}
}

func TestQueueWake(t *testing.T) {
	q := NewQueue()
	woke := func() bool {
		select {
		case <-q.Wake():
			return true
		default:
			return false
		}
	}
	steps := []struct {
		name string
		do   func()
		want bool
	}{
		{"first clock", func() { q.Add(Live, due(1, 0, 100)) }, true},
		{"a later clock", func() { q.Add(Live, due(2, 0, 200)) }, false},
		{"an earlier clock", func() { q.Add(Live, due(3, 0, 50)) }, true},
		{"an earlier backlog clock", func() { q.Add(Backlog, due(4, 0, -50)) }, true},
		{"several, one earlier", func() { q.Add(Live, due(5, 0, 300), due(6, 0, -60), due(7, 0, 400)) }, true},
		{"remove", func() { q.Remove(6, 4) }, false},
		{"drop a shard", func() { q.DropShard(0) }, false},
		{"a clock after the queue emptied", func() { q.Add(Live, due(8, 1, 999)) }, true},
	}
	for _, st := range steps {
		st.do()
		if got := woke(); got != st.want {
			t.Errorf("%s: woke %v, want %v", st.name, got, st.want)
		}
	}
	if q.Len() != 1 || !q.Has(8) || q.Count(1, Live) != 1 || q.NotDue(t0) != 1 {
		t.Errorf("Len %d Has(8) %v Count %d NotDue %d", q.Len(), q.Has(8), q.Count(1, Live), q.NotDue(t0))
	}
}

func TestDueAtLeast(t *testing.T) {
	s := NewSchedule()
	for i := range 10 {
		s.Add(alarm.Due{ID: int64(i + 1), At: t0.Add(time.Duration(i) * time.Second)}, Live)
	}
	s.Add(alarm.Due{ID: 100, At: t0.Add(-time.Hour)}, Backlog)
	tests := []struct {
		until time.Duration
		n     int
		want  bool
	}{
		{-2 * time.Hour, 1, false},
		{-time.Hour, 1, true}, // the backlog entry
		{0, 2, true},          // backlog + the first live one
		{0, 3, false},
		{4500 * time.Millisecond, 6, true},
		{4500 * time.Millisecond, 7, false},
		{time.Hour, 11, true},
		{time.Hour, 12, false},
	}
	for _, tt := range tests {
		if got := s.DueAtLeast(t0.Add(tt.until), tt.n); got != tt.want {
			t.Errorf("DueAtLeast(t0%+v, %d) = %v, want %v", tt.until, tt.n, got, tt.want)
		}
	}
}

// BenchmarkSchedulePopAdd is the schedule's work in a busy second with
// 200,000 clocks preloaded: pop the 500 due first, load 500 more later.
func BenchmarkSchedulePopAdd(b *testing.B) {
	s := NewSchedule()
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200_000
	next := int64(0)
	add := func() {
		next++
		s.Add(alarm.Due{ID: next, Shard: int(next % 8), At: t0.Add(time.Duration(rng.Int64N(int64(20 * time.Second))))}, Live)
	}
	for range n {
		add()
	}
	b.ResetTimer()
	for b.Loop() {
		for _, d := range s.PopDue(t0.Add(time.Hour), 500) {
			_ = d
			add()
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*500), "ns/clock")
}
