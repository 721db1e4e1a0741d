package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Status is where a clock is in its life.
type Status string

// The statuses of a clock.
const (
	Pending   Status = "pending"   // waiting for its time (or for the next try)
	Firing    Status = "firing"    // claimed, being published
	Rung      Status = "rung"      // published and confirmed by the broker
	Cancelled Status = "cancelled" // cancelled before it rang
	Expired   Status = "expired"   // not rung by its LatestRingAt
	Dead      Status = "dead"      // gave up after MaxAttempts failed attempts
)

// Clock is a clock as clockd answers it. Zero times stand for the API's
// nulls.
type Clock struct {
	ID           int64
	Application  string
	BusinessID   string
	Payload      string
	ContentType  string
	RingAt       time.Time
	LatestRingAt time.Time // zero: none
	MaxAttempts  int       // 0: no limit
	Status       Status
	Attempts     int
	NextTryAt    time.Time
	LastError    string
	CreatedAt    time.Time
	UpdatedAt    time.Time
	RungAt       time.Time // zero: not rung
	// Archived is true for a finished clock read from the history.
	Archived bool

	// Recurring clocks only (Schedule nil for a one-shot clock).
	Schedule        *Schedule
	Paused          bool
	Occurrences     int         // occurrences rung so far
	OccurrenceAt    time.Time   // time of the current or next occurrence
	NextOccurrences []time.Time // the next few, in the answer of Get only
}

// Schedule makes a clock recurring: exactly one of Cron or Every.
type Schedule struct {
	Cron     string        // five-field cron expression, e.g. "0 2 * * *"
	TimeZone string        // IANA zone of Cron, e.g. "Europe/Berlin"; default UTC
	Every    time.Duration // a fixed period instead of Cron
	Start    time.Time     // no occurrence before this; zero: from now
	End      time.Time     // no occurrence after this; zero: none
	// MaxOccurrences ends the clock after that many; 0: no limit.
	MaxOccurrences int
	// Misfire says what happens to occurrences missed while clockd was
	// down: "skip" (default) or "catch_up" (ring up to CatchUpLimit).
	Misfire      string
	CatchUpLimit int
	// OccurrenceDeadline skips an occurrence not rung within this after
	// its time; 0: none.
	OccurrenceDeadline time.Duration
}

// NewClock is what Create sets. Give exactly one of RingAt, Delay or
// Schedule.
type NewClock struct {
	Application string
	BusinessID  string
	Payload     string
	ContentType string        // default application/json
	RingAt      time.Time     // ring at this time (in the past: now)
	Delay       time.Duration // or ring this long after clockd receives it
	Schedule    *Schedule     // or ring on a schedule
	// LatestRingAt: never ring after this; the clock expires instead.
	LatestRingAt time.Time
	// MaxAttempts: the clock dies after that many failed attempts; 0: no
	// limit.
	MaxAttempts int
}

// Change is what Reschedule changes; nil and zero fields are left as
// they are.
type Change struct {
	RingAt   time.Time
	Delay    time.Duration
	Schedule *Schedule
	Payload  *string
	// LatestRingAt sets it; ClearLatestRingAt removes it.
	LatestRingAt      time.Time
	ClearLatestRingAt bool
	MaxAttempts       *int
}

// wireTime is the time format clockd writes: RFC 3339, UTC, milliseconds.
const wireTime = "2006-01-02T15:04:05.000Z07:00"

func fmtTime(t time.Time) string { return t.UTC().Format(wireTime) }

func optTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := fmtTime(t)
	return &s
}

func parseOpt(s *string) (time.Time, error) {
	if s == nil || *s == "" {
		return time.Time{}, nil
	}
	return time.Parse(time.RFC3339Nano, *s)
}

// duration reads a Go duration string ("30s") or integer milliseconds, as
// the API accepts both.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = duration(v)
		return nil
	}
	ms, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("duration %s: want a Go duration or integer milliseconds", b)
	}
	*d = duration(time.Duration(ms) * time.Millisecond)
	return nil
}

func (d duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// wireSchedule is the JSON of a schedule.
type wireSchedule struct {
	Cron               string    `json:"cron,omitempty"`
	TimeZone           string    `json:"time_zone,omitempty"`
	Every              *duration `json:"every,omitempty"`
	Start              *string   `json:"start,omitempty"`
	End                *string   `json:"end,omitempty"`
	MaxOccurrences     int       `json:"max_occurrences,omitempty"`
	Misfire            string    `json:"misfire,omitempty"`
	CatchUpLimit       int       `json:"catch_up_limit,omitempty"`
	OccurrenceDeadline *duration `json:"occurrence_deadline,omitempty"`
}

func (s *Schedule) wire() *wireSchedule {
	if s == nil {
		return nil
	}
	w := &wireSchedule{Cron: s.Cron, TimeZone: s.TimeZone, Start: optTime(s.Start), End: optTime(s.End),
		MaxOccurrences: s.MaxOccurrences, Misfire: s.Misfire, CatchUpLimit: s.CatchUpLimit}
	if s.Every > 0 {
		d := duration(s.Every)
		w.Every = &d
	}
	if s.OccurrenceDeadline > 0 {
		d := duration(s.OccurrenceDeadline)
		w.OccurrenceDeadline = &d
	}
	return w
}

// request is the schedule as a create or a change sends it: its start and
// end to the nanosecond, as RingAt, for clockd rounds each its own way
// (start up: no occurrence before the instant asked for).
func (s *Schedule) request() *wireSchedule {
	w := s.wire()
	if w == nil {
		return nil
	}
	for _, f := range []struct {
		t   time.Time
		dst **string
	}{{s.Start, &w.Start}, {s.End, &w.End}} {
		if !f.t.IsZero() {
			v := f.t.UTC().Format(time.RFC3339Nano)
			*f.dst = &v
		}
	}
	return w
}

func (w *wireSchedule) schedule() (*Schedule, error) {
	if w == nil {
		return nil, nil
	}
	s := &Schedule{Cron: w.Cron, TimeZone: w.TimeZone, MaxOccurrences: w.MaxOccurrences, Misfire: w.Misfire,
		CatchUpLimit: w.CatchUpLimit}
	if w.Every != nil {
		s.Every = time.Duration(*w.Every)
	}
	if w.OccurrenceDeadline != nil {
		s.OccurrenceDeadline = time.Duration(*w.OccurrenceDeadline)
	}
	var err error
	if s.Start, err = parseOpt(w.Start); err != nil {
		return nil, err
	}
	if s.End, err = parseOpt(w.End); err != nil {
		return nil, err
	}
	return s, nil
}

// wireClock is the JSON of a clock, as clockd writes it.
type wireClock struct {
	ID              int64         `json:"id"`
	Application     string        `json:"application"`
	BusinessID      string        `json:"business_id"`
	Payload         string        `json:"payload"`
	ContentType     string        `json:"content_type"`
	RingAt          *string       `json:"ring_at"`
	LatestRingAt    *string       `json:"latest_ring_at"`
	MaxAttempts     int           `json:"max_attempts"`
	Status          Status        `json:"status"`
	Attempts        int           `json:"attempts"`
	NextTryAt       *string       `json:"next_try_at"`
	LastError       *string       `json:"last_error"`
	CreatedAt       *string       `json:"created_at"`
	UpdatedAt       *string       `json:"updated_at"`
	RungAt          *string       `json:"rung_at"`
	Archived        bool          `json:"archived,omitempty"`
	Schedule        *wireSchedule `json:"schedule"`
	Paused          bool          `json:"paused"`
	Occurrences     int           `json:"occurrences"`
	OccurrenceAt    *string       `json:"occurrence_at"`
	NextOccurrences []string      `json:"next_occurrences,omitempty"`
}

// UnmarshalJSON reads a clock in the API's JSON form.
func (c *Clock) UnmarshalJSON(data []byte) error {
	var w wireClock
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	out := Clock{ID: w.ID, Application: w.Application, BusinessID: w.BusinessID, Payload: w.Payload,
		ContentType: w.ContentType, MaxAttempts: w.MaxAttempts, Status: w.Status, Attempts: w.Attempts,
		Archived: w.Archived, Paused: w.Paused, Occurrences: w.Occurrences}
	if w.LastError != nil {
		out.LastError = *w.LastError
	}
	for _, f := range []struct {
		dst *time.Time
		src *string
	}{{&out.RingAt, w.RingAt}, {&out.LatestRingAt, w.LatestRingAt}, {&out.NextTryAt, w.NextTryAt},
		{&out.CreatedAt, w.CreatedAt}, {&out.UpdatedAt, w.UpdatedAt}, {&out.RungAt, w.RungAt},
		{&out.OccurrenceAt, w.OccurrenceAt}} {
		t, err := parseOpt(f.src)
		if err != nil {
			return fmt.Errorf("clock %d: %w", w.ID, err)
		}
		*f.dst = t
	}
	for _, s := range w.NextOccurrences {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("clock %d: next_occurrences: %w", w.ID, err)
		}
		out.NextOccurrences = append(out.NextOccurrences, t)
	}
	var err error
	if out.Schedule, err = w.Schedule.schedule(); err != nil {
		return fmt.Errorf("clock %d: schedule: %w", w.ID, err)
	}
	*c = out
	return nil
}

// MarshalJSON writes a clock in the API's JSON form (as clockd answers
// it), so that tools can print what they read.
func (c Clock) MarshalJSON() ([]byte, error) {
	w := wireClock{ID: c.ID, Application: c.Application, BusinessID: c.BusinessID, Payload: c.Payload,
		ContentType: c.ContentType, RingAt: optTime(c.RingAt), LatestRingAt: optTime(c.LatestRingAt),
		MaxAttempts: c.MaxAttempts, Status: c.Status, Attempts: c.Attempts, NextTryAt: optTime(c.NextTryAt),
		CreatedAt: optTime(c.CreatedAt), UpdatedAt: optTime(c.UpdatedAt), RungAt: optTime(c.RungAt),
		Archived: c.Archived, Schedule: c.Schedule.wire(), Paused: c.Paused, Occurrences: c.Occurrences,
		OccurrenceAt: optTime(c.OccurrenceAt)}
	if c.LastError != "" {
		w.LastError = &c.LastError
	}
	for _, t := range c.NextOccurrences {
		w.NextOccurrences = append(w.NextOccurrences, fmtTime(t))
	}
	return json.Marshal(w)
}

// createBody is the JSON of one create.
type createBody struct {
	Application  string        `json:"application"`
	BusinessID   string        `json:"business_id"`
	Payload      string        `json:"payload"`
	ContentType  string        `json:"content_type,omitempty"`
	RingAt       *string       `json:"ring_at,omitempty"`
	Delay        *int64        `json:"delay,omitempty"` // milliseconds: exact, no rounding of a Go duration string
	Schedule     *wireSchedule `json:"schedule,omitempty"`
	LatestRingAt *string       `json:"latest_ring_at,omitempty"`
	MaxAttempts  int           `json:"max_attempts,omitempty"`
}

func (n NewClock) body() createBody {
	b := createBody{Application: n.Application, BusinessID: n.BusinessID, Payload: n.Payload,
		ContentType: n.ContentType, Schedule: n.Schedule.request(), LatestRingAt: optTime(n.LatestRingAt),
		MaxAttempts: n.MaxAttempts}
	if !n.RingAt.IsZero() {
		s := n.RingAt.UTC().Format(time.RFC3339Nano)
		b.RingAt = &s
	}
	if n.Delay != 0 || (n.RingAt.IsZero() && n.Schedule == nil) {
		ms := delayMillis(n.Delay)
		b.Delay = &ms
	}
	return b
}

// delayMillis rounds a delay up to the millisecond, as clockd does: a
// clock never rings before the instant asked for.
func delayMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// patchBody is the JSON of a reschedule; only the given fields are sent.
type patchBody map[string]any

func (ch Change) body() patchBody {
	b := patchBody{}
	if !ch.RingAt.IsZero() {
		b["ring_at"] = ch.RingAt.UTC().Format(time.RFC3339Nano)
	}
	if ch.Delay != 0 {
		b["delay"] = delayMillis(ch.Delay)
	}
	if ch.Schedule != nil {
		b["schedule"] = ch.Schedule.request()
	}
	if ch.Payload != nil {
		b["payload"] = *ch.Payload
	}
	switch {
	case ch.ClearLatestRingAt:
		b["latest_ring_at"] = nil
	case !ch.LatestRingAt.IsZero():
		b["latest_ring_at"] = fmtTime(ch.LatestRingAt)
	}
	if ch.MaxAttempts != nil {
		b["max_attempts"] = *ch.MaxAttempts
	}
	return b
}
