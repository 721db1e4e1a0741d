package client

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestClockJSONRoundTrip: a clock read from clockd's JSON writes back the
// same JSON (clockctl prints what it read), nulls and recurring fields
// included.
func TestClockJSONRoundTrip(t *testing.T) {
	for _, in := range []string{
		`{"id":42,"application":"order","business_id":"o-123","payload":"{\"order\":123}","content_type":"application/json","ring_at":"2026-01-01T10:30:00.000Z","latest_ring_at":null,"max_attempts":0,"status":"pending","attempts":0,"next_try_at":"2026-01-01T10:30:00.000Z","last_error":null,"created_at":"2026-01-01T10:00:00.000Z","updated_at":"2026-01-01T10:00:00.000Z","rung_at":null,"schedule":null,"paused":false,"occurrences":0,"occurrence_at":null}`,
		`{"id":7,"application":"cart","business_id":"stale","payload":"","content_type":"text/plain","ring_at":"2026-01-02T01:00:00.000Z","latest_ring_at":"2026-01-03T00:00:00.000Z","max_attempts":3,"status":"dead","attempts":3,"next_try_at":"2026-01-02T01:00:00.000Z","last_error":"unroutable","created_at":"2026-01-01T10:00:00.000Z","updated_at":"2026-01-02T01:00:01.000Z","rung_at":null,"archived":true,"schedule":{"cron":"0 2 * * *","time_zone":"Europe/Berlin","every":"30s","start":"2026-01-01T00:00:00.000Z","max_occurrences":10,"misfire":"catch_up","catch_up_limit":5,"occurrence_deadline":"2m0s"},"paused":true,"occurrences":2,"occurrence_at":"2026-01-02T01:00:00.000Z","next_occurrences":["2026-01-03T01:00:00.000Z"]}`,
	} {
		var c Clock
		if err := json.Unmarshal([]byte(in), &c); err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != in {
			t.Errorf("round trip:\n got %s\nwant %s", out, in)
		}
	}
	var c Clock
	if err := json.Unmarshal([]byte(`{"id":1,"ring_at":"yesterday"}`), &c); err == nil {
		t.Error("a bad time was accepted")
	}
	if err := json.Unmarshal([]byte(`{"id":1,"schedule":{"every":30000}}`), &c); err != nil || c.Schedule.Every != 30*time.Second {
		t.Errorf("every in milliseconds: %v %v", c.Schedule, err)
	}
}

// TestErrorKinds: each status matches its sentinel and no other.
func TestErrorKinds(t *testing.T) {
	kinds := []error{ErrInvalid, ErrUnauthenticated, ErrPermissionDenied, ErrNotFound, ErrConflict, ErrOverQuota, ErrUnavailable}
	for status, want := range map[int]error{400: ErrInvalid, 413: ErrInvalid, 401: ErrUnauthenticated, 403: ErrPermissionDenied,
		404: ErrNotFound, 409: ErrConflict, 429: ErrOverQuota, 503: ErrUnavailable, 500: nil, 502: nil} {
		e := decodeError(status, []byte(`{"error":{"code":"x","message":"m"}}`))
		for _, k := range kinds {
			if got := errors.Is(e, k); got != (k == want) {
				t.Errorf("status %d: errors.Is(%v) = %v", status, k, got)
			}
		}
	}
	e := decodeError(http.StatusBadGateway, []byte("<html>\n bad\tgateway </html>"))
	if e.Code != "" || e.Error() != "502 Bad Gateway: <html> bad gateway </html>" {
		t.Errorf("non-SPEC body: %q", e.Error())
	}
	if !errors.Is(&netError{errors.New("connection reset")}, ErrUnavailable) {
		t.Error("a request without an answer is not ErrUnavailable")
	}
}

// TestBodies: what Create and Reschedule send.
func TestBodies(t *testing.T) {
	at := time.Date(2026, 1, 1, 10, 30, 0, 123456789, time.UTC)
	for _, tt := range []struct {
		v    any
		want string
	}{
		{NewClock{Application: "a", BusinessID: "b", Delay: 1500 * time.Microsecond}, `{"application":"a","business_id":"b","payload":"","delay":2}`},
		{NewClock{Application: "a", BusinessID: "b"}, `{"application":"a","business_id":"b","payload":"","delay":0}`},
		{NewClock{Application: "a", BusinessID: "b", RingAt: at, MaxAttempts: 2, ContentType: "text/plain"},
			`{"application":"a","business_id":"b","payload":"","content_type":"text/plain","ring_at":"2026-01-01T10:30:00.123456789Z","max_attempts":2}`},
		{NewClock{Application: "a", BusinessID: "b", Schedule: &Schedule{Every: time.Minute}}, `{"application":"a","business_id":"b","payload":"","schedule":{"every":"1m0s"}}`},
		{Change{ClearLatestRingAt: true, Delay: time.Second}, `{"delay":1000,"latest_ring_at":null}`},
	} {
		var got []byte
		var err error
		switch v := tt.v.(type) {
		case NewClock:
			got, err = json.Marshal(v.body())
		case Change:
			got, err = json.Marshal(v.body())
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("%+v:\n got %s\nwant %s (%v)", tt.v, got, tt.want, err)
		}
	}
}
