package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A create with "schedule": null is a one-shot clock, alone or as a batch
// item: every one-shot clock shows "schedule": null, and README says null
// is accepted where a clock can show it (a client echoing a clock it read
// was refused with 400).
func TestCreateWithNullScheduleIsOneShot(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	c := e.mustClock(201, "POST", "/v1/clocks", createBody("order", "null-schedule", "schedule", null{}))
	if c.Schedule != nil || c.OccurrenceAt != nil {
		t.Errorf("created %+v, want a one-shot clock", c)
	}
	code, data := e.do("POST", "/v1/clocks/batch", body{"clocks": []any{createBody("order", "null-schedule-2", "schedule", null{})}})
	var ans batchAnswer
	if err := json.Unmarshal(data, &ans); code != 200 || err != nil || len(ans.Results) != 1 || ans.Results[0].Status != 201 {
		t.Errorf("batch item with a null schedule: %d %s", code, data)
	}
}

// An interval schedule without "start" whose "end" has passed, or comes
// before its first occurrence (one interval after now), is refused with a
// message about that end: it said "schedule.end: is before start", naming
// a start the request never gave.
func TestIntervalWithPastEndSaysSo(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	for _, end := range []string{"2001-01-01T00:00:00Z", time.Now().Add(20 * time.Second).UTC().Format(time.RFC3339)} {
		msg := e.mustError(400, "POST", "/v1/clocks", body{"application": "order", "business_id": "past-end", "payload": "{}",
			"schedule": body{"every": "1m", "end": end}})
		if !strings.Contains(msg, "now") && !strings.Contains(msg, "past") && !strings.Contains(msg, "first occurrence") {
			t.Errorf("every 1m, no start, end %s: %q; the request named no start", end, msg)
		}
	}
}
