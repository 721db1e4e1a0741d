package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/schedule"
)

// recurringClock creates a recurring clock (every 2 s) in a one-shard store
// and claims its first occurrence with token 7; it returns the claimed clock.
func recurringClock(t *testing.T, sp schedule.Spec) (*mysql.Store, alarm.Clock) {
	t.Helper()
	s, _ := oneShardStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	now := time.Now()
	in := alarm.CreateInput{Application: "app", BusinessID: "r-1", Schedule: &alarm.ScheduleInput{
		Every: &sp.Every, MaxOccurrences: &sp.MaxOccurrences}}
	if sp.Cron != "" {
		in.Schedule = &alarm.ScheduleInput{Cron: &sp.Cron, TimeZone: &sp.TimeZone}
	}
	n, err := in.Validate(now, alarm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	r := s.Create(ctx, []alarm.NewClock{n}, now)
	if r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	c := r[0].Clock
	if c.Schedule == nil || !c.RingAt.Equal(n.RingAt) {
		t.Fatalf("created %+v", c)
	}
	leases, err := s.AcquireLeases(ctx, "me", 1, time.Minute)
	if err != nil || len(leases) != 1 {
		t.Fatalf("acquire: %v %v", leases, err)
	}
	got, err := s.Claim(ctx, "me", leases, []int64{c.ID}, 7, c.RingAt.Add(time.Second), time.Now())
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	if got[0].Schedule == nil || got[0].Schedule.Every != sp.Every && sp.Cron == "" {
		t.Fatalf("claimed clock lost its schedule: %+v", got[0])
	}
	return s, got[0]
}

type historyOcc struct {
	Status       string `db:"status"`
	TargetRingAt int64  `db:"target_ring_at"`
	FinishTime   int64  `db:"finish_time"`
	Occurrences  int    `db:"occurrences"`
	OccurrenceOf *int64 `db:"occurrence_of"`
}

// The occurrence that rang moves the row on to the next one, in the same
// transaction as its history row; a write under a stale token changes
// nothing; the last occurrence finishes the clock, whose update_time stays
// after its last occurrence (its history key).
func TestAdvanceMovesOnAndKeepsHistory(t *testing.T) {
	s, c := recurringClock(t, schedule.Spec{Every: 2 * time.Second, MaxOccurrences: 2})
	ctx := context.Background()
	key := alarm.Key{Application: "app", BusinessID: "r-1"}
	first := c.RingAt
	at := first.Add(3 * time.Millisecond)
	a := alarm.AdvanceOf(c, alarm.StatusRung, at, at, "")
	if !a.Next.Equal(first.Add(2*time.Second)) || a.Occurrences != 1 {
		t.Fatalf("advance %+v", a)
	}
	// a stale token: nothing moves
	if err := s.Advance(ctx, []alarm.Advance{a}, []int64{8}, at); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, key); got.Status != alarm.StatusFiring {
		t.Fatalf("stale token moved the clock: %+v", got)
	}
	if err := s.Advance(ctx, []alarm.Advance{a}, []int64{7}, at); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != alarm.StatusPending || !got.RingAt.Equal(a.Next) || !got.NextTryAt.Equal(a.Next) ||
		got.Occurrences != 1 || got.Attempts != 0 || !got.RungAt.Equal(at.Truncate(time.Millisecond)) {
		t.Fatalf("after the first occurrence: %+v", got)
	}
	var hist []historyOcc
	if err := s.DB().Select(&hist, "SELECT status, target_ring_at, finish_time, occurrences, occurrence_of FROM clock_history WHERE id = ? ORDER BY finish_time", c.ID); err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || hist[0].Status != "rung" || hist[0].TargetRingAt != first.UnixMilli() ||
		hist[0].FinishTime != first.UnixMilli() || hist[0].OccurrenceOf == nil || *hist[0].OccurrenceOf != c.ID || hist[0].Occurrences != 1 {
		t.Fatalf("history %+v", hist)
	}
	// the second (last) occurrence: the clock finishes rung
	leases, err := s.AcquireLeases(ctx, "me", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Claim(ctx, "me", leases, []int64{c.ID}, 9, a.Next.Add(time.Second), time.Now())
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim 2: %v %v", claimed, err)
	}
	second := claimed[0]
	// rung in the millisecond of its occurrence: the finished row must still
	// not share its history key with the occurrence's row
	b := alarm.AdvanceOf(second, alarm.StatusRung, second.RingAt, second.RingAt, "")
	if !b.Next.IsZero() {
		t.Fatalf("max_occurrences 2 has a third: %+v", b)
	}
	if err := s.Advance(ctx, []alarm.Advance{b}, []int64{9}, second.RingAt); err != nil {
		t.Fatal(err)
	}
	got, _ = s.Get(ctx, key)
	if got.Status != alarm.StatusRung || got.Occurrences != 2 || !got.UpdatedAt.After(second.RingAt) {
		t.Fatalf("finished: %+v", got)
	}
	// the janitor's move to history then finds no key taken
	if _, _, err := s.MoveFinished(ctx, alarm.StatusRung, []int64{c.ID}, time.Now().Add(time.Hour), time.Now().Add(-time.Hour), true); err != nil {
		t.Fatalf("archive the finished recurring clock: %v", err)
	}
	arch, err := s.Get(ctx, key)
	if err != nil || !arch.Archived || arch.Schedule == nil || arch.Occurrences != 2 {
		t.Fatalf("archived: %+v %v", arch, err)
	}
}

// An occurrence given up (expired) is recorded and skipped; an occurrence
// rung again after a crash keeps one history row.
func TestAdvanceExpiredAndRepeated(t *testing.T) {
	s, c := recurringClock(t, schedule.Spec{Every: 2 * time.Second})
	ctx := context.Background()
	at := c.RingAt.Add(time.Second)
	a := alarm.AdvanceOf(c, alarm.StatusExpired, at, at, "occurrence_deadline passed")
	if err := s.Advance(ctx, []alarm.Advance{a}, []int64{7}, at); err != nil {
		t.Fatal(err)
	}
	got, _ := s.Get(ctx, alarm.Key{Application: "app", BusinessID: "r-1"})
	if got.Status != alarm.StatusPending || got.Occurrences != 0 || got.LastError == "" || !got.RungAt.IsZero() {
		t.Fatalf("after an expired occurrence: %+v", got)
	}
	var n int
	if err := s.DB().Get(&n, "SELECT COUNT(*) FROM clock_history WHERE id = ? AND status = 'expired'", c.ID); err != nil || n != 1 {
		t.Fatalf("expired occurrence rows: %d %v", n, err)
	}
}

func TestListRecurringFilterAndPause(t *testing.T) {
	s, c := recurringClock(t, schedule.Spec{Cron: "0 2 * * *", TimeZone: "Europe/Berlin"})
	ctx := context.Background()
	now := time.Now()
	r := s.Create(ctx, []alarm.NewClock{{Application: "app", BusinessID: "one", Payload: "{}", ContentType: "application/json", RingAt: now.Add(time.Hour)}}, now)
	if r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	yes, no := true, false
	for _, tt := range []struct {
		rec  *bool
		want []int64
	}{{&yes, []int64{c.ID}}, {&no, []int64{r[0].Clock.ID}}, {nil, []int64{r[0].Clock.ID, c.ID}}} {
		for _, app := range []string{"", "app"} {
			cs, err := s.List(ctx, alarm.ListQuery{Application: app, Recurring: tt.rec, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			var ids []int64
			for _, x := range cs {
				ids = append(ids, x.ID)
			}
			if len(ids) != len(tt.want) || ids[0] != tt.want[0] {
				t.Errorf("list app=%q recurring=%v: %v, want %v", app, tt.rec, ids, tt.want)
			}
		}
	}
	// pause needs the clock pending: it is firing (claimed) here
	key := alarm.Key{Application: "app", BusinessID: "r-1"}
	if _, err := s.Change(ctx, key, "pause", now, func(c alarm.Clock) (alarm.Clock, error) { return alarm.Pause(c, now) }); err == nil {
		t.Fatal("paused a firing clock")
	}
	if err := s.Unclaim(ctx, []int64{c.ID}, []int64{7}, now); err != nil {
		t.Fatal(err)
	}
	p, err := s.Change(ctx, key, "pause", now, func(c alarm.Clock) (alarm.Clock, error) { return alarm.Pause(c, now) })
	if err != nil || !p.Paused || !p.NextTryAt.Equal(alarm.FarFuture().Truncate(time.Millisecond)) {
		t.Fatalf("pause: %+v %v", p, err)
	}
	later := now.Add(48 * time.Hour)
	res, err := s.Change(ctx, key, "resume", later, func(c alarm.Clock) (alarm.Clock, error) { return alarm.Resume(c, later) })
	if err != nil || res.Paused || !res.RingAt.After(later) || res.RingAt.Sub(later) > 24*time.Hour {
		t.Fatalf("resume: %+v %v", res, err)
	}
}

// One Advance of several clocks gives each its own outcome: the values of
// one never leak into another's row (the statement joins a table of them).
func TestAdvanceSeveralClocksAtOnce(t *testing.T) {
	s, _ := oneShardStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	now := time.Now()
	every := 2 * time.Second
	var news []alarm.NewClock
	for i, maxOcc := range []int{0, 0, 1, 0} { // the third ends after one occurrence
		in := alarm.CreateInput{Application: "app", BusinessID: "m-" + string(rune('a'+i)), Schedule: &alarm.ScheduleInput{Every: &every}}
		if maxOcc > 0 {
			in.Schedule.MaxOccurrences = &maxOcc
		}
		n, err := in.Validate(now, alarm.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		news = append(news, n)
	}
	var ids []int64
	for _, r := range s.Create(ctx, news, now) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids = append(ids, r.Clock.ID)
	}
	leases, err := s.AcquireLeases(ctx, "me", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := s.Claim(ctx, "me", leases, ids, 7, now.Add(time.Hour), now)
	if err != nil || len(cs) != 4 {
		t.Fatalf("claim: %d %v", len(cs), err)
	}
	byID := map[int64]alarm.Clock{}
	for _, c := range cs {
		byID[c.ID] = c
	}
	at := now.Add(5 * time.Millisecond)
	rungA := alarm.AdvanceOf(byID[ids[0]], alarm.StatusRung, at, at, "")
	expB := alarm.AdvanceOf(byID[ids[1]], alarm.StatusExpired, at.Add(time.Millisecond), at, "deadline passed")
	endC := alarm.AdvanceOf(byID[ids[2]], alarm.StatusRung, at.Add(2*time.Millisecond), at, "")
	// d is not advanced: it stays firing
	if err := s.Advance(ctx, []alarm.Advance{endC, rungA, expB}, []int64{7}, at); err != nil {
		t.Fatal(err)
	}
	get := func(id int64) alarm.Clock {
		t.Helper()
		for _, c := range cs {
			if c.ID == id {
				got, err := s.Get(ctx, alarm.Key{Application: c.Application, BusinessID: c.BusinessID})
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
		}
		t.Fatalf("no clock %d", id)
		return alarm.Clock{}
	}
	a, b, c, d := get(ids[0]), get(ids[1]), get(ids[2]), get(ids[3])
	if a.Status != alarm.StatusPending || !a.RingAt.Equal(rungA.Next) || a.Occurrences != 1 || !a.RungAt.Equal(at.Truncate(time.Millisecond)) || a.LastError != "" || a.Attempts != 0 {
		t.Errorf("a (rang, goes on): %+v", a)
	}
	if b.Status != alarm.StatusPending || !b.RingAt.Equal(expB.Next) || b.Occurrences != 0 || !b.RungAt.IsZero() || b.LastError != "deadline passed" {
		t.Errorf("b (expired, goes on): %+v", b)
	}
	if c.Status != alarm.StatusRung || c.Occurrences != 1 || !c.RungAt.Equal(at.Add(2*time.Millisecond).Truncate(time.Millisecond)) || c.Attempts != 1 {
		t.Errorf("c (rang its last): %+v", c)
	}
	if d.Status != alarm.StatusFiring {
		t.Errorf("d (not advanced): %+v", d)
	}
	var hist []struct {
		ID     int64  `db:"id"`
		Status string `db:"status"`
		Rung   *int64 `db:"rung_at"`
	}
	if err := s.DB().Select(&hist, "SELECT id, status, rung_at FROM clock_history ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	if len(hist) != 3 || hist[0].ID != ids[0] || hist[0].Status != "rung" || hist[0].Rung == nil ||
		hist[1].ID != ids[1] || hist[1].Status != "expired" || hist[1].Rung != nil ||
		hist[2].ID != ids[2] || hist[2].Status != "rung" || hist[2].Rung == nil || *hist[2].Rung != at.Add(2*time.Millisecond).UnixMilli() {
		t.Errorf("history rows: %+v", hist)
	}
}
