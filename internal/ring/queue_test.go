package ring

import (
	"testing"
)

// Loads overlap (one per shard). A load's rows leave out the clocks the API
// changed after the load began, and only those; the queue remembers a
// change only while a load older than it runs, so its memory stays bounded
// by the changes made during one load.
func TestQueueLoadsLeaveOutClocksChangedSince(t *testing.T) {
	q := NewQueue()
	q.Changed(9) // no load runs: nothing to remember
	if len(q.changed) != 0 || len(q.log) != 0 {
		t.Fatalf("a change with no load running was remembered: %v", q.changed)
	}

	a := q.BeginLoad()
	q.Add(Live, due(1, 0, 100))
	q.Changed(1) // a PATCH commits while load a runs
	q.Add(Live, due(1, 0, 50))
	b := q.BeginLoad() // begins after the change
	q.Changed(2)

	q.AddLoaded(a, Live, due(1, 0, 100), due(2, 0, 200), due(3, 0, 300))
	if got := q.s.byID[1].due.At; !got.Equal(t0.Add(50e6)) {
		t.Errorf("load a put clock 1 back at its old time: t0+%v", got.Sub(t0))
	}
	if q.Has(2) {
		t.Error("load a added clock 2, changed while it ran")
	}
	if !q.Has(3) {
		t.Error("load a left out clock 3, never changed")
	}
	// only load b runs now: the change of clock 1 came before it
	if _, ok := q.changed[1]; ok || len(q.changed) != 1 || len(q.log) != 1 {
		t.Errorf("after load a: changes remembered %v (log %v), want only clock 2's", q.changed, q.log)
	}

	q.AddLoaded(b, Live, due(1, 0, 60), due(2, 0, 210))
	if got := q.s.byID[1].due.At; !got.Equal(t0.Add(60e6)) {
		t.Errorf("load b, begun after clock 1's change, was not taken: t0+%v", got.Sub(t0))
	}
	if q.Has(2) {
		t.Error("load b added clock 2, changed while it ran")
	}
	if len(q.changed) != 0 || len(q.log) != 0 || len(q.loads) != 0 {
		t.Errorf("no load runs, yet the queue remembers changes %v, loads %v", q.changed, q.loads)
	}

	// a failed load ends with no rows
	c := q.BeginLoad()
	q.Changed(3)
	q.AddLoaded(c, Live)
	if len(q.changed) != 0 || len(q.loads) != 0 || q.Has(3) {
		t.Errorf("after a failed load: changes %v, loads %v, clock 3 in memory %v", q.changed, q.loads, q.Has(3))
	}
}
