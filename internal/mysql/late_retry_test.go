package mysql_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// identicalCounter counts the store's look-ups for identical clocks: only
// creates refused for the time now (CreateInput.Resolve's late) cost one.
type identicalCounter struct {
	*mysql.Store
	calls atomic.Int32
}

func (s *identicalCounter) Identical(ctx context.Context, clocks []alarm.NewClock, now time.Time) ([]*alarm.Clock, error) {
	s.calls.Add(1)
	return s.Store.Identical(ctx, clocks, now)
}

// lateService is a Service over a real store whose time is *now.
func lateService(t *testing.T, window time.Duration) (*alarm.Service, *identicalCounter, *sqlx.DB, *time.Time) {
	t.Helper()
	s, db := historyStore(t, mysql.StoreConfig{IdempotencyWindow: window})
	st := &identicalCounter{Store: s}
	now := new(time.Time)
	return alarm.NewService(st, nil, func() time.Time { return *now }, alarm.Limits{}, 0), st, db, now
}

func ptr[T any](v T) *T { return &v }

func createAt(t *testing.T, svc *alarm.Service, in alarm.CreateInput) alarm.CreateResult {
	t.Helper()
	return svc.Create(context.Background(), []alarm.CreateInput{in})[0]
}

func clockCount(t *testing.T, db *sqlx.DB) int {
	t.Helper()
	var n int
	if err := db.Get(&n, "SELECT (SELECT COUNT(*) FROM clock) + (SELECT COUNT(*) FROM clock_history)"); err != nil {
		t.Fatal(err)
	}
	return n
}

// SPEC: a create answers "200 + the existing clock when an identical one
// exists", and "an identical retry of the create that made it, soon after,
// answers 200 with it". A retry sent after a time the request names has
// passed (its latest_ring_at; for a delay, latest_ring_at before now +
// delay; a schedule's end, before the start derived from now or with no
// occurrence left) is invalid as a new clock, but its clock exists: it
// answers 200 with it, by the rule a retry before that time follows, and
// the refusal (400) only when no clock is identical. Before, every such
// retry answered 400, as if the request were wrong.
func TestIdenticalRetryAfterItsTimesPassed(t *testing.T) {
	t.Parallel()
	const window = 10 * time.Minute
	t0 := time.Date(2031, 3, 1, 10, 0, 0, 0, time.UTC)
	oneShot := func(id string) alarm.CreateInput {
		return alarm.CreateInput{Application: "order", BusinessID: id, Payload: ptr("p"),
			When:         alarm.When{At: ptr(t0.Add(300 * time.Millisecond)), AtSet: true},
			LatestRingAt: ptr(t0.Add(900 * time.Millisecond))}
	}
	byDelay := func(id string) alarm.CreateInput {
		return alarm.CreateInput{Application: "order", BusinessID: id, Payload: ptr("p"),
			When:         alarm.When{Delay: ptr(30 * time.Second), DelaySet: true},
			LatestRingAt: ptr(t0.Add(40 * time.Second))}
	}
	every := func(id string) alarm.CreateInput {
		return alarm.CreateInput{Application: "order", BusinessID: id, Payload: ptr("p"),
			Schedule: &alarm.ScheduleInput{Every: ptr(time.Second), End: ptr(t0.Add(1500 * time.Millisecond))}}
	}
	cron := func(id string) alarm.CreateInput {
		return alarm.CreateInput{Application: "order", BusinessID: id, Payload: ptr("p"),
			Schedule: &alarm.ScheduleInput{Cron: ptr("*/2 * * * * *"), End: ptr(t0.Add(5 * time.Second))}}
	}
	tests := []struct {
		name    string
		in      func(id string) alarm.CreateInput
		retryAt time.Duration // after the first create
		status  alarm.Status  // the clock's, by then ("" pending)
		refusal string        // what a create that is no retry hears
	}{
		{"latest_ring_at passed, clock expired", oneShot, 2 * time.Second, alarm.StatusExpired, "latest_ring_at: (2031-03-01T10:00:00.900Z) is already past"},
		{"latest_ring_at passed, clock still pending", oneShot, 2 * time.Second, "", "is already past"},
		{"delay: latest_ring_at before now + delay", byDelay, 15 * time.Second, "", "latest_ring_at: (2031-03-01T10:00:40.000Z) is before ring_at"},
		{"delay: latest_ring_at passed", byDelay, 2 * time.Minute, alarm.StatusExpired, "latest_ring_at: (2031-03-01T10:00:40.000Z) is before ring_at"},
		{"every: end passed", every, 2500 * time.Millisecond, alarm.StatusRung, "schedule.end: (2031-03-01T10:00:01.500Z) is already past"},
		{"cron: no occurrence left after now", cron, 8 * time.Second, alarm.StatusRung, "schedule: has no occurrence after now"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc, st, db, now := lateService(t, window)
			*now = t0
			first := createAt(t, svc, tt.in("k"))
			if first.Err != nil || !first.Created {
				t.Fatalf("first create: %+v", first)
			}
			if tt.status != "" {
				finish(t, db, first.Clock.ID, tt.status, t0.Add(time.Second))
			}
			*now = t0.Add(tt.retryAt)
			rows := clockCount(t, db)

			retry := createAt(t, svc, tt.in("k"))
			if retry.Err != nil || retry.Created || retry.Clock.ID != first.Clock.ID {
				t.Fatalf("identical retry %s later: created %v, clock %d, err %v; want 200 with clock %d",
					tt.retryAt, retry.Created, retry.Clock.ID, retry.Err, first.Clock.ID)
			}
			if want := tt.status; want != "" && retry.Clock.Status != want {
				t.Errorf("retry answered status %s, want %s", retry.Clock.Status, want)
			}
			// the same request for another key, or with other content, is
			// no retry: refused as before, and nothing is written
			other := tt.in("k")
			other.Payload = ptr("q")
			for name, in := range map[string]alarm.CreateInput{"another key": tt.in("other"), "other content": other} {
				res := createAt(t, svc, in)
				if !errors.Is(res.Err, alarm.ErrInvalid) || !strings.Contains(res.Err.Error(), tt.refusal) {
					t.Errorf("%s: %+v, want 400 %q", name, res, tt.refusal)
				}
			}
			if n := clockCount(t, db); n != rows {
				t.Errorf("%d clocks after the late creates, want %d: they must write nothing", n, rows)
			}
			if got := st.calls.Load(); got != 3 {
				t.Errorf("%d look-ups for identical clocks, want 3 (one per late create)", got)
			}
		})
	}
}

// The retry of a finished clock's create past the idempotency window is
// no retry (a create would set a new clock): its refusal stands. Within
// the window a retry also finds the clock after its key was re-armed, in
// history, as insertChecked does.
func TestLateRetryFollowsTheIdempotencyWindow(t *testing.T) {
	t.Parallel()
	const window = 10 * time.Minute
	t0 := time.Date(2031, 3, 2, 10, 0, 0, 0, time.UTC)
	svc, _, db, now := lateService(t, window)
	in := alarm.CreateInput{Application: "order", BusinessID: "k", Payload: ptr("p"),
		When: alarm.When{At: ptr(t0.Add(time.Second)), AtSet: true}, LatestRingAt: ptr(t0.Add(2 * time.Second))}
	*now = t0
	first := createAt(t, svc, in)
	if first.Err != nil || !first.Created {
		t.Fatalf("first create: %+v", first)
	}
	finish(t, db, first.Clock.ID, alarm.StatusRung, t0.Add(time.Second))

	// another create re-arms the key, and its clock is cancelled
	*now = t0.Add(5 * time.Second)
	b := in
	b.Payload, b.When.At, b.LatestRingAt = ptr("b"), ptr(t0.Add(time.Hour)), nil
	second := createAt(t, svc, b)
	if second.Err != nil || !second.Created {
		t.Fatalf("re-arming create: %+v", second)
	}
	if _, err := svc.Cancel(context.Background(), alarm.Key{Application: "order", BusinessID: "k"}); err != nil {
		t.Fatal(err)
	}
	*now = t0.Add(time.Minute)
	retry := createAt(t, svc, in)
	if retry.Err != nil || retry.Created || retry.Clock.ID != first.Clock.ID || !retry.Clock.Archived {
		t.Fatalf("late retry of the first create after the key was re-armed: %+v, want 200 with clock %d from history", retry, first.Clock.ID)
	}
	*now = t0.Add(window + time.Second)
	if res := createAt(t, svc, in); !errors.Is(res.Err, alarm.ErrInvalid) || !strings.Contains(res.Err.Error(), "is already past") {
		t.Errorf("the same request past the window: %+v, want 400 is already past", res)
	}
}

// A batch answers each late item by itself, in request order, beside
// valid items (one INSERT, as before) and invalid ones. Only late items
// cost a look-up: a batch of valid or malformed creates none.
func TestBatchLateItems(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2031, 3, 3, 10, 0, 0, 0, time.UTC)
	svc, st, db, now := lateService(t, 10*time.Minute)
	item := func(id string, latest time.Time) alarm.CreateInput {
		return alarm.CreateInput{Application: "order", BusinessID: id, Payload: ptr("p"),
			When: alarm.When{At: ptr(t0), AtSet: true}, LatestRingAt: ptr(latest)}
	}
	*now = t0
	for _, id := range []string{"a", "b"} {
		if res := createAt(t, svc, item(id, t0.Add(time.Second))); res.Err != nil || !res.Created {
			t.Fatalf("create %s: %+v", id, res)
		}
	}
	bad := item("c", t0.Add(time.Hour))
	bad.ContentType = ptr("")
	if res := svc.Create(context.Background(), []alarm.CreateInput{bad, item("d", t0.Add(time.Hour))}); res[0].Err == nil || res[1].Err != nil {
		t.Fatalf("malformed and valid: %+v", res)
	}
	if n := st.calls.Load(); n != 0 {
		t.Fatalf("valid and malformed creates looked up identical clocks %d times, want 0", n)
	}
	rows := clockCount(t, db)
	*now = t0.Add(time.Minute)
	res := svc.Create(context.Background(), []alarm.CreateInput{
		item("a", t0.Add(time.Second)),           // 0: retry of a: 200
		item("e", t0.Add(time.Hour)),             // 1: new: 201
		item("b", t0.Add(1500*time.Millisecond)), // 2: b with another latest_ring_at, past: 400
		bad,                                      // 3: malformed: 400
		item("b", t0.Add(time.Second)),           // 4: retry of b: 200
	})
	switch {
	case res[0].Err != nil || res[0].Created || res[0].Clock.BusinessID != "a":
		t.Errorf("item 0, retry of a: %+v", res[0])
	case res[1].Err != nil || !res[1].Created:
		t.Errorf("item 1, new: %+v", res[1])
	case !errors.Is(res[2].Err, alarm.ErrInvalid) || !strings.Contains(res[2].Err.Error(), "is already past"):
		t.Errorf("item 2, late and different: %+v", res[2])
	case !errors.Is(res[3].Err, alarm.ErrInvalid) || !strings.Contains(res[3].Err.Error(), "content_type"):
		t.Errorf("item 3, malformed: %+v", res[3])
	case res[4].Err != nil || res[4].Created || res[4].Clock.BusinessID != "b":
		t.Errorf("item 4, retry of b: %+v", res[4])
	}
	if n := clockCount(t, db); n != rows+1 {
		t.Errorf("%d clocks, want %d: the batch sets e only", n, rows+1)
	}
	if n := st.calls.Load(); n != 1 {
		t.Errorf("%d look-ups for the batch, want 1 for its late items", n)
	}
}
