package alarm

import (
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/schedule"
)

// A create that differs from a recurring clock caught ringing one of its
// occurrences answers 409 without promising that a create sets a new clock
// once it has rung: a recurring clock goes back to pending on its next
// occurrence (README, Recurring clocks), so such a retry answers 409 again;
// the way on is a PATCH or a cancel, once the occurrence has rung.
func TestConflictWithFiringRecurringClockDoesNotPromiseANewClock(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	sp := schedule.Spec{Every: time.Minute, Start: now, Misfire: schedule.MisfireSkip, CatchUpLimit: schedule.DefaultCatchUpLimit}
	ex := Clock{ID: 42, Application: "cart", BusinessID: "close-stale", Payload: "{}", ContentType: DefaultContentType,
		RingAt: now, NextTryAt: now, Status: StatusFiring, Schedule: &sp, CreatedAt: now}
	other := sp
	other.Every = 2 * time.Minute
	n := NewClock{Application: "cart", BusinessID: "close-stale", Payload: "{}", ContentType: DefaultContentType,
		Schedule: &other, StartGiven: true}
	res := AnswerExisting(n, ex)
	if res.Err == nil {
		t.Fatalf("a different schedule was taken as identical")
	}
	if msg := res.Err.Error(); strings.Contains(msg, "sets a new clock") {
		t.Errorf("409 for a recurring clock firing an occurrence: %q; but once that occurrence has rung the clock is "+
			"pending on its next one, and a create for the key answers 409 again (PATCH or cancel it instead)", msg)
	}
}
