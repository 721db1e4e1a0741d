package alarm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/schedule"
)

// A PATCH of the schedule keeps the occurrences already rung (as Resume
// does): a max_occurrences they reach is refused with 409 and says what
// to do, instead of answering 200 and ringing one occurrence past it. One
// above them is taken.
func TestPatchScheduleMaxOccurrencesCountsThoseRung(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	sp := schedule.MustParse(schedule.Spec{Every: time.Minute, Start: now.Add(-10 * time.Minute), MaxOccurrences: 5}).Spec()
	c := Clock{ID: 1, Application: "app", BusinessID: "b", Status: StatusPending, Schedule: &sp,
		Occurrences: 3, RingAt: now.Add(time.Minute), NextTryAt: now.Add(time.Minute)}
	every := time.Minute
	for _, n := range []int{2, 3} {
		p := PatchInput{Schedule: &ScheduleInput{Every: &every, MaxOccurrences: &n}}
		_, err := p.Apply(c, now, Limits{})
		if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "rung 3 occurrences already") {
			t.Errorf("max_occurrences %d after 3 rung: %v, want a 409 that says so", n, err)
		}
	}
	n := 4
	p := PatchInput{Schedule: &ScheduleInput{Every: &every, MaxOccurrences: &n}}
	got, err := p.Apply(c, now, Limits{})
	if err != nil {
		t.Fatalf("max_occurrences 4 after 3 rung: %v", err)
	}
	if a := AdvanceOf(got, StatusRung, got.RingAt, got.RingAt, ""); a.Occurrences != 4 || !a.Next.IsZero() {
		t.Errorf("after the next ring: occurrences %d, next %v; want 4 and the clock finished", a.Occurrences, a.Next)
	}
}

// RingBy of a recurring clock: its occurrence's time plus the deadline,
// or, for an occurrence replayed, latest_ring_at (the replay's time plus
// the deadline); a PATCH of the schedule or a resume starts a new
// occurrence, without the replay's deadline or attempts.
func TestRingByOfAReplayedOccurrence(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	sp := schedule.MustParse(schedule.Spec{Every: time.Minute, Start: now.Add(-10 * time.Minute), OccurrenceDeadline: time.Minute}).Spec()
	c := Clock{ID: 1, Application: "app", BusinessID: "b", Status: StatusPending, Schedule: &sp,
		RingAt: now.Add(-5 * time.Minute), NextTryAt: now}
	if got, want := c.RingBy(), now.Add(-4*time.Minute); !got.Equal(want) {
		t.Errorf("RingBy %v, want the occurrence's time plus the deadline %v", got, want)
	}
	c.LatestRingAt, c.ReplayedAttempts = now.Add(time.Minute), 3 // as Store.Replay leaves it
	if got := c.RingBy(); !got.Equal(now.Add(time.Minute)) {
		t.Errorf("RingBy of the replayed occurrence %v, want the replay's deadline %v", got, now.Add(time.Minute))
	}
	every := time.Minute
	p := PatchInput{Schedule: &ScheduleInput{Every: &every}}
	got, err := p.Apply(c, now, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !got.LatestRingAt.IsZero() || got.ReplayedAttempts != 0 {
		t.Errorf("after a PATCH of the schedule: latest_ring_at %v, replayed attempts %d; want none", got.LatestRingAt, got.ReplayedAttempts)
	}
	c.Paused = true
	got, err = Resume(c, now)
	if err != nil {
		t.Fatal(err)
	}
	if !got.LatestRingAt.IsZero() || got.ReplayedAttempts != 0 {
		t.Errorf("after a resume: latest_ring_at %v, replayed attempts %d; want none", got.LatestRingAt, got.ReplayedAttempts)
	}
}

// NextOccurrences at now lists what rings: the current occurrence, then,
// when it is overdue, what the misfire rule makes of the missed ones after
// it (skip: none; catch_up: the latest catch_up_limit), then the schedule
// after now; max_occurrences caps the list. An occurrence on time lists
// the schedule from it.
func TestNextOccurrencesFollowTheMisfireRule(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 30, 0, time.UTC)
	start := now.Add(-time.Hour).Truncate(time.Minute)
	at := func(min int) time.Time { return now.Truncate(time.Minute).Add(time.Duration(min) * time.Minute) }
	clock := func(sp schedule.Spec, ringAt time.Time, occurrences int) Clock {
		sp = schedule.MustParse(sp).Spec()
		return Clock{ID: 1, Status: StatusPending, Schedule: &sp, RingAt: ringAt, NextTryAt: ringAt, Occurrences: occurrences}
	}
	tests := []struct {
		name string
		c    Clock
		want []time.Time
	}{
		{"on time", clock(schedule.Spec{Every: time.Minute, Start: start}, at(1), 0),
			[]time.Time{at(1), at(2), at(3), at(4), at(5)}},
		{"overdue, skip", clock(schedule.Spec{Every: time.Minute, Start: start}, at(-10), 0),
			[]time.Time{at(-10), at(1), at(2), at(3), at(4)}},
		{"overdue, catch_up 2", clock(schedule.Spec{Every: time.Minute, Start: start, Misfire: schedule.MisfireCatchUp, CatchUpLimit: 2}, at(-10), 0),
			[]time.Time{at(-10), at(-1), at(0), at(1), at(2)}},
		{"overdue, 2 occurrences left", clock(schedule.Spec{Every: time.Minute, Start: start, MaxOccurrences: 5}, at(-10), 3),
			[]time.Time{at(-10), at(1)}},
		{"overdue, the last one", clock(schedule.Spec{Every: time.Minute, Start: start, MaxOccurrences: 5}, at(-10), 4),
			[]time.Time{at(-10)}},
	}
	for _, tt := range tests {
		got := tt.c.NextOccurrences(now, 5)
		if len(got) != len(tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			if !got[i].Equal(tt.want[i]) {
				t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
				break
			}
		}
	}
}
