package httpapi_test

import (
	"encoding/json"
	"testing"
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
