// Package schedule is the time arithmetic of recurring clocks: it parses a
// schedule (a cron expression in a time zone, or a fixed interval, bounded
// by start, end and a most number of occurrences) and answers "when is the
// next occurrence", including the misfire rules that apply after
// occurrences were missed. It is pure: no I/O, no clock of its own (every
// call is told "now"), so it is tested with fixed times.
//
// Cron expressions are parsed by github.com/robfig/cron/v3; this package
// adds what it does not do: daylight saving rules (see Next), misfire rules
// (see After), bounds and validation with messages an API can answer.
package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/clockd/clockd/internal/quote"
)

// Misfire says what happens when occurrences were missed (clockd or the
// broker down, an occurrence still failing when the next came due).
type Misfire string

// The misfire rules.
const (
	// MisfireSkip rings the pending occurrence once, late, then continues
	// from the first occurrence after now: the missed ones are skipped.
	MisfireSkip Misfire = "skip"
	// MisfireCatchUp rings each missed occurrence, one after another, at
	// most CatchUpLimit of them (the latest ones).
	MisfireCatchUp Misfire = "catch_up"
)

// DefaultCatchUpLimit is Spec.CatchUpLimit when not given.
const DefaultCatchUpLimit = 10

// MaxCatchUpLimit bounds Spec.CatchUpLimit.
const MaxCatchUpLimit = 10_000

// MinEvery is the shortest interval: clockd stores times in milliseconds
// and rings each occurrence through MySQL, so intervals below a second are
// refused rather than served badly.
const MinEvery = time.Second

// Spec is a schedule as the API and the table carry it. A zero time is
// "not set".
type Spec struct {
	Cron     string        // cron expression; exactly one of Cron and Every
	TimeZone string        // IANA name for Cron; "" = UTC
	Every    time.Duration // fixed interval
	// Start: no occurrence before it. For an interval it is also the
	// anchor: occurrences are Start + k·Every, k = 0, 1, ...
	Start          time.Time
	End            time.Time // no occurrence after it
	MaxOccurrences int       // the clock finishes after this many rang; 0 = no limit
	Misfire        Misfire   // "" = skip
	CatchUpLimit   int       // for catch_up; 0 = DefaultCatchUpLimit
	// OccurrenceDeadline: an occurrence not rung within this after its
	// time is skipped (0 = none).
	OccurrenceDeadline time.Duration
}

// Recurring reports whether s is a schedule at all.
func (s Spec) Recurring() bool { return s.Cron != "" || s.Every != 0 }

// Error is a validation failure of one field of a schedule; Field is the
// JSON name ("cron", "time_zone", "every", ...).
type Error struct {
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Field + ": " + e.Message }

func fail(field, format string, args ...any) error {
	return &Error{Field: field, Message: fmt.Sprintf(format, args...)}
}

// Schedule is a parsed Spec.
type Schedule struct {
	spec Spec
	loc  *time.Location
	cron cron.Schedule
	// wall: the cron expression names fixed hours (its hour field is not
	// "*"), so it is computed on the wall clock of loc: an occurrence whose
	// wall time does not exist (the hour skipped when clocks go forward)
	// rings once, at the change; one whose wall time occurs twice (the
	// hour repeated when clocks go back) rings once, the first time. An
	// expression for every hour runs in real time instead: each real hour
	// has its occurrences, none is skipped or doubled by a change (the
	// rule of Vixie cron).
	wall bool
}

// parser accepts 5 fields, an optional leading seconds field, and the
// @yearly/@monthly/@weekly/@daily/@hourly shortcuts.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// maxTime is the last time an occurrence may have: clocks are stored in
// milliseconds and shown in RFC 3339, up to year 9999.
var maxTime = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// Parse validates a spec and returns its schedule, with the defaults
// filled in (Misfire, CatchUpLimit, TimeZone "UTC" for cron).
func Parse(s Spec) (*Schedule, error) {
	if (s.Cron != "") == (s.Every != 0) {
		return nil, fail("schedule", `give exactly one of "cron" or "every"`)
	}
	sc := &Schedule{loc: time.UTC}
	if s.Cron != "" {
		expr := strings.TrimSpace(s.Cron)
		if len(expr) > 255 {
			return nil, fail("cron", "is longer than 255 characters")
		}
		if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
			return nil, fail("cron", `must not carry a time zone: give it as "time_zone"`)
		}
		if strings.HasPrefix(expr, "@every") {
			return nil, fail("cron", `"@every" is not a cron expression: give the interval as "every"`)
		}
		c, err := parser.Parse(expr)
		if err != nil {
			return nil, fail("cron", "%s is not a cron expression (minute hour day-of-month month day-of-week, an optional leading seconds field, or @daily-style): %v", quote.Short(expr), err)
		}
		spec, ok := c.(*cron.SpecSchedule)
		if !ok {
			return nil, fail("cron", "%s is not a cron expression", quote.Short(expr))
		}
		const allHours = 1<<24 - 1
		sc.wall = spec.Hour&allHours != allHours
		spec.Location = time.UTC // computed on UTC or on a wall clock shown as UTC
		sc.cron = spec
		s.Cron = expr
		if s.TimeZone == "" {
			s.TimeZone = "UTC"
		}
		if len(s.TimeZone) > 64 {
			return nil, fail("time_zone", "is longer than 64 characters")
		}
		loc, err := time.LoadLocation(s.TimeZone)
		if err != nil || s.TimeZone == "Local" {
			return nil, fail("time_zone", "%s is not an IANA time zone name (such as Europe/Berlin or UTC)", quote.Short(s.TimeZone))
		}
		sc.loc = loc
	} else {
		if s.TimeZone != "" {
			return nil, fail("time_zone", `applies to "cron" only; an interval runs in real time`)
		}
		if s.Every < MinEvery {
			return nil, fail("every", "must be at least %s, got %s", MinEvery, s.Every)
		}
		if s.Every%time.Millisecond != 0 {
			return nil, fail("every", "must be a whole number of milliseconds, got %s", s.Every)
		}
		if s.Start.IsZero() {
			return nil, fail("start", "an interval needs its anchor (the caller sets it)")
		}
	}
	switch s.Misfire {
	case "":
		s.Misfire = MisfireSkip
	case MisfireSkip, MisfireCatchUp:
	default:
		return nil, fail("misfire", `must be "skip" or "catch_up", got %s`, quote.Short(string(s.Misfire)))
	}
	switch {
	case s.CatchUpLimit < 0 || s.CatchUpLimit > MaxCatchUpLimit:
		return nil, fail("catch_up_limit", "must be between 1 and %d, got %d", MaxCatchUpLimit, s.CatchUpLimit)
	case s.CatchUpLimit == 0:
		s.CatchUpLimit = DefaultCatchUpLimit
	}
	if s.MaxOccurrences < 0 || s.MaxOccurrences > 1<<31-1 {
		return nil, fail("max_occurrences", "must be 0 (no limit) or more, got %d", s.MaxOccurrences)
	}
	if s.OccurrenceDeadline < 0 {
		return nil, fail("occurrence_deadline", "must not be negative, got %s", s.OccurrenceDeadline)
	}
	if s.OccurrenceDeadline%time.Millisecond != 0 {
		// stored in milliseconds: a fraction would answer one value and
		// keep another, and an identical retry would then conflict
		return nil, fail("occurrence_deadline", "must be a whole number of milliseconds, got %s", s.OccurrenceDeadline)
	}
	if !s.Start.IsZero() && !s.End.IsZero() && s.End.Before(s.Start) {
		return nil, fail("end", "is before start")
	}
	for _, f := range []struct {
		name string
		t    time.Time
	}{{"start", s.Start}, {"end", s.End}} {
		if !f.t.IsZero() && (f.t.After(maxTime) || f.t.Before(time.Unix(0, 0))) {
			return nil, fail(f.name, "must be between 1970 and 9999")
		}
	}
	sc.spec = s
	return sc, nil
}

// MustParse is Parse for specs known to be valid (tests, rows written by
// clockd); it panics on an invalid one.
func MustParse(s Spec) *Schedule {
	sc, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return sc
}

// Spec returns the spec with its defaults filled in.
func (s *Schedule) Spec() Spec { return s.spec }

// Next returns the first occurrence strictly after `after`, within start
// and end; ok is false when there is none.
func (s *Schedule) Next(after time.Time) (time.Time, bool) {
	var t time.Time
	if s.spec.Every != 0 {
		t = s.nextEvery(after)
	} else {
		from := after
		if !s.spec.Start.IsZero() && s.spec.Start.After(after) {
			from = s.spec.Start.Add(-time.Nanosecond) // "at or after start"
		}
		t = s.nextCron(from)
	}
	if t.IsZero() || t.After(maxTime) || (!s.spec.End.IsZero() && t.After(s.spec.End)) {
		return time.Time{}, false
	}
	return t, true
}

func (s *Schedule) nextEvery(after time.Time) time.Time {
	start := s.spec.Start
	if after.Before(start) {
		return start
	}
	k := after.Sub(start)/s.spec.Every + 1
	if k > (1<<62)/s.spec.Every { // beyond year 9999 anyway
		return time.Time{}
	}
	return start.Add(k * s.spec.Every)
}

// nextCron is the first cron occurrence after `after`; zero when none comes
// within the five years the library looks ahead.
func (s *Schedule) nextCron(after time.Time) time.Time {
	if !s.wall {
		return s.nextReal(after)
	}
	// On the wall clock: the wall time of `after`, shown as UTC so that
	// the library sees days of 24 hours, then each wall time it gives is
	// mapped back to an instant of the zone. Times that map to no later
	// instant (a gap already passed, the first pass of a repeated hour)
	// are passed over.
	w := wallOf(after, s.loc)
	for range 1000 {
		w = s.cron.Next(w)
		if w.IsZero() {
			return time.Time{}
		}
		if t := instantOf(w, s.loc); t.After(after) {
			return t
		}
	}
	return time.Time{}
}

// nextReal is the first occurrence after `after` in real time: an instant
// whose local time in the zone matches. Between two of the zone's changes
// its offset is fixed, and the library's search in that fixed offset is
// exact; an occurrence it finds past the period's end is searched again in
// the next period, with that period's offset. The library's own search in
// the zone rounds a local midnight that does not exist (Asia/Beirut's
// clocks go forward at 00:00) back into the day before and then passed
// over the whole day: "0 * * * 0" skipped that Sunday's 23 hours (found by
// review).
func (s *Schedule) nextReal(after time.Time) time.Time {
	spec := *s.cron.(*cron.SpecSchedule)
	// search after from, with the offset in force at period; at most two
	// changes a year in the five years the library looks ahead
	from, period := after, after
	for range 64 {
		l := period.In(s.loc)
		name, off := l.Zone()
		spec.Location = time.FixedZone(name, off)
		t := spec.Next(from.In(spec.Location))
		if t.IsZero() {
			return t
		}
		_, end := l.ZoneBounds()
		if end.IsZero() || t.Before(end) {
			return t.UTC()
		}
		// the next period: occurrences at or after its start
		from, period = end.Add(-time.Nanosecond), end
	}
	return time.Time{}
}

// wallOf is the wall time of t in loc, as a UTC time with the same fields.
func wallOf(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

// instantOf maps a wall time (fields of w, which is UTC) to an instant of
// loc: the earliest instant with that wall time; for a wall time in a gap
// (clocks went forward over it), the instant of the change.
func instantOf(w time.Time, loc *time.Location) time.Time {
	var best time.Time
	// the offsets in force around w: a change or two lies within days
	for _, probe := range []time.Duration{-72 * time.Hour, 0, 72 * time.Hour} {
		_, off := w.Add(probe).In(loc).Zone()
		t := w.Add(-time.Duration(off) * time.Second)
		if wallOf(t, loc).Equal(w) && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	if !best.IsZero() {
		return best.UTC()
	}
	// a gap: the offset before the change puts w after it; the change is
	// where that offset's period begins
	_, off := w.Add(-72 * time.Hour).In(loc).Zone()
	start, _ := w.Add(-time.Duration(off) * time.Second).In(loc).ZoneBounds()
	return start.UTC()
}

// First is the first occurrence of a new (or resumed, or changed) schedule
// at now: the first at or after max(start, now).
func (s *Schedule) First(now time.Time) (time.Time, bool) {
	return s.Next(now.Add(-time.Nanosecond))
}

// Upcoming lists up to n occurrences from the current one (included).
func (s *Schedule) Upcoming(current time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	t := current
	for len(out) < n {
		out = append(out, t)
		next, ok := s.Next(t)
		if !ok {
			break
		}
		t = next
	}
	return out
}

// catchUpScan bounds the occurrences After walks through to find the latest
// missed ones of a catch_up schedule: past it (a schedule that crowds more
// occurrences into the stretch before now that holds its latest
// CatchUpLimit), the schedule skips.
const catchUpScan = 100_000

// After returns the occurrence to ring after the occurrence occ finished
// (rang, or was given up) at now, given that rung occurrences have rung so
// far (occ included when it rang). ok is false when the schedule is over:
// its end passed, or MaxOccurrences rang.
//
// Missed occurrences (after occ, at or before now) follow the misfire
// rule: skip continues with the first occurrence after now; catch_up rings
// the missed ones in order, at most CatchUpLimit (the latest), leaving out
// those already past their OccurrenceDeadline.
func (s *Schedule) After(occ, now time.Time, rung int) (time.Time, bool) {
	if s.spec.MaxOccurrences > 0 && rung >= s.spec.MaxOccurrences {
		return time.Time{}, false
	}
	next, ok := s.Next(occ)
	if !ok || next.After(now) {
		return next, ok
	}
	if s.spec.Misfire != MisfireCatchUp {
		return s.Next(now)
	}
	oldest := next // occurrences before it are not missed, or past their deadline
	if d := s.spec.OccurrenceDeadline; d > 0 && now.Add(-d).After(oldest) {
		oldest = now.Add(-d)
	}
	// The latest CatchUpLimit missed ones lie in the stretch just before
	// now: look back over a stretch that doubles until it holds them all or
	// reaches oldest. Walking from the oldest missed one instead stopped
	// after catchUpScan and skipped them all: a 1 s interval down for 28 h
	// rang none of its latest (found by review).
	for back := time.Second; ; back *= 2 {
		from := now.Add(-back)
		whole := !from.After(oldest)
		if whole {
			from = oldest
		}
		first, kept, after, afterOK, walked := s.missed(from, now)
		if !walked {
			return s.Next(now) // too many to walk: skip
		}
		if whole || kept == s.spec.CatchUpLimit {
			if kept > 0 {
				return first, true
			}
			return after, afterOK
		}
	}
}

// missed walks the occurrences at or after from and at or before now, and
// returns the first of the latest CatchUpLimit of them and how many those
// are, with the first occurrence after now; walked is false when there
// were more than catchUpScan.
func (s *Schedule) missed(from, now time.Time) (first time.Time, kept int, after time.Time, afterOK, walked bool) {
	latest := make([]time.Time, s.spec.CatchUpLimit) // a ring of the latest
	n := 0
	t, ok := s.Next(from.Add(-time.Nanosecond))
	for range catchUpScan {
		if !ok || t.After(now) {
			if n > len(latest) {
				return latest[n%len(latest)], len(latest), t, ok, true
			}
			return latest[0], n, t, ok, true
		}
		latest[n%len(latest)] = t
		n++
		t, ok = s.Next(t)
	}
	return time.Time{}, 0, time.Time{}, false, false
}
