package alarm

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits bound what a create or reschedule may carry.
type Limits struct {
	MaxPayloadBytes int // default 64 KiB
}

// DefaultContentType is used when a create names none.
const DefaultContentType = "application/json"

// Field limits.
const (
	MaxApplicationLen = 64
	MaxBusinessIDLen  = 128
	MaxContentTypeLen = 255
)

// maxTime bounds ring times to what RFC 3339 and millisecond columns hold.
var maxTime = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)

// CheckApplication validates an application name.
func CheckApplication(s string) error {
	if s == "" {
		return invalid("application", "is required")
	}
	if len(s) > MaxApplicationLen {
		return invalid("application", "is longer than %d characters", MaxApplicationLen)
	}
	if s == "." || s == ".." {
		return invalid("application", "must not be %q: it cannot be a URL path segment", s)
	}
	for i, c := range s { // by character: "é" is named whole, not by its first byte
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			if c == utf8.RuneError {
				return invalid("application", "is not valid UTF-8 (at byte %d); allowed are A-Z a-z 0-9 . _ -", i)
			}
			return invalid("application", "has character %q at byte %d; allowed are A-Z a-z 0-9 . _ -", c, i)
		}
	}
	return nil
}

// CheckBusinessID validates a business id.
func CheckBusinessID(s string) error {
	if s == "" {
		return invalid("business_id", "is required")
	}
	if !utf8.ValidString(s) {
		return invalid("business_id", "is not valid UTF-8")
	}
	if s == "." || s == ".." {
		return invalid("business_id", "must not be %q: it cannot be a URL path segment", s)
	}
	n := 0
	for i, r := range s {
		n++
		if r == '/' {
			return invalid("business_id", "must not contain '/' (at %d)", i)
		}
		if !unicode.IsPrint(r) {
			return invalid("business_id", "has a non-printable character %U at %d", r, i)
		}
	}
	if n > MaxBusinessIDLen {
		return invalid("business_id", "is longer than %d characters", MaxBusinessIDLen)
	}
	// MySQL's utf8mb4_bin (PAD SPACE) compares "o-1 " equal to "o-1": such an
	// id would collide with another clock's in the unique key and in lookups.
	if strings.HasSuffix(s, " ") {
		return invalid("business_id", "must not end with a space")
	}
	return nil
}

// CheckKey validates both parts of a key.
func CheckKey(k Key) error {
	if err := CheckApplication(k.Application); err != nil {
		return err
	}
	return CheckBusinessID(k.BusinessID)
}

func checkPayload(p string, lim Limits) error {
	if lim.MaxPayloadBytes > 0 && len(p) > lim.MaxPayloadBytes {
		return &FieldError{Field: "payload", Kind: ErrTooLarge,
			Message: fmt.Sprintf("is %d bytes, more than the limit of %d", len(p), lim.MaxPayloadBytes)}
	}
	return nil
}

func checkContentType(s string) error {
	if s == "" {
		return invalid("content_type", "must not be empty (omit it for %s)", DefaultContentType)
	}
	if len(s) > MaxContentTypeLen {
		return invalid("content_type", "is longer than %d characters", MaxContentTypeLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return invalid("content_type", "has a non-printable or non-ASCII byte at %d", i)
		}
	}
	return nil
}

func checkTime(field string, t time.Time) error {
	if t.After(maxTime) {
		return invalid(field, "is after %s, the latest time a clock can have", maxTime.Format(time.RFC3339))
	}
	if t.Before(time.Unix(0, 0)) {
		return invalid(field, "is before 1970")
	}
	return nil
}

func checkMaxAttempts(n int) error {
	if n < 0 {
		return invalid("max_attempts", "must be 0 (no limit) or more, got %d", n)
	}
	if n > math.MaxInt32 {
		return invalid("max_attempts", "is larger than %d", math.MaxInt32)
	}
	return nil
}

// When is a ring time given either as an absolute time or as a delay.
type When struct {
	At       *time.Time
	Delay    *time.Duration
	AtSet    bool // the field was present (possibly null)
	DelaySet bool
}

// CeilMS is t in UTC rounded up to a whole millisecond, the precision
// clocks are stored with. Ring times are rounded up, never down: a clock
// must not ring before the instant it was asked for, not even by 0.999 ms.
// (latest_ring_at, a "never after" bound, is rounded down.)
func CeilMS(t time.Time) time.Time {
	t = t.UTC()
	if f := t.Truncate(time.Millisecond); !f.Equal(t) {
		return f.Add(time.Millisecond)
	}
	return t
}

// resolve returns the ring time, rounded up to the millisecond, and whether
// one was given.
func (w When) resolve(now time.Time, required bool) (time.Time, bool, error) {
	switch {
	case w.AtSet && w.At == nil:
		return time.Time{}, false, invalid("ring_at", "must be an RFC 3339 time, not null (leave it out to give delay)")
	case w.DelaySet && w.Delay == nil:
		return time.Time{}, false, invalid("delay", "must be a duration, not null (leave it out to give ring_at)")
	case w.AtSet && w.DelaySet:
		return time.Time{}, false, invalid("ring_at", "give exactly one of ring_at or delay, not both")
	case w.AtSet:
		t := CeilMS(*w.At)
		return t, true, checkTime("ring_at", t)
	case w.DelaySet:
		if *w.Delay < 0 {
			return time.Time{}, false, invalid("delay", "must not be negative, got %s", *w.Delay)
		}
		t := CeilMS(now.Add(*w.Delay))
		return t, true, checkTime("delay", t)
	case required:
		return time.Time{}, false, invalid("ring_at", "give exactly one of ring_at or delay")
	}
	return time.Time{}, false, nil
}

// CreateInput is a create request as decoded, before validation. Nil means
// the field was absent.
type CreateInput struct {
	Application  string
	BusinessID   string
	Payload      *string
	ContentType  *string
	When         When
	LatestRingAt *time.Time
	MaxAttempts  *int
	// Schedule makes a recurring clock (instead of When).
	Schedule *ScheduleInput
}

// Validate checks a create request and returns the clock to create.
func (in CreateInput) Validate(now time.Time, lim Limits) (NewClock, error) {
	n, late, err := in.Resolve(now, lim)
	if err == nil {
		err = late
	}
	if err != nil {
		return NewClock{}, err
	}
	return n, nil
}

// Resolve checks a create request at now and returns the clock it asks
// for. Its refusals are of two kinds:
//   - err: the request is invalid in itself (a bad format, a value out of
//     range, fields that do not go together); n is zero;
//   - late: the request is well-formed, but not valid as a new clock at
//     now, because of the time now: its latest_ring_at has passed (or,
//     for a delay, comes before now plus the delay), its schedule's end
//     comes before the start derived from now, or its schedule has no
//     occurrence left after now. Sent earlier, the same request could
//     have set a clock, and this may be its retry: n is the clock it asks
//     for, as a create at now would have it (a recurring clock's RingAt
//     is zero), to be compared with the key's clock (NewClock.Same).
//     Service.Create answers it with that clock when the store would
//     answer the request with it (Store.Identical), and with late when
//     not.
//
// The checks that depend on now come last: a late request passed all the
// others.
func (in CreateInput) Resolve(now time.Time, lim Limits) (n NewClock, late, err error) {
	n = NewClock{Application: in.Application, BusinessID: in.BusinessID, ContentType: DefaultContentType}
	if err := CheckKey(Key{in.Application, in.BusinessID}); err != nil {
		return NewClock{}, nil, err
	}
	if in.Payload != nil {
		n.Payload = *in.Payload
	}
	if err := checkPayload(n.Payload, lim); err != nil {
		return NewClock{}, nil, err
	}
	if in.ContentType != nil {
		n.ContentType = *in.ContentType
		if err := checkContentType(n.ContentType); err != nil {
			return NewClock{}, nil, err
		}
	}
	if in.MaxAttempts != nil {
		if err := checkMaxAttempts(*in.MaxAttempts); err != nil {
			return NewClock{}, nil, err
		}
		n.MaxAttempts = *in.MaxAttempts
	}
	if in.Schedule != nil {
		return in.validateRecurring(n, now)
	}
	at, _, err := in.When.resolve(now, true)
	if err != nil {
		return NewClock{}, nil, err
	}
	n.RingAt = at
	if in.When.DelaySet {
		n.Delay, n.ByDelay = *in.When.Delay, true
	}
	if in.LatestRingAt == nil {
		return n, nil, nil
	}
	// a given time is checked even when it is Go's zero time (year 1, what
	// a zero time.Time is sent as): that is long past, not "no limit",
	// which is null (found by review)
	n.LatestRingAt = in.LatestRingAt.UTC().Truncate(time.Millisecond)
	if err := checkTime("latest_ring_at", n.LatestRingAt); err != nil {
		return NewClock{}, nil, err
	}
	if err := checkLatestRing(n.RingAt, n.LatestRingAt); err != nil {
		if !n.ByDelay {
			return NewClock{}, nil, err // two times of the request: never valid
		}
		// now + delay: the ring time of a retry is later than its first
		// create's
		return n, err, nil
	}
	if err := checkLatestNow(n.LatestRingAt, now); err != nil {
		return n, err, nil
	}
	return n, nil, nil
}

func checkLatest(ringAt, latest, now time.Time) error {
	if latest.IsZero() {
		return nil
	}
	if err := checkTime("latest_ring_at", latest); err != nil {
		return err
	}
	if err := checkLatestRing(ringAt, latest); err != nil {
		return err
	}
	return checkLatestNow(latest, now)
}

// checkLatestRing refuses a latest_ring_at before the ring time.
func checkLatestRing(ringAt, latest time.Time) error {
	if !latest.Before(ringAt) {
		return nil
	}
	if ringAt.Sub(latest) == time.Millisecond {
		// what the rounding alone can do to two times in one millisecond
		return invalid("latest_ring_at", "(%s) is before ring_at (%s): to the millisecond, ring_at is rounded up and latest_ring_at down",
			fmtTime(latest), fmtTime(ringAt))
	}
	return invalid("latest_ring_at", "(%s) is before ring_at (%s)", fmtTime(latest), fmtTime(ringAt))
}

// checkLatestNow refuses a latest_ring_at that has passed.
func checkLatestNow(latest, now time.Time) error {
	if !latest.After(now) {
		return invalid("latest_ring_at", "(%s) is already past", fmtTime(latest))
	}
	return nil
}

func fmtTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// PatchInput is a reschedule request as decoded. Nil means "leave as is";
// LatestSet with a nil LatestRingAt clears the limit.
type PatchInput struct {
	When         When
	Payload      *string
	LatestRingAt *time.Time
	LatestSet    bool
	MaxAttempts  *int
	Schedule     *ScheduleInput // a recurring clock's new schedule
}

// Empty reports whether the patch changes nothing.
func (p PatchInput) Empty() bool {
	return !p.When.AtSet && !p.When.DelaySet && p.Payload == nil && !p.LatestSet && p.MaxAttempts == nil && p.Schedule == nil
}

// Check validates what can be checked without the current clock.
func (p PatchInput) Check(now time.Time, lim Limits) error {
	if p.Empty() {
		return invalid("body", "names nothing to change: give ring_at or delay, payload, latest_ring_at, max_attempts or schedule")
	}
	if p.Schedule != nil && (p.When.AtSet || p.When.DelaySet) {
		return invalid("schedule", "give either schedule (recurring) or ring_at/delay (one-shot), not both")
	}
	if _, _, err := p.When.resolve(now, false); err != nil {
		return err
	}
	if p.Payload != nil {
		if err := checkPayload(*p.Payload, lim); err != nil {
			return err
		}
	}
	if p.LatestSet && p.LatestRingAt != nil {
		// year 1 (Go's zero time) included: null, not that, clears the limit
		if err := checkTime("latest_ring_at", *p.LatestRingAt); err != nil {
			return err
		}
	}
	if p.MaxAttempts != nil {
		return checkMaxAttempts(*p.MaxAttempts)
	}
	return nil
}

// Apply returns c changed by the patch, due at its (new) ring time, or the
// reason the result would be invalid.
func (p PatchInput) Apply(c Clock, now time.Time, lim Limits) (Clock, error) {
	if err := p.Check(now, lim); err != nil {
		return Clock{}, err
	}
	at, ok, err := p.When.resolve(now, false)
	if err != nil {
		return Clock{}, err
	}
	if c.Schedule != nil {
		if ok {
			field := "ring_at"
			if p.When.DelaySet {
				field = "delay"
			}
			return Clock{}, invalid(field, "a recurring clock rings on its schedule: change schedule instead, or pause it")
		}
		if p.LatestSet {
			return Clock{}, invalid("latest_ring_at", "applies to one-shot clocks; a recurring clock has schedule.occurrence_deadline and schedule.end")
		}
	}
	if p.Schedule != nil {
		if c, err = p.applySchedule(c, now); err != nil {
			return Clock{}, err
		}
	}
	if ok {
		c.RingAt = at
	}
	if p.Payload != nil {
		c.Payload = *p.Payload
	}
	if p.LatestSet {
		c.LatestRingAt = time.Time{}
		if p.LatestRingAt != nil {
			c.LatestRingAt = p.LatestRingAt.UTC().Truncate(time.Millisecond)
		}
	}
	if p.MaxAttempts != nil {
		c.MaxAttempts = *p.MaxAttempts
	}
	if (ok || p.LatestSet) && !c.LatestRingAt.IsZero() {
		if err := checkLatest(c.RingAt, c.LatestRingAt, now); err != nil {
			return Clock{}, err
		}
	}
	if ok {
		c.NextTryAt = DueAt(c.RingAt, now)
	} else if p.LatestSet && !c.LatestRingAt.IsZero() && c.Attempts > 0 {
		// a failing clock whose retry now comes too late for the new limit
		// gets its last try before it, as after a failure (LastTryLead)
		if last := LastTry(c.LatestRingAt); c.NextTryAt.After(last) {
			c.NextTryAt = DueAt(last, now)
		}
	}
	c.UpdatedAt = now
	return c, nil
}

// LastTryLead is how long before latest_ring_at (or an occurrence's
// deadline) the last try of a failing clock comes: the ring loop fires a
// due clock a few milliseconds late on a busy machine, and a try fired
// after the limit is not made. A try that fails within LastTryLead of the
// limit is the last: the clock expires.
const LastTryLead = 100 * time.Millisecond

// LastTry is when the last try of a failing clock that must not ring after
// by comes: LastTryLead before it, in whole milliseconds (as the column).
func LastTry(by time.Time) time.Time { return by.Add(-LastTryLead).Truncate(time.Millisecond) }

// DueAt is when a clock set to ring at ringAt is first tried: its ring time,
// or now when that is past ("ring now").
func DueAt(ringAt, now time.Time) time.Time {
	now = now.UTC().Truncate(time.Millisecond)
	if ringAt.Before(now) {
		return now
	}
	return ringAt
}

// TrimError shortens an error text to what the last_error column holds.
func TrimError(s string) string {
	const max = 1000
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return strings.TrimSpace(s) + "…"
}
