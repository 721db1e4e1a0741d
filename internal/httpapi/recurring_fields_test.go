package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/schedule"
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

// GET /v1/openapi.json gives catch_up_limit (in ClockCreate, beside and in
// its schedule, in ClockPatch's schedule and in Schedule) the bounds clockd
// holds it to, 1 to schedule.MaxCatchUpLimit: it said minimum 0, which
// clockd refuses with 400, so a client generated from the document, or
// one sending 0 for "the default", got a 400 for a request the document
// called valid.
func TestOpenAPICatchUpLimitBoundsAreTheServers(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	for _, n := range []int{0, schedule.MaxCatchUpLimit + 1} {
		e.mustError(400, "POST", "/v1/clocks", body{"application": "order", "business_id": "cu", "payload": "{}",
			"schedule": body{"every": "1m", "misfire": "catch_up", "catch_up_limit": n}})
	}
	e.mustClock(201, "POST", "/v1/clocks", body{"application": "order", "business_id": "cu", "payload": "{}",
		"schedule": body{"every": "1m", "misfire": "catch_up", "catch_up_limit": schedule.MaxCatchUpLimit}})
	code, data := e.do("GET", "/v1/openapi.json", nil)
	if code != 200 {
		t.Fatalf("GET /v1/openapi.json: %d", code)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	seen := 0
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if k == "catch_up_limit" {
					if m, ok := x.(map[string]any); ok {
						if min, ok := m["minimum"].(float64); ok {
							seen++
							if min != 1 || m["maximum"] != float64(schedule.MaxCatchUpLimit) {
								t.Errorf("%s/catch_up_limit: minimum %v, maximum %v; clockd takes 1 to %d",
									path, min, m["maximum"], schedule.MaxCatchUpLimit)
							}
						}
					}
				}
				walk(x, path+"/"+k)
			}
		case []any:
			for _, x := range v {
				walk(x, path)
			}
		}
	}
	walk(doc, "#")
	if seen != 4 {
		t.Errorf("catch_up_limit with bounds in %d places, want 4", seen)
	}
}

// GET of a recurring clock whose current occurrence is overdue (clockd was
// down across several occurrences: target_ring_at and next_try_time in
// the past) lists in next_occurrences that occurrence, rung late, and
// then, by misfire "skip", only occurrences after now: it listed the
// missed ones in between, which never ring.
func TestNextOccurrencesOfAnOverdueSkipClockAreInTheFuture(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	start := time.Now().Add(-time.Hour).UTC().Truncate(time.Minute)
	c := e.mustClock(201, "POST", "/v1/clocks", body{"application": "order", "business_id": "overdue", "payload": "{}",
		"schedule": body{"every": "1m", "start": start.Format(time.RFC3339)}})
	overdue := time.Now().Add(-10 * time.Minute).UTC().Truncate(time.Minute)
	e.exec("UPDATE clock SET target_ring_at = ?, next_try_time = ? WHERE id = ?", overdue.UnixMilli(), overdue.UnixMilli(), c.ID)
	code, data := e.do("GET", "/v1/clocks/order/overdue", nil)
	if code != 200 {
		t.Fatalf("GET: %d %s", code, data)
	}
	var got struct {
		Next []string `json:"next_occurrences"`
	}
	if err := json.Unmarshal(data, &got); err != nil || len(got.Next) != 5 {
		t.Fatalf("next_occurrences: %s (%v)", data, err)
	}
	now := time.Now()
	if at := parseTime(t, got.Next[0]); !at.Equal(overdue) {
		t.Errorf("next_occurrences %v: the first is %s, want the overdue current one, %s", got.Next, got.Next[0], overdue)
	}
	for _, s := range got.Next[1:] {
		if at := parseTime(t, s); at.Before(now) {
			t.Errorf("next_occurrences %v: %s is past (%v ago) and will not ring (misfire skip continues after now)",
				got.Next, s, now.Sub(at).Round(time.Second))
			break
		}
	}
}
