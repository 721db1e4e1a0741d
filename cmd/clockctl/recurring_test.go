package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
)

// recordingServer answers every call with a clock and records what came.
func recordingServer(t *testing.T) (*httptest.Server, func() []map[string]any) {
	t.Helper()
	var mu sync.Mutex
	var got []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := map[string]any{"method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery}
		if r.ContentLength != 0 && r.Body != nil {
			var b map[string]any
			if err := json.NewDecoder(r.Body).Decode(&b); err == nil {
				rec["body"] = b
			}
		}
		mu.Lock()
		got = append(got, rec)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/clocks" && r.Method == http.MethodGet {
			_, _ = w.Write([]byte(`{"clocks":[],"next":""}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":1,"application":"cart","business_id":"close-stale","status":"pending"}`))
	}))
	t.Cleanup(srv.Close)
	return srv, func() []map[string]any {
		mu.Lock()
		defer mu.Unlock()
		return append([]map[string]any(nil), got...)
	}
}

func TestRecurringFlags(t *testing.T) {
	srv, got := recordingServer(t)
	mustOK(t, clockctl(t, srv, "create", "-app", "cart", "-id", "close-stale", "-cron", "0 2 * * *", "-tz", "Europe/Berlin"))
	mustOK(t, clockctl(t, srv, "create", "-app", "pay", "-id", "poll", "-every", "30s", "-start", "2030-01-01T00:00:00Z",
		"-max-occurrences", "100", "-misfire", "catch_up", "-catch-up-limit", "5", "-occurrence-deadline", "2m"))
	mustOK(t, clockctl(t, srv, "reschedule", "cart", "close-stale", "-cron", "30 3 * * *", "-tz", "Europe/Berlin"))
	mustOK(t, clockctl(t, srv, "pause", "cart", "close-stale"))
	mustOK(t, clockctl(t, srv, "resume", "cart", "close-stale"))
	mustOK(t, clockctl(t, srv, "list", "-app", "cart", "-recurring", "true"))
	reqs := got()
	want := []map[string]any{
		{"method": "POST", "path": "/v1/clocks", "query": "", "body": map[string]any{"application": "cart", "business_id": "close-stale", "payload": "",
			"schedule": map[string]any{"cron": "0 2 * * *", "time_zone": "Europe/Berlin"}}},
		{"method": "POST", "path": "/v1/clocks", "query": "", "body": map[string]any{"application": "pay", "business_id": "poll", "payload": "",
			"schedule": map[string]any{"every": "30s", "start": "2030-01-01T00:00:00Z", "max_occurrences": 100.0, "misfire": "catch_up",
				"catch_up_limit": 5.0, "occurrence_deadline": "2m"}}},
		{"method": "PATCH", "path": "/v1/clocks/cart/close-stale", "query": "", "body": map[string]any{
			"schedule": map[string]any{"cron": "30 3 * * *", "time_zone": "Europe/Berlin"}}},
		{"method": "POST", "path": "/v1/clocks/cart/close-stale/pause", "query": ""},
		{"method": "POST", "path": "/v1/clocks/cart/close-stale/resume", "query": ""},
		{"method": "GET", "path": "/v1/clocks", "query": "application=cart&recurring=true"},
	}
	if len(reqs) != len(want) {
		t.Fatalf("%d requests, want %d: %v", len(reqs), len(want), reqs)
	}
	for i := range want {
		if !reflect.DeepEqual(reqs[i], want[i]) {
			t.Errorf("request %d:\n got %v\nwant %v", i, reqs[i], want[i])
		}
	}
	// refused before any request
	for _, args := range [][]string{
		{"create", "-app", "a", "-id", "b", "-cron", "* * * * *", "-every", "1m"},
		{"create", "-app", "a", "-id", "b", "-cron", "* * * * *", "-in", "1m"},
		{"create", "-app", "a", "-id", "b", "-every", "soon"},
		{"create", "-app", "a", "-id", "b", "-every", "1m", "-tz", "Europe/Berlin"},
		{"create", "-app", "a", "-id", "b", "-misfire", "skip"},
	} {
		if r := clockctl(t, srv, args...); r.code == 0 {
			t.Errorf("%v: accepted", args)
		}
	}
	if n := len(got()); n != len(want) {
		t.Errorf("refused commands sent %d requests", n-len(want))
	}
}
