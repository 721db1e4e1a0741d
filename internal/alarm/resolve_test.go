package alarm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// CreateInput.Resolve tells the refusals that depend on the time now
// (late: the request may be the retry of a create that set a clock, and
// is answered with that clock when the key holds it) from those of a
// request that is wrong in itself (err: no clock can be identical), and
// checks the latter first.
func TestResolveLateOrInvalid(t *testing.T) {
	past, later := now.Add(-time.Minute), now.Add(time.Hour)
	oneShot := func(f func(*alarm.CreateInput)) alarm.CreateInput {
		in := alarm.CreateInput{Application: "order", BusinessID: "o-1", Payload: ptr("p"),
			When: alarm.When{At: ptr(now.Add(-time.Hour)), AtSet: true}, LatestRingAt: ptr(past)}
		f(&in)
		return in
	}
	recurring := func(s alarm.ScheduleInput, f func(*alarm.CreateInput)) alarm.CreateInput {
		in := alarm.CreateInput{Application: "order", BusinessID: "o-1", Payload: ptr("p"), Schedule: &s}
		f(&in)
		return in
	}
	keep := func(*alarm.CreateInput) {}
	tests := []struct {
		name  string
		in    alarm.CreateInput
		late  string // the late refusal's text, or
		field string // the field err names
	}{
		{"latest_ring_at passed", oneShot(keep), "latest_ring_at: (2026-01-01T09:59:00.123Z) is already past", ""},
		{"delay: latest_ring_at before now + delay", oneShot(func(in *alarm.CreateInput) {
			in.When = alarm.When{Delay: ptr(2 * time.Hour), DelaySet: true}
			in.LatestRingAt = ptr(later)
		}), "latest_ring_at: (2026-01-01T11:00:00.123Z) is before ring_at", ""},
		{"every: end before the start derived from now", recurring(alarm.ScheduleInput{Every: ptr(time.Minute), End: ptr(now.Add(time.Second))}, keep),
			"schedule.end: (2026-01-01T10:00:01.123Z) is before the first occurrence, 2026-01-01T10:01:00.124Z: one interval (every) after now, as no start is given", ""},
		{"every: end passed", recurring(alarm.ScheduleInput{Every: ptr(time.Minute), End: ptr(past)}, keep),
			"schedule.end: (2026-01-01T09:59:00.123Z) is already past", ""},
		{"cron: end passed", recurring(alarm.ScheduleInput{Cron: ptr("0 * * * *"), End: ptr(past)}, keep),
			"schedule: has no occurrence after now", ""},
		{"every: start given, all occurrences past", recurring(alarm.ScheduleInput{Every: ptr(time.Minute), Start: ptr(now.Add(-time.Hour)), End: ptr(past)}, keep),
			"schedule: has no occurrence after now", ""},

		// wrong whatever the time: err, checked before the time
		{"bad key, latest_ring_at passed", oneShot(func(in *alarm.CreateInput) { in.BusinessID = "a/b" }), "", "business_id"},
		{"bad content_type, latest_ring_at passed", oneShot(func(in *alarm.CreateInput) { in.ContentType = ptr("") }), "", "content_type"},
		{"ring_at after latest_ring_at, both given", oneShot(func(in *alarm.CreateInput) { in.When.At = ptr(now) }), "", "latest_ring_at"},
		{"latest_ring_at before 1970", oneShot(func(in *alarm.CreateInput) { in.LatestRingAt = ptr(time.Unix(-10, 0)) }), "", "latest_ring_at"},
		{"ring_at and delay", oneShot(func(in *alarm.CreateInput) { in.When.Delay, in.When.DelaySet = ptr(time.Second), true }), "", "ring_at"},
		{"every: start given after end", recurring(alarm.ScheduleInput{Every: ptr(time.Minute), Start: ptr(now), End: ptr(past)}, keep), "", "schedule.end"},
		{"every: end passed, bad misfire", recurring(alarm.ScheduleInput{Every: ptr(time.Minute), End: ptr(past), Misfire: ptr("never")}, keep), "", "schedule.misfire"},
		{"every: end before 1970", recurring(alarm.ScheduleInput{Every: ptr(time.Minute), End: ptr(time.Unix(-10, 0))}, keep), "", "schedule.end"},
		{"cron: bad expression, end passed", recurring(alarm.ScheduleInput{Cron: ptr("61 * * * *"), End: ptr(past)}, keep), "", "schedule.cron"},
		{"schedule with latest_ring_at", recurring(alarm.ScheduleInput{Cron: ptr("0 * * * *"), End: ptr(past)},
			func(in *alarm.CreateInput) { in.LatestRingAt = ptr(past) }), "", "latest_ring_at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, late, err := tt.in.Resolve(now, lim)
			if tt.field != "" {
				if late != nil {
					t.Fatalf("late %v, want err naming %s", late, tt.field)
				}
				wantFieldErr(t, err, tt.field, alarm.ErrInvalid)
				return
			}
			if err != nil || late == nil || !strings.HasPrefix(late.Error(), tt.late) {
				t.Fatalf("late %v, err %v; want late %q", late, err, tt.late)
			}
			// Validate refuses it as before
			if _, verr := tt.in.Validate(now, lim); verr == nil || verr.Error() != late.Error() {
				t.Errorf("Validate: %v, want %v", verr, late)
			}
			// n is the clock the request asks for: Same as the one it set
			// when it was sent two hours earlier, and valid
			if n.Application != "order" || n.BusinessID != "o-1" || n.Payload != "p" || n.ContentType != alarm.DefaultContentType {
				t.Errorf("n = %+v", n)
			}
			earlier := now.Add(-2 * time.Hour)
			first, ferr := tt.in.Validate(earlier, lim)
			if ferr != nil {
				t.Fatalf("the request at %s: %v", earlier, ferr)
			}
			c := alarm.Clock{Application: first.Application, BusinessID: first.BusinessID, Payload: first.Payload,
				ContentType: first.ContentType, RingAt: first.RingAt, LatestRingAt: first.LatestRingAt,
				MaxAttempts: first.MaxAttempts, Schedule: first.Schedule, CreatedAt: earlier.Truncate(time.Millisecond)}
			if !n.Same(c) {
				t.Errorf("late clock %+v is not Same as the one the request set earlier, %+v", n, c)
			}
		})
	}
}
