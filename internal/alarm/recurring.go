package alarm

import (
	"errors"
	"fmt"
	"time"

	"github.com/clockd/clockd/internal/schedule"
)

// Recurring clocks: a clock with a schedule rings once per occurrence. The
// arithmetic (cron, intervals, daylight saving, misfire rules) is package
// schedule's; this file holds the rules of the API around it.

// farFuture is the next try of a paused recurring clock: the preloader
// never loads it, and a claim (next_try_time <= deadline) never takes it.
var farFuture = time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC)

// FarFuture is the next try a paused clock is parked at.
func FarFuture() time.Time { return farFuture }

// ScheduleInput is a schedule as decoded; nil pointers were absent.
type ScheduleInput struct {
	Cron               *string
	TimeZone           *string
	Every              *time.Duration
	Start, End         *time.Time
	MaxOccurrences     *int
	Misfire            *string
	CatchUpLimit       *int
	OccurrenceDeadline *time.Duration
}

// Recurring reports whether c rings on a schedule.
func (c Clock) Recurring() bool { return c.Schedule != nil }

// RingBy is the latest time c's current attempt may ring: latest_ring_at
// for a one-shot clock; for a recurring one, its occurrence's time plus
// the schedule's occurrence_deadline (zero: no limit), or for an
// occurrence replayed, latest_ring_at (the replay's time plus the
// deadline, set by the replay until the clock moves on).
func (c Clock) RingBy() time.Time {
	if c.Schedule == nil || !c.LatestRingAt.IsZero() {
		return c.LatestRingAt
	}
	if d := c.Schedule.OccurrenceDeadline; d > 0 {
		return c.RingAt.Add(d)
	}
	return time.Time{}
}

// scheduleErr turns a schedule validation error into a field error of the
// request ("schedule.cron").
func scheduleErr(err error) error {
	var se *schedule.Error
	if errors.As(err, &se) {
		if se.Field == "schedule" {
			return invalid("schedule", "%s", se.Message)
		}
		return invalid("schedule."+se.Field, "%s", se.Message)
	}
	return invalid("schedule", "%v", err)
}

// Spec validates the input at now and returns the schedule with its
// defaults: an interval without a start is anchored one interval after
// now (its first occurrence); startGiven tells whether start was named.
func (in ScheduleInput) Spec(now time.Time) (sp schedule.Spec, sc *schedule.Schedule, startGiven bool, err error) {
	sp, sc, startGiven, late, err := in.spec(now)
	if err == nil {
		err = late
	}
	return sp, sc, startGiven, err
}

// spec is Spec telling apart a refusal that depends on now (late: an end
// before the start derived from now, where a start derived earlier was
// not after it; sp is then the schedule with its defaults and sc nil)
// from the others (err).
func (in ScheduleInput) spec(now time.Time) (sp schedule.Spec, sc *schedule.Schedule, startGiven bool, late, err error) {
	if in.Cron != nil {
		sp.Cron = *in.Cron
	}
	if in.TimeZone != nil {
		sp.TimeZone = *in.TimeZone
	}
	if in.Every != nil {
		sp.Every = *in.Every
		if sp.Every <= 0 {
			return sp, nil, false, nil, invalid("schedule.every", "must be a positive duration such as \"30s\", got %s", sp.Every)
		}
	}
	if in.Start != nil {
		sp.Start, startGiven = CeilMS(*in.Start), true
	}
	if in.End != nil {
		sp.End = in.End.UTC().Truncate(time.Millisecond)
	}
	if in.MaxOccurrences != nil {
		sp.MaxOccurrences = *in.MaxOccurrences
	}
	if in.Misfire != nil {
		sp.Misfire = schedule.Misfire(*in.Misfire)
	}
	if in.CatchUpLimit != nil {
		sp.CatchUpLimit = *in.CatchUpLimit
		if sp.CatchUpLimit == 0 {
			return sp, nil, false, nil, invalid("schedule.catch_up_limit", "must be at least 1")
		}
	}
	if in.OccurrenceDeadline != nil {
		sp.OccurrenceDeadline = *in.OccurrenceDeadline
	}
	derived := sp.Every > 0 && sp.Start.IsZero()
	if derived {
		sp.Start = CeilMS(now.Add(sp.Every))
	}
	sc, err = schedule.Parse(sp)
	if err == nil {
		return sc.Spec(), sc, startGiven, nil, nil
	}
	var se *schedule.Error
	endErr := errors.As(err, &se) && se.Field == "end"
	err = scheduleErr(err)
	if derived && !sp.End.IsZero() && sp.End.Before(sp.Start) {
		if endErr {
			// "is before start" would name a start the request never gave
			err = endBeforeFirst(sp.End, sp.Start, now)
		}
		// The end is before the start derived from now: a create an
		// interval earlier had a start before it. Late, when the rest of
		// the schedule is valid: parsed with a start that is not after
		// the end, it is.
		alt := sp
		alt.Start = sp.End
		if asc, aerr := schedule.Parse(alt); aerr == nil {
			full := asc.Spec()
			full.Start = sp.Start
			return full, nil, false, err, nil
		}
	}
	return sp, nil, false, nil, err
}

// endBeforeFirst refuses the end of an interval without a start, which
// comes before its first occurrence, first (one interval after now).
func endBeforeFirst(end, first, now time.Time) error {
	if end.Before(now) {
		return invalid("schedule.end", "(%s) is already past", fmtTime(end))
	}
	return invalid("schedule.end", "(%s) is before the first occurrence, %s: one interval (every) after now, as no start is given",
		fmtTime(end), fmtTime(first))
}

// validateRecurring fills in n from a create's schedule: its first
// occurrence is its ring time. Refusals that depend on now are late (see
// CreateInput.Resolve).
func (in CreateInput) validateRecurring(n NewClock, now time.Time) (_ NewClock, late, err error) {
	if in.When.AtSet || in.When.DelaySet {
		return NewClock{}, nil, invalid("schedule", "give either schedule (recurring) or ring_at/delay (one-shot), not both")
	}
	if in.LatestRingAt != nil {
		return NewClock{}, nil, invalid("latest_ring_at", "applies to one-shot clocks; a recurring clock bounds each occurrence with schedule.occurrence_deadline and ends with schedule.end")
	}
	sp, sc, given, late, err := in.Schedule.spec(now)
	if err != nil {
		return NewClock{}, nil, err
	}
	n.Schedule, n.StartGiven = &sp, given
	if late != nil {
		return n, late, nil
	}
	first, ok := sc.First(now)
	if !ok {
		// end passed, or max(start, now) is past the last occurrence (a
		// schedule that never had one is late too: no clock is identical)
		return n, invalid("schedule", "has no occurrence after now (%s): check end and the expression", fmtTime(now)), nil
	}
	n.RingAt = first
	return n, nil, nil
}

// sameSchedule reports whether a create's schedule is the existing clock's
// (its start compared only when the create named one).
func sameSchedule(n, c *schedule.Spec, startGiven bool) bool {
	if n == nil || c == nil {
		return n == c
	}
	a, b := *n, *c
	if !startGiven {
		a.Start, b.Start = time.Time{}, time.Time{}
	}
	return a.Cron == b.Cron && a.TimeZone == b.TimeZone && a.Every == b.Every && a.Start.Equal(b.Start) &&
		a.End.Equal(b.End) && a.MaxOccurrences == b.MaxOccurrences && a.Misfire == b.Misfire &&
		a.CatchUpLimit == b.CatchUpLimit && a.OccurrenceDeadline == b.OccurrenceDeadline
}

// parsed returns c's schedule, parsed. A row clockd wrote is valid; one
// changed behind its back may not be.
func (c Clock) parsed() (*schedule.Schedule, error) {
	sc, err := schedule.Parse(*c.Schedule)
	if err != nil {
		return nil, fmt.Errorf("clock %d: stored schedule: %w", c.ID, err)
	}
	return sc, nil
}

// NextOccurrences lists up to n occurrences of a pending recurring clock
// at now (none for a paused or finished clock): its current one, then
// those that ring after it. When the current one is overdue, the ones
// after it that are past already are missed and follow the misfire rule,
// as when it finishes now: skip lists none of them (they never ring),
// catch_up those it rings.
func (c Clock) NextOccurrences(now time.Time, n int) []time.Time {
	if c.Schedule == nil || c.Paused || c.Status.Finished() {
		return nil
	}
	sc, err := c.parsed()
	if err != nil {
		return nil
	}
	if m := c.Schedule.MaxOccurrences; m > 0 {
		n = min(n, m-c.Occurrences) // the current one and those left after it
	}
	if n <= 0 {
		return nil
	}
	out := []time.Time{c.RingAt}
	if n == 1 {
		return out
	}
	// the missed ones After picks are all those after its pick (the latest
	// catch_up_limit, not past their deadline): the schedule goes on from it
	if next, ok := sc.After(c.RingAt, now, c.Occurrences+1); ok {
		out = append(out, sc.Upcoming(next, n-1)...)
	}
	return out
}

// Advance is what becomes of a recurring clock after its current
// occurrence finished at now (rang, expired or died), given the
// occurrences that have rung (the current one included if it rang): its
// next occurrence, due at once when missed, or the end of the clock.
type Advance struct {
	ID          int64
	Shard       int
	Occurrence  time.Time // the occurrence that finished
	Status      Status    // how it finished: rung, expired or dead
	At          time.Time // when (the broker's confirm, for rung)
	Error       string    // why it did not ring
	Occurrences int       // occurrences rung, this one included
	// Next is the next occurrence (zero: none; the clock finishes with
	// Status); NextTryAt when it is first tried.
	Next      time.Time
	NextTryAt time.Time
}

// AdvanceOf decides a recurring clock's next occurrence after its current
// one finished with status st at `at` (the misfire rules apply from now).
func AdvanceOf(c Clock, st Status, at, now time.Time, errText string) Advance {
	a := Advance{ID: c.ID, Shard: c.Shard, Occurrence: c.RingAt, Status: st, At: at, Error: errText, Occurrences: c.Occurrences}
	if st == StatusRung {
		a.Occurrences++
	}
	sc, err := c.parsed()
	if err != nil {
		a.Error = TrimError(err.Error())
		if a.Status == StatusRung {
			a.Status = StatusDead
		}
		return a
	}
	if next, ok := sc.After(c.RingAt, now, a.Occurrences); ok {
		a.Next, a.NextTryAt = next, DueAt(next, now)
	}
	return a
}

// ScheduleChange applies a schedule patch to a recurring clock at now: the
// current occurrence becomes the new schedule's first from now.
func (p PatchInput) applySchedule(c Clock, now time.Time) (Clock, error) {
	if c.Schedule == nil {
		return Clock{}, invalid("schedule", "clock %s/%s is one-shot: a schedule is given when a clock is created (cancel it and create a recurring one)", c.Application, c.BusinessID)
	}
	sp, sc, _, err := p.Schedule.Spec(now)
	if err != nil {
		return Clock{}, err
	}
	first, ok := sc.First(now)
	if !ok {
		return Clock{}, invalid("schedule", "has no occurrence after now (%s): check end and the expression", fmtTime(now))
	}
	// the occurrences rung count on (as for Resume): a max_occurrences they
	// reach leaves none to ring
	if sp.MaxOccurrences > 0 && c.Occurrences >= sp.MaxOccurrences {
		return Clock{}, &ConflictError{Clock: c, Message: fmt.Sprintf(
			"clock %s/%s has rung %d occurrences already: max_occurrences must be more than that (or cancel the clock)",
			c.Application, c.BusinessID, c.Occurrences)}
	}
	c.Schedule, c.RingAt, c.Attempts = &sp, first, 0
	c.LatestRingAt, c.ReplayedAttempts = time.Time{}, 0 // a new occurrence: a replay's deadline and attempts are not its
	c.NextTryAt = DueAt(first, now)
	if c.Paused {
		c.NextTryAt = farFuture
	}
	return c, nil
}

// Pause parks a pending recurring clock: no occurrence rings until Resume.
func Pause(c Clock, now time.Time) (Clock, error) {
	if c.Schedule == nil {
		return Clock{}, &ConflictError{Clock: c, Message: fmt.Sprintf("clock %s/%s is one-shot: only a recurring clock can be paused", c.Application, c.BusinessID)}
	}
	if c.Paused {
		return Clock{}, &ConflictError{Clock: c, Message: fmt.Sprintf("clock %s/%s is paused already", c.Application, c.BusinessID)}
	}
	c.Paused, c.NextTryAt, c.UpdatedAt = true, farFuture, now
	return c, nil
}

// Resume lets a paused recurring clock ring again, from its first
// occurrence after now: the occurrences of the pause are not rung (no
// misfire rule applies to them).
func Resume(c Clock, now time.Time) (Clock, error) {
	if c.Schedule == nil || !c.Paused {
		return Clock{}, &ConflictError{Clock: c, Message: fmt.Sprintf("clock %s/%s is not paused", c.Application, c.BusinessID)}
	}
	sc, err := c.parsed()
	if err != nil {
		return Clock{}, err
	}
	first, ok := sc.First(now)
	if !ok {
		return Clock{}, &ConflictError{Clock: c, Message: fmt.Sprintf("clock %s/%s has no occurrence left after now (schedule end %s): cancel it", c.Application, c.BusinessID, fmtTime(c.Schedule.End))}
	}
	if c.Schedule.MaxOccurrences > 0 && c.Occurrences >= c.Schedule.MaxOccurrences {
		return Clock{}, &ConflictError{Clock: c, Message: fmt.Sprintf("clock %s/%s has rung its %d occurrences: cancel it", c.Application, c.BusinessID, c.Occurrences)}
	}
	c.Paused, c.RingAt, c.Attempts, c.NextTryAt, c.UpdatedAt = false, first, 0, DueAt(first, now), now
	c.LatestRingAt, c.ReplayedAttempts = time.Time{}, 0 // a new occurrence, as for a PATCH
	return c, nil
}
