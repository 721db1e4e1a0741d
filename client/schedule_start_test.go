package client

import (
	"encoding/json"
	"testing"
	"time"
)

// A schedule's start is sent to the nanosecond, as RingAt, and clockd
// rounds it up (no occurrence before the instant asked for). Found by
// review: the client cut it to the millisecond, so a start of
// 10:00:00.0005 rang its first occurrence half a millisecond early; the
// same for Change.Schedule (PATCH).
func TestScheduleStartSentToTheNanosecond(t *testing.T) {
	start := time.Date(2030, 1, 1, 10, 0, 0, 500_000, time.UTC) // 10:00:00.0005
	sch := &Schedule{Every: time.Minute, Start: start}
	for name, body := range map[string]any{
		"create": NewClock{Application: "a", BusinessID: "b", Schedule: sch}.body(),
		"patch":  Change{Schedule: sch}.body(),
	} {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Schedule struct {
				Start string `json:"start"`
			} `json:"schedule"`
		}
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		sent, err := time.Parse(time.RFC3339Nano, got.Schedule.Start)
		if err != nil {
			t.Fatalf("%s: start %q: %v", name, got.Schedule.Start, err)
		}
		if sent.Before(start) {
			t.Errorf("%s: sends schedule.start %s, before the start asked for (%s): the first occurrence can ring before it",
				name, got.Schedule.Start, start.Format(time.RFC3339Nano))
		}
	}
}
