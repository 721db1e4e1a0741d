package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/quote"
)

// Recurring clocks in the API: the "schedule" object of a create or a
// PATCH, its JSON in a clock, and the pause and resume calls.

// Schedule is the JSON of a recurring clock's schedule, defaults filled in.
type Schedule struct {
	Cron               *string `json:"cron,omitempty"`
	TimeZone           *string `json:"time_zone,omitempty"`
	Every              *string `json:"every,omitempty"` // Go duration
	Start              *string `json:"start"`
	End                *string `json:"end"`
	MaxOccurrences     int     `json:"max_occurrences"`
	Misfire            string  `json:"misfire"`
	CatchUpLimit       int     `json:"catch_up_limit"`
	OccurrenceDeadline *string `json:"occurrence_deadline"` // Go duration; null = none
}

// nextOccurrences is how many upcoming occurrences a GET of one clock lists.
const nextOccurrences = 5

func scheduleJSON(c alarm.Clock) *Schedule {
	sp := c.Schedule
	if sp == nil {
		return nil
	}
	out := &Schedule{Start: optTime(sp.Start), End: optTime(sp.End), MaxOccurrences: sp.MaxOccurrences,
		Misfire: string(sp.Misfire), CatchUpLimit: sp.CatchUpLimit}
	if sp.Cron != "" {
		out.Cron, out.TimeZone = &sp.Cron, &sp.TimeZone
	} else {
		e := sp.Every.String()
		out.Every = &e
	}
	if sp.OccurrenceDeadline > 0 {
		d := sp.OccurrenceDeadline.String()
		out.OccurrenceDeadline = &d
	}
	return out
}

// clockWithNext is the JSON of one clock read by GET: with its upcoming
// occurrences when it is recurring.
type clockWithNext struct {
	Clock
	NextOccurrences []string `json:"next_occurrences,omitempty"`
}

func clockWithNextJSON(c alarm.Clock, now time.Time) any {
	j := ClockJSON(c)
	if c.Schedule == nil {
		return j
	}
	out := clockWithNext{Clock: j, NextOccurrences: []string{}}
	for _, t := range c.NextOccurrences(now, nextOccurrences) {
		out.NextOccurrences = append(out.NextOccurrences, fmtTime(t))
	}
	return out
}

// scheduleBody is the JSON of a "schedule" object, field by field.
type scheduleBody struct {
	Cron, TimeZone, Every                                                 json.RawMessage
	Start, End, MaxOccurrences, Misfire, CatchUpLimit, OccurrenceDeadline json.RawMessage
}

func (b *scheduleBody) field(k string) *json.RawMessage {
	switch k {
	case "cron":
		return &b.Cron
	case "time_zone":
		return &b.TimeZone
	case "every":
		return &b.Every
	}
	return b.option(k)
}

// option maps the fields that may also stand beside "schedule", at the top
// of a create.
func (b *scheduleBody) option(k string) *json.RawMessage {
	switch k {
	case "start":
		return &b.Start
	case "end":
		return &b.End
	case "max_occurrences":
		return &b.MaxOccurrences
	case "misfire":
		return &b.Misfire
	case "catch_up_limit":
		return &b.CatchUpLimit
	case "occurrence_deadline":
		return &b.OccurrenceDeadline
	}
	return nil
}

// decodeSchedule reads a "schedule" value; top holds the schedule options
// given at the top of the body instead (each may be given in one place).
func decodeSchedule(raw json.RawMessage, top *scheduleBody) (*alarm.ScheduleInput, error) {
	if raw == nil || isNull(raw) {
		for _, k := range []string{"start", "end", "max_occurrences", "misfire", "catch_up_limit", "occurrence_deadline"} {
			if *top.option(k) != nil {
				return nil, badField(k, "applies to recurring clocks: give a schedule")
			}
		}
		// null is what a one-shot clock shows: a one-shot clock (a PATCH
		// refuses it before, as it cannot make a clock one-shot)
		return nil, nil
	}
	if bytes.TrimSpace(raw)[0] != '{' {
		return nil, badField("schedule", "must be an object such as {\"cron\": \"0 2 * * *\", \"time_zone\": \"Europe/Berlin\"} or {\"every\": \"30s\"}, not %s", jsonKind(raw))
	}
	var b scheduleBody
	if err := decodeObject(raw, func(k string) *json.RawMessage {
		dst := b.field(k)
		if dst == nil {
			return nil
		}
		if o := top.option(k); o != nil && *o != nil {
			return &json.RawMessage{} // given at the top too: "more than once"
		}
		return dst
	}); err != nil {
		return nil, prefixed(err)
	}
	for _, k := range []string{"start", "end", "max_occurrences", "misfire", "catch_up_limit", "occurrence_deadline"} {
		if v := *top.option(k); v != nil {
			*b.option(k) = v
		}
	}
	return b.input()
}

// prefixed names a schedule field as "schedule.<field>" in an error.
func prefixed(err error) error {
	if fe, ok := err.(*alarm.FieldError); ok && fe.Field != "body" {
		return &alarm.FieldError{Field: "schedule." + fe.Field, Message: fe.Message, Kind: fe.Kind}
	}
	return err
}

func (b scheduleBody) input() (*alarm.ScheduleInput, error) {
	in := &alarm.ScheduleInput{}
	var err error
	if in.Cron, err = stringField("schedule.cron", b.Cron); err != nil {
		return nil, err
	}
	if in.TimeZone, err = stringField("schedule.time_zone", b.TimeZone); err != nil {
		return nil, err
	}
	if in.Misfire, err = stringField("schedule.misfire", b.Misfire); err != nil {
		return nil, err
	}
	if b.Every != nil {
		if in.Every, err = parseDuration("schedule.every", b.Every); err != nil {
			return nil, err
		}
	}
	if b.OccurrenceDeadline != nil {
		if in.OccurrenceDeadline, err = parseDuration("schedule.occurrence_deadline", b.OccurrenceDeadline); err != nil {
			return nil, err
		}
	}
	if b.Start != nil {
		if in.Start, err = parseTime("schedule.start", b.Start); err != nil {
			return nil, err
		}
	}
	if b.End != nil {
		if in.End, err = parseTime("schedule.end", b.End); err != nil {
			return nil, err
		}
	}
	if b.MaxOccurrences != nil && !isNull(b.MaxOccurrences) {
		if in.MaxOccurrences, err = parseCount("schedule.max_occurrences", b.MaxOccurrences, 0); err != nil {
			return nil, err
		}
	}
	if b.CatchUpLimit != nil && !isNull(b.CatchUpLimit) {
		if in.CatchUpLimit, err = parseCount("schedule.catch_up_limit", b.CatchUpLimit, 1); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// parseDuration accepts a Go duration string ("30s") or integer
// milliseconds; nil for null.
func parseDuration(field string, raw json.RawMessage) (*time.Duration, error) {
	if isNull(raw) {
		return nil, nil
	}
	if s, ok, valid := jsonString(raw); ok {
		if !valid {
			return nil, notUTF8(field)
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, badField(field, "%s is not a duration such as \"30s\" or \"1h30m\"", quote.Short(s))
		}
		return &d, nil
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil {
		return nil, badField(field, "must be a duration string such as \"30s\" or integer milliseconds")
	}
	if v < 0 || v > math.MaxInt64/int64(time.Millisecond) {
		return nil, badField(field, "%d milliseconds is out of range", v)
	}
	d := time.Duration(v) * time.Millisecond
	return &d, nil
}

// parseCount reads a whole number of at least lo.
func parseCount(field string, raw json.RawMessage, lo int64) (*int, error) {
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil || n < lo || n > math.MaxInt32 {
		return nil, badField(field, "must be a whole number between %d and %d", lo, math.MaxInt32)
	}
	v := int(n)
	return &v, nil
}

func (a *api) pause(w http.ResponseWriter, r *http.Request) {
	a.recurringChange(w, r, a.svc.Pause)
}

func (a *api) resume(w http.ResponseWriter, r *http.Request) {
	a.recurringChange(w, r, a.svc.Resume)
}

func (a *api) recurringChange(w http.ResponseWriter, r *http.Request, change func(ctx context.Context, k alarm.Key) (alarm.Clock, error)) {
	if err := a.allow(r, key(r).Application, auth.ScopeWrite); err != nil {
		a.fail(w, r, err)
		return
	}
	if err := a.noBody(w, r); err != nil {
		a.fail(w, r, err)
		return
	}
	c, err := change(r.Context(), key(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ClockJSON(c))
}

// parseRecurring reads the list filter recurring=true|false.
func parseRecurring(s string) (*bool, error) {
	if s == "" {
		return nil, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return nil, badField("recurring", "%s is not true or false", quote.Short(s))
	}
	return &b, nil
}
