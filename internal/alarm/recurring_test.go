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
