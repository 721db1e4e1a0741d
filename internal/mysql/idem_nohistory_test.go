package mysql_test

import (
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// With history.keep 0 a re-arm keeps in clock_history only a clock that a
// retry may still be for (created within the window), and deletes the
// key's clocks that are past it: the history of a key re-armed again and
// again while its clock stays in clock does not grow.
func TestRearmWithoutHistoryKeepsOnlyClocksWithinTheWindow(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{IdempotencyWindow: 10 * time.Minute, NoHistory: true})
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	key := "application = 'order' AND business_id = 'o-1'"
	arm := func(payload string, at time.Time) alarm.Clock {
		t.Helper()
		r := createOne(t, s, alarm.NewClock{Application: "order", BusinessID: "o-1", Payload: payload, ContentType: "text/plain",
			RingAt: at.Add(time.Second)}, at)
		if r.Err != nil || !r.Created {
			t.Fatalf("create %s: %+v", payload, r)
		}
		finish(t, db, r.Clock.ID, alarm.StatusRung, at.Add(time.Second))
		return r.Clock
	}
	arm("A", t0)
	arm("B", t0.Add(20*time.Minute)) // A was created 20 min before: past the window
	if n := historyCount(t, db, key); n != 0 {
		t.Errorf("a clock re-armed 20 min after its creation (window 10 min) was kept in history: %d rows", n)
	}
	arm("C", t0.Add(21*time.Minute)) // B within the window: kept
	if n := historyCount(t, db, key); n != 1 {
		t.Errorf("a clock re-armed 1 min after its creation: %d rows in history, want 1", n)
	}
	arm("D", t0.Add(32*time.Minute)) // C past the window; B too, and it goes
	if n := historyCount(t, db, key); n != 0 {
		t.Errorf("a re-arm 12 min after the two clocks before it left %d of them in history, want 0", n)
	}
}
