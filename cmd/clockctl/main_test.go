package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorded is one request the fake server received.
type recorded struct {
	Method  string
	RawPath string // as sent on the wire
	App, ID string // path segments, decoded by the server
	Query   url.Values
	Body    map[string]any
}

// fakeClockd answers like the SPEC, from memory.
type fakeClockd struct {
	mu     sync.Mutex
	reqs   []recorded
	clocks map[[2]string]map[string]any
	nextID int
	now    time.Time
}

func newFake(t *testing.T) (*fakeClockd, *httptest.Server) {
	t.Helper()
	f := &fakeClockd{clocks: map[[2]string]map[string]any{}, now: time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/clocks", f.create)
	mux.HandleFunc("GET /v1/clocks", f.list)
	mux.HandleFunc("GET /v1/clocks/{app}/{id}", f.get)
	mux.HandleFunc("DELETE /v1/clocks/{app}/{id}", f.cancel)
	mux.HandleFunc("PATCH /v1/clocks/{app}/{id}", f.patch)
	mux.HandleFunc("POST /v1/clocks/{app}/{id}/replay", f.replay)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeClockd) record(r *http.Request) (map[string]any, error) {
	rec := recorded{
		Method:  r.Method,
		RawPath: r.URL.EscapedPath(),
		App:     r.PathValue("app"),
		ID:      r.PathValue("id"),
		Query:   r.URL.Query(),
	}
	var err error
	if r.Body != nil && r.ContentLength != 0 {
		dec := json.NewDecoder(r.Body)
		dec.UseNumber()
		err = dec.Decode(&rec.Body)
		if err == nil && r.Header.Get("Content-Type") != "application/json" {
			err = fmt.Errorf("content type %q", r.Header.Get("Content-Type"))
		}
	}
	f.reqs = append(f.reqs, rec)
	return rec.Body, err
}

func (f *fakeClockd) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

func (f *fakeClockd) last(t *testing.T) recorded {
	t.Helper()
	reqs := f.requests()
	if len(reqs) == 0 {
		t.Fatal("no request")
	}
	return reqs[len(reqs)-1]
}

func (f *fakeClockd) setStatus(app, id, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clocks[[2]string{app, id}]["status"] = status
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

var allowedFields = map[string]bool{
	"application": true, "business_id": true, "payload": true, "content_type": true,
	"ring_at": true, "delay": true, "latest_ring_at": true, "max_attempts": true,
}

// schedule applies ring_at/delay, payload, latest_ring_at and max_attempts.
func (f *fakeClockd) schedule(c, body map[string]any) error {
	for k := range body {
		if !allowedFields[k] {
			return fmt.Errorf("unknown field %q", k)
		}
	}
	if v, ok := body["ring_at"].(string); ok {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return err
		}
		c["ring_at"] = t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	if v, ok := body["delay"].(string); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		c["ring_at"] = f.now.Add(d).Format("2006-01-02T15:04:05.000Z07:00")
	}
	for _, k := range []string{"payload", "latest_ring_at", "max_attempts"} {
		if v, ok := body[k]; ok {
			c[k] = v
		}
	}
	return nil
}

func (f *fakeClockd) create(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	body, err := f.record(r)
	if err != nil {
		writeError(w, 400, "invalid_argument", err.Error())
		return
	}
	_, hasAt := body["ring_at"]
	_, hasDelay := body["delay"]
	if hasAt == hasDelay {
		writeError(w, 400, "invalid_argument", "exactly one of ring_at and delay")
		return
	}
	app, _ := body["application"].(string)
	id, _ := body["business_id"].(string)
	c := map[string]any{
		"application": app, "business_id": id, "payload": "", "content_type": "application/json",
		"latest_ring_at": nil, "max_attempts": 0, "status": "pending", "attempts": 0,
	}
	if ct, ok := body["content_type"].(string); ok {
		c["content_type"] = ct
	}
	if err := f.schedule(c, body); err != nil {
		writeError(w, 400, "invalid_argument", err.Error())
		return
	}
	if old, ok := f.clocks[[2]string{app, id}]; ok {
		if old["payload"] == c["payload"] && old["ring_at"] == c["ring_at"] {
			writeJSON(w, 200, old)
			return
		}
		writeError(w, 409, "conflict", "clock "+app+"/"+id+" exists with different content")
		return
	}
	f.nextID++
	c["id"] = f.nextID
	f.clocks[[2]string{app, id}] = c
	writeJSON(w, 201, c)
}

func (f *fakeClockd) find(w http.ResponseWriter, r *http.Request) (map[string]any, map[string]any, bool) {
	body, err := f.record(r)
	if err != nil {
		writeError(w, 400, "invalid_argument", err.Error())
		return nil, nil, false
	}
	c, ok := f.clocks[[2]string{r.PathValue("app"), r.PathValue("id")}]
	if !ok {
		writeError(w, 404, "not_found", "clock "+r.PathValue("app")+"/"+r.PathValue("id")+" not found")
		return nil, nil, false
	}
	return c, body, true
}

func (f *fakeClockd) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, _, ok := f.find(w, r); ok {
		writeJSON(w, 200, c)
	}
}

func (f *fakeClockd) cancel(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, _, ok := f.find(w, r)
	if !ok {
		return
	}
	if c["status"] != "pending" {
		writeError(w, 409, "conflict", fmt.Sprintf("clock is %s, not pending", c["status"]))
		return
	}
	c["status"] = "cancelled"
	writeJSON(w, 200, c)
}

func (f *fakeClockd) patch(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, body, ok := f.find(w, r)
	if !ok {
		return
	}
	if _, has := body["application"]; has {
		writeError(w, 400, "invalid_argument", "application cannot change")
		return
	}
	if _, has := body["content_type"]; has {
		writeError(w, 400, "invalid_argument", "unknown field content_type")
		return
	}
	if c["status"] != "pending" {
		writeError(w, 409, "conflict", fmt.Sprintf("clock is %s, not pending", c["status"]))
		return
	}
	if err := f.schedule(c, body); err != nil {
		writeError(w, 400, "invalid_argument", err.Error())
		return
	}
	writeJSON(w, 200, c)
}

func (f *fakeClockd) replay(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, _, ok := f.find(w, r)
	if !ok {
		return
	}
	if c["status"] != "expired" && c["status"] != "dead" {
		writeError(w, 409, "conflict", fmt.Sprintf("clock is %s, not expired or dead", c["status"]))
		return
	}
	c["status"] = "pending"
	writeJSON(w, 200, c)
}

// list answers newest id first; the cursor is the last id of the page.
func (f *fakeClockd) list(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.record(r); err != nil {
		writeError(w, 400, "invalid_argument", err.Error())
		return
	}
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			writeError(w, 400, "invalid_argument", "bad limit")
			return
		}
		limit = n
	}
	after := 1 << 30
	if v := q.Get("after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, 400, "invalid_argument", "bad cursor")
			return
		}
		after = n
	}
	var match []map[string]any
	for _, c := range f.clocks {
		if a := q.Get("application"); a != "" && c["application"] != a {
			continue
		}
		if s := q.Get("status"); s != "" && c["status"] != s {
			continue
		}
		if c["id"].(int) >= after {
			continue
		}
		match = append(match, c)
	}
	sort.Slice(match, func(i, j int) bool { return match[i]["id"].(int) > match[j]["id"].(int) })
	next := ""
	if len(match) > limit {
		match = match[:limit]
		next = strconv.Itoa(match[limit-1]["id"].(int))
	}
	if match == nil {
		match = []map[string]any{}
	}
	writeJSON(w, 200, map[string]any{"clocks": match, "next": next})
}

// result is the outcome of one clockctl invocation.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// clockctl runs the command against srv.
func clockctl(t *testing.T, srv *httptest.Server, args ...string) result {
	t.Helper()
	return clockctlIn(t, srv, "", args...)
}

func clockctlIn(t *testing.T, srv *httptest.Server, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := &cli{getenv: env(), stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr}
	if srv != nil {
		args = append([]string{"-addr", srv.URL}, args...)
	}
	code := c.run(context.Background(), args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func mustOK(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("want exit 0, got %v", r)
	}
}

func decodeClock(t *testing.T, r result) map[string]any {
	t.Helper()
	var c map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &c); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%v", err, r)
	}
	return c
}

func TestCreateSendsTheGivenFields(t *testing.T) {
	f, srv := newFake(t)
	r := clockctl(t, srv, "create", "-app", "order", "-id", "o-123", "-in", "30m",
		"-payload", `{"order":123}`, "-content-type", "text/plain",
		"-latest", "2026-01-02T00:00:00+02:00", "-max-attempts", "5")
	mustOK(t, r)
	req := f.last(t)
	if req.Method != "POST" || req.RawPath != "/v1/clocks" {
		t.Fatalf("request %s %s", req.Method, req.RawPath)
	}
	want := map[string]any{
		"application": "order", "business_id": "o-123", "delay": "30m",
		"payload": `{"order":123}`, "content_type": "text/plain",
		"latest_ring_at": "2026-01-02T00:00:00+02:00", "max_attempts": json.Number("5"),
	}
	if !reflect.DeepEqual(req.Body, want) {
		t.Fatalf("body %#v, want %#v", req.Body, want)
	}
	// Pretty-printed clock on stdout, nothing on stderr.
	if !strings.Contains(r.stdout, "\n  \"business_id\": \"o-123\"") || r.stderr != "" {
		t.Fatalf("output:\n%v", r)
	}
	if c := decodeClock(t, r); c["status"] != "pending" || c["ring_at"] != "2026-01-01T10:30:00.000Z" {
		t.Fatalf("clock %v", c)
	}

	// The same create again: 200 with the existing clock, a note on stderr.
	r = clockctl(t, srv, "create", "-app", "order", "-id", "o-123", "-in", "30m", "-payload", `{"order":123}`)
	mustOK(t, r)
	if !strings.Contains(r.stderr, "identical clock already exists") {
		t.Fatalf("no note for 200:\n%v", r)
	}

	// Different content: 409 rendered from the error body, exit 1.
	r = clockctl(t, srv, "create", "-app", "order", "-id", "o-123", "-in", "1h")
	if r.code != 1 || r.stdout != "" ||
		r.stderr != "clockctl: 409 conflict: clock order/o-123 exists with different content\n" {
		t.Fatalf("conflict:\n%v", r)
	}
}

func TestCreateAtOmitsUnsetFields(t *testing.T) {
	f, srv := newFake(t)
	mustOK(t, clockctl(t, srv, "create", "-app", "a", "-id", "b", "-at", "2026-01-01T12:30:00.5+02:00"))
	want := map[string]any{
		"application": "a", "business_id": "b", "ring_at": "2026-01-01T12:30:00.5+02:00", "payload": "",
	}
	if got := f.last(t).Body; !reflect.DeepEqual(got, want) {
		t.Fatalf("body %#v, want %#v", got, want)
	}
}

func TestCreatePayloadFromFileAndStdin(t *testing.T) {
	f, srv := newFake(t)
	payload := "line 1\n\"quoted\" ünïcødé\tand a tab\n"
	file := filepath.Join(t.TempDir(), "payload.json")
	if err := os.WriteFile(file, []byte(payload), 0o600); err != nil {
		t.Fatal(err)
	}
	mustOK(t, clockctl(t, srv, "create", "-app", "a", "-id", "file", "-in", "1m", "-payload-file", file))
	if got := f.last(t).Body["payload"]; got != payload {
		t.Fatalf("payload from file %q, want %q", got, payload)
	}
	mustOK(t, clockctlIn(t, srv, payload, "create", "-app", "a", "-id", "stdin", "-in", "1m", "-payload-file", "-"))
	if got := f.last(t).Body["payload"]; got != payload {
		t.Fatalf("payload from stdin %q, want %q", got, payload)
	}

	// Not UTF-8: refused before any request.
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(bin, []byte{0xff, 0xfe, 0x00}, 0o600); err != nil {
		t.Fatal(err)
	}
	n := len(f.requests())
	r := clockctl(t, srv, "create", "-app", "a", "-id", "bin", "-in", "1m", "-payload-file", bin)
	if r.code != 1 || !strings.Contains(r.stderr, "not valid UTF-8") || len(f.requests()) != n {
		t.Fatalf("binary payload:\n%v", r)
	}
	r = clockctl(t, srv, "create", "-app", "a", "-id", "missing", "-in", "1m", "-payload-file", filepath.Join(t.TempDir(), "nope"))
	if r.code != 1 || !strings.Contains(r.stderr, "read payload") {
		t.Fatalf("missing file:\n%v", r)
	}
}

func TestBusinessIDIsPathEscaped(t *testing.T) {
	f, srv := newFake(t)
	for _, id := range []string{"with space", "what?x=1", "hash#tag", "100%", "all ? # % & + = : @ ;", "ünï"} {
		t.Run(id, func(t *testing.T) {
			mustOK(t, clockctl(t, srv, "create", "-app", "my.app_1-x", "-id", id, "-in", "1m"))
			base := "/v1/clocks/my.app_1-x/" + url.PathEscape(id)
			check := func(method, rawPath string) {
				t.Helper()
				req := f.last(t)
				if req.Method != method || req.RawPath != rawPath || req.App != "my.app_1-x" || req.ID != id {
					t.Fatalf("request %+v, want %s %s with id %q", req, method, rawPath, id)
				}
				if len(req.Query) != 0 {
					t.Fatalf("id leaked into the query: %v", req.Query)
				}
			}
			r := clockctl(t, srv, "get", "my.app_1-x", id)
			mustOK(t, r)
			check("GET", base)
			if c := decodeClock(t, r); c["business_id"] != id {
				t.Fatalf("clock %v", c)
			}
			mustOK(t, clockctl(t, srv, "reschedule", "my.app_1-x", id, "-in", "2m"))
			check("PATCH", base)
			mustOK(t, clockctl(t, srv, "cancel", "my.app_1-x", id))
			check("DELETE", base)
			f.setStatus("my.app_1-x", id, "dead")
			mustOK(t, clockctl(t, srv, "replay", "my.app_1-x", id))
			check("POST", base+"/replay")
		})
	}
	// The characters that would change the meaning of the URL are escaped.
	for _, req := range f.requests() {
		if strings.Contains(req.ID, " ") && !strings.Contains(req.RawPath, "%20") ||
			strings.Contains(req.ID, "?") && !strings.Contains(req.RawPath, "%3F") ||
			strings.Contains(req.ID, "#") && !strings.Contains(req.RawPath, "%23") ||
			strings.Contains(req.ID, "%") && !strings.Contains(req.RawPath, "%25") {
			t.Errorf("not escaped: %q -> %s", req.ID, req.RawPath)
		}
	}
}

func TestDashedIDAfterDoubleDash(t *testing.T) {
	f, srv := newFake(t)
	mustOK(t, clockctl(t, srv, "create", "-app", "a", "-id", "-odd", "-in", "1m"))
	mustOK(t, clockctl(t, srv, "get", "a", "--", "-odd"))
	if req := f.last(t); req.ID != "-odd" {
		t.Fatalf("id %q", req.ID)
	}
	// A flag value "--" is not the end of the flags.
	mustOK(t, clockctl(t, srv, "create", "-app", "a", "-id", "b", "-in", "1m"))
	mustOK(t, clockctl(t, srv, "reschedule", "a", "-payload", "--", "b", "-in", "5m"))
	if got := f.last(t).Body; !reflect.DeepEqual(got, map[string]any{"payload": "--", "delay": "5m"}) {
		t.Fatalf("body %v", got)
	}
}

func TestRescheduleSendsOnlyTheGivenFields(t *testing.T) {
	f, srv := newFake(t)
	mustOK(t, clockctl(t, srv, "create", "-app", "a", "-id", "b", "-in", "1m", "-payload", "p", "-max-attempts", "3"))
	for _, tc := range []struct {
		args []string
		want map[string]any
	}{
		{[]string{"-in", "5m"}, map[string]any{"delay": "5m"}},
		{[]string{"-at", "2026-02-01T00:00:00Z"}, map[string]any{"ring_at": "2026-02-01T00:00:00Z"}},
		{[]string{"-payload", ""}, map[string]any{"payload": ""}},
		{[]string{"-max-attempts", "0"}, map[string]any{"max_attempts": json.Number("0")}},
		{[]string{"-latest", "2026-03-01T00:00:00Z", "-payload", "x"}, map[string]any{"latest_ring_at": "2026-03-01T00:00:00Z", "payload": "x"}},
		{[]string{"-latest", "none"}, map[string]any{"latest_ring_at": nil}},
	} {
		// Flags after the positional arguments.
		args := append([]string{"reschedule", "a", "b"}, tc.args...)
		r := clockctl(t, srv, args...)
		mustOK(t, r)
		req := f.last(t)
		if req.Method != "PATCH" || req.RawPath != "/v1/clocks/a/b" || !reflect.DeepEqual(req.Body, tc.want) {
			t.Errorf("%v: %s %s %#v, want %#v", tc.args, req.Method, req.RawPath, req.Body, tc.want)
		}
		decodeClock(t, r)
	}
	// Flags before the positional arguments work too.
	mustOK(t, clockctl(t, srv, "reschedule", "-in", "7m", "a", "b"))
	if got := f.last(t).Body; !reflect.DeepEqual(got, map[string]any{"delay": "7m"}) {
		t.Fatalf("body %v", got)
	}

	f.setStatus("a", "b", "rung")
	r := clockctl(t, srv, "reschedule", "a", "b", "-in", "1m")
	if r.code != 1 || r.stderr != "clockctl: 409 conflict: clock is rung, not pending\n" {
		t.Fatalf("not pending:\n%v", r)
	}
}

func TestCancelAndReplay(t *testing.T) {
	_, srv := newFake(t)
	mustOK(t, clockctl(t, srv, "create", "-app", "a", "-id", "b", "-in", "1m"))
	r := clockctl(t, srv, "cancel", "a", "b")
	mustOK(t, r)
	if c := decodeClock(t, r); c["status"] != "cancelled" {
		t.Fatalf("after cancel: %v", c)
	}
	r = clockctl(t, srv, "cancel", "a", "b")
	if r.code != 1 || r.stdout != "" || r.stderr != "clockctl: 409 conflict: clock is cancelled, not pending\n" {
		t.Fatalf("second cancel:\n%v", r)
	}
	r = clockctl(t, srv, "replay", "a", "b")
	if r.code != 1 || r.stderr != "clockctl: 409 conflict: clock is cancelled, not expired or dead\n" {
		t.Fatalf("replay of a cancelled clock:\n%v", r)
	}
}

func TestErrorRendering(t *testing.T) {
	_, srv := newFake(t)
	r := clockctl(t, srv, "get", "a", "missing")
	if r.code != 1 || r.stdout != "" || r.stderr != "clockctl: 404 not_found: clock a/missing not found\n" {
		t.Fatalf("404:\n%v", r)
	}

	// An answer that is not a SPEC error body, from a proxy for instance.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream\nconnect error", http.StatusBadGateway)
	}))
	t.Cleanup(proxy.Close)
	r = clockctl(t, proxy, "get", "a", "b")
	if r.code != 1 || r.stderr != "clockctl: 502 Bad Gateway: upstream connect error\n" {
		t.Fatalf("502:\n%v", r)
	}

	// A SPEC error with another status.
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, 503, "unavailable", "mysql is unreachable")
	}))
	t.Cleanup(down.Close)
	r = clockctl(t, down, "create", "-app", "a", "-id", "b", "-in", "1m")
	if r.code != 1 || r.stderr != "clockctl: 503 unavailable: mysql is unreachable\n" {
		t.Fatalf("503:\n%v", r)
	}

	// Nobody listening.
	r = clockctl(t, nil, "-addr", "127.0.0.1:1", "get", "a", "b")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "clockctl: GET http://127.0.0.1:1/v1/clocks/a/b: ") {
		t.Fatalf("refused:\n%v", r)
	}
}

// An error of clockd is printed once: its message without what it
// repeats (the code, a part of its chain), and nothing else lost.
func TestErrorSaidOnce(t *testing.T) {
	tests := []struct {
		code, msg, want string
	}{
		{"unauthenticated", "unauthenticated: the token is not valid (unknown or revoked)", "the token is not valid (unknown or revoked)"},
		{"permission_denied", "permission denied: token 3 lacks the write scope", "token 3 lacks the write scope"},
		{"not_found", "pause clock cart/nope: clock cart/nope: not found", "pause clock cart/nope: not found"},
		{"not_found", "cancel clock a/x: y: clock a/x: y: not found", "cancel clock a/x: y: not found"},
		{"not_found", "clock cart/nope: not found", "clock cart/nope: not found"},
		{"not_found", "token 5: not found", "token 5: not found"},
		{"invalid_argument", "delay: delay: must be positive", "delay: must be positive"},
		{"conflict", "cannot cancel clock a/b: it is rung", "cannot cancel clock a/b: it is rung"},
		{"conflict", "conflict", "conflict"},
		{"unavailable", "a dependency of clockd did not answer in time; retry later (request id 7)", "a dependency of clockd did not answer in time; retry later (request id 7)"},
		{"invalid_argument", "business_id: a/b: b: not allowed", "business_id: a/b: b: not allowed"},
	}
	for _, tt := range tests {
		if got := sayOnce(tt.code, tt.msg); got != tt.want {
			t.Errorf("sayOnce(%q, %q) = %q, want %q", tt.code, tt.msg, got, tt.want)
		}
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			writeError(w, 401, "unauthenticated", "unauthenticated: this call needs an Authorization: Bearer <token> header")
			return
		}
		writeError(w, 404, "not_found", "pause clock cart/nope: clock cart/nope: not found")
	}))
	t.Cleanup(srv.Close)
	r := clockctl(t, srv, "get", "a", "b")
	if want := "clockctl: 401 unauthenticated: this call needs an Authorization: Bearer <token> header (give a token with -token or CLOCKD_TOKEN)\n"; r.code != 1 || r.stderr != want {
		t.Errorf("401:\n%v\nwant stderr %q", r, want)
	}
	r = clockctl(t, srv, "-token", "t", "pause", "cart", "nope")
	if want := "clockctl: 404 not_found: pause clock cart/nope: not found\n"; r.code != 1 || r.stderr != want {
		t.Errorf("404:\n%v\nwant stderr %q", r, want)
	}
}

// silentServer takes requests and never answers them (until the client
// gives up or the test ends).
func silentServer(t *testing.T) *httptest.Server {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) })
	return slow
}

func TestTimeout(t *testing.T) {
	slow := silentServer(t)
	r := clockctl(t, nil, "-addr", slow.URL, "-timeout", "50ms", "get", "a", "b")
	if r.code != 1 || !strings.Contains(r.stderr, "no answer within 50ms") {
		t.Fatalf("timeout:\n%v", r)
	}
}

func TestAddrFromEnvironment(t *testing.T) {
	f, srv := newFake(t)
	var stdout, stderr bytes.Buffer
	// Without a scheme, http:// is assumed; a trailing slash is ignored.
	addr := strings.TrimPrefix(srv.URL, "http://") + "/"
	code := run(context.Background(), []string{"get", "a", "b"}, env("CLOCKD_ADDR", addr), &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "404 not_found") {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	if req := f.last(t); req.RawPath != "/v1/clocks/a/b" {
		t.Fatalf("path %s", req.RawPath)
	}
}

func createMany(t *testing.T, srv *httptest.Server, app string, n int) {
	t.Helper()
	for i := range n {
		mustOK(t, clockctl(t, srv, "create", "-app", app, "-id", fmt.Sprintf("%s id %d", app, i), "-in", fmt.Sprintf("%dm", i+1)))
	}
}

func TestListTable(t *testing.T) {
	f, srv := newFake(t)
	createMany(t, srv, "order", 3)
	createMany(t, srv, "other", 1)
	r := clockctl(t, srv, "list", "-app", "order", "-status", "pending", "-limit", "2")
	mustOK(t, r)
	req := f.last(t)
	want := url.Values{"application": {"order"}, "status": {"pending"}, "limit": {"2"}}
	if req.Method != "GET" || req.RawPath != "/v1/clocks" || !reflect.DeepEqual(req.Query, want) {
		t.Fatalf("request %+v", req)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want header and 2 rows:\n%v", r)
	}
	if got := strings.Fields(lines[0]); !reflect.DeepEqual(got, []string{"ID", "APPLICATION", "BUSINESS_ID", "STATUS", "RING_AT", "ATTEMPTS"}) {
		t.Fatalf("header %q", lines[0])
	}
	if got := strings.Fields(lines[1]); !reflect.DeepEqual(got, []string{"3", "order", "order", "id", "2", "pending", "2026-01-01T10:03:00.000Z", "0"}) {
		t.Fatalf("row %q", lines[1])
	}
	// Columns are aligned.
	if strings.Index(lines[0], "STATUS") != strings.Index(lines[1], "pending") {
		t.Fatalf("not aligned:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "-after 2 ") {
		t.Fatalf("no hint about the next page:\n%v", r)
	}

	// -after is passed on; the last page has no hint.
	r = clockctl(t, srv, "list", "-app", "order", "-limit", "2", "-after", "2")
	mustOK(t, r)
	if got := f.last(t).Query.Get("after"); got != "2" {
		t.Fatalf("after %q", got)
	}
	if n := strings.Count(r.stdout, "\n"); n != 2 || r.stderr != "" {
		t.Fatalf("last page:\n%v", r)
	}
}

func TestListAllFollowsTheCursor(t *testing.T) {
	f, srv := newFake(t)
	createMany(t, srv, "order", 5)
	before := len(f.requests())
	r := clockctl(t, srv, "list", "-app", "order", "-limit", "2", "-all", "-json")
	mustOK(t, r)
	if r.stderr != "" {
		t.Fatalf("stderr:\n%v", r)
	}
	var afters []string
	for _, req := range f.requests()[before:] {
		afters = append(afters, req.Query.Get("after"))
		if req.Query.Get("application") != "order" || req.Query.Get("limit") != "2" {
			t.Fatalf("filters lost on a later page: %v", req.Query)
		}
	}
	if !reflect.DeepEqual(afters, []string{"", "4", "2"}) {
		t.Fatalf("cursors %q", afters)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("want 5 JSON lines:\n%v", r)
	}
	for i, line := range lines {
		var c map[string]any
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("line %d %q: %v", i, line, err)
		}
		if c["id"] != float64(5-i) {
			t.Fatalf("line %d has id %v", i, c["id"])
		}
	}

	// An empty list: the header only.
	r = clockctl(t, srv, "list", "-app", "nobody", "-all")
	mustOK(t, r)
	if strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("empty list:\n%v", r)
	}
}

func TestListAllStopsOnARepeatedCursor(t *testing.T) {
	var calls int
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		writeJSON(w, 200, map[string]any{"clocks": []any{map[string]any{"id": calls}}, "next": "same"})
	}))
	t.Cleanup(loop.Close)
	r := clockctl(t, loop, "list", "-all", "-json")
	if r.code != 1 || !strings.Contains(r.stderr, `cursor "same" twice`) || calls != 2 {
		t.Fatalf("loop (%d calls):\n%v", calls, r)
	}
	if strings.Count(r.stdout, "\n") != 2 {
		t.Fatalf("pages before the error are printed:\n%v", r)
	}
}

func TestListErrorMidway(t *testing.T) {
	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls > 1 {
			writeError(w, 400, "invalid_argument", "bad cursor")
			return
		}
		writeJSON(w, 200, map[string]any{"clocks": []any{map[string]any{"id": 9, "application": "a", "business_id": "b", "status": "rung", "ring_at": "2026-01-01T00:00:00.000Z", "attempts": 1}}, "next": "x"})
	}))
	t.Cleanup(srv.Close)
	r := clockctl(t, srv, "list", "-all")
	if r.code != 1 || r.stderr != "clockctl: 400 invalid_argument: bad cursor\n" || !strings.Contains(r.stdout, "rung") {
		t.Fatalf("error on page 2:\n%v", r)
	}

	// An error on the first page prints no table header.
	r = clockctl(t, srv, "list", "-status", "x")
	if r.code != 1 || r.stdout != "" {
		t.Fatalf("error on page 1:\n%v", r)
	}
}

func TestCluster(t *testing.T) {
	// The fake has no /v1/cluster: the mux answers a plain 404.
	_, srv := newFake(t)
	r := clockctl(t, srv, "cluster")
	if r.code != 1 || r.stderr != "clockctl: 404 Not Found: 404 page not found (this clockd does not seem to serve GET /v1/cluster)\n" {
		t.Fatalf("missing endpoint:\n%v", r)
	}

	answer := `{"now":"2026-01-01T10:00:00.000Z","shard_count":10,"instances":[` +
		`{"instance_id":"host-a-1","http_addr":"10.0.0.1:8080","started_at":"2026-01-01T09:00:00.000Z","expires_at":"2026-01-01T10:00:10.000Z","live":true,"shards":[` +
		`{"shard":0,"epoch":3,"lease_until":"2026-01-01T10:00:10.000Z"},{"shard":1,"epoch":3,"lease_until":"2026-01-01T10:00:10.000Z"},` +
		`{"shard":2,"epoch":1,"lease_until":"2026-01-01T10:00:09.000Z"},{"shard":5,"epoch":2,"lease_until":"2026-01-01T10:00:10.000Z"}]},` +
		`{"instance_id":"host-b-2","http_addr":"10.0.0.2:8080","started_at":"2026-01-01T09:00:00.000Z","expires_at":"2026-01-01T09:59:00.000Z","live":false,"shards":[]}],` +
		`"unowned_shards":[3,4,6,7,8,9]}`
	cl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "GET" || r.URL.Path != "/v1/cluster" {
			writeError(w, 404, "not_found", r.Method+" "+r.URL.Path)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, answer)
	}))
	t.Cleanup(cl.Close)
	r = clockctl(t, cl, "cluster")
	mustOK(t, r)
	want := "INSTANCE  ADDR           LIVE  COUNT  SHARDS  LEASES UNTIL\n" +
		"host-a-1  10.0.0.1:8080  yes   4      0-2,5   2026-01-01T10:00:09.000Z\n" +
		"host-b-2  10.0.0.2:8080  no    0      -       -\n" +
		"10 shards; unowned: 3-4,6-9 (database time 2026-01-01T10:00:00.000Z)\n"
	if r.stdout != want {
		t.Fatalf("table:\n%s\nwant:\n%s", r.stdout, want)
	}
	r = clockctl(t, cl, "cluster", "-json")
	mustOK(t, r)
	var got, exp any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || json.Unmarshal([]byte(answer), &exp) != nil || !reflect.DeepEqual(got, exp) {
		t.Fatalf("json: %v\n%v", err, r)
	}
}

func TestClusterUnknownShapeIsPrintedAsJSON(t *testing.T) {
	cl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"leases":[{"shard":0,"owner":"x"}]}`)
	}))
	t.Cleanup(cl.Close)
	r := clockctl(t, cl, "cluster")
	mustOK(t, r)
	if !strings.Contains(r.stdout, "\n  \"leases\": [") {
		t.Fatalf("not pretty JSON:\n%v", r)
	}
}

func TestUsageErrors(t *testing.T) {
	f, srv := newFake(t)
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{nil, "Usage:"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"create"}, "-app and -id are required"},
		{[]string{"create", "-app", "a"}, "-app and -id are required"},
		{[]string{"create", "-app", "a", "-id", "b"}, "give the ring time with -at or -in"},
		{[]string{"create", "-app", "a", "-id", "b", "-in", "1m", "-at", "2026-01-01T00:00:00Z"}, "give -at or -in, not both"},
		{[]string{"create", "-app", "a", "-id", "b", "-at", "tomorrow"}, `-at "tomorrow": want an RFC 3339 time`},
		{[]string{"create", "-app", "a", "-id", "b", "-at", "2026-01-01 10:00:00"}, "want an RFC 3339 time"},
		{[]string{"create", "-app", "a", "-id", "b", "-in", "30"}, `-in "30": want a Go duration`},
		{[]string{"create", "-app", "a", "-id", "b", "-in", "1m", "-latest", "soon"}, `-latest "soon"`},
		{[]string{"create", "-app", "a", "-id", "b", "-in", "1m", "-max-attempts", "-1"}, "-max-attempts must not be negative"},
		{[]string{"create", "-app", "a", "-id", "b", "-in", "1m", "-max-attempts", "x"}, `invalid value "x" for flag -max-attempts`},
		{[]string{"create", "-app", "a", "-id", "b", "-in", "1m", "-payload", "x", "-payload-file", "-"}, "give -payload or -payload-file, not both"},
		{[]string{"create", "-app", "a", "-id", "x/y", "-in", "1m"}, "must not contain '/'"},
		{[]string{"create", "-app", "a", "-id", "b", "-in", "1m", "extra"}, `unexpected argument "extra"`},
		{[]string{"create", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"get"}, "want APP BUSINESS_ID, got 0 argument(s)"},
		{[]string{"get", "a"}, "want APP BUSINESS_ID, got 1 argument(s)"},
		{[]string{"get", "a", "b", "c"}, "want APP BUSINESS_ID, got 3 argument(s)"},
		{[]string{"get", "a", "b/c"}, "must not contain '/'"},
		{[]string{"get", "", "b"}, "the application is empty"},
		{[]string{"cancel", "a"}, "want APP BUSINESS_ID"},
		{[]string{"replay"}, "want APP BUSINESS_ID"},
		{[]string{"reschedule", "a", "b"}, "nothing to change"},
		{[]string{"reschedule", "a", "b", "-in", "1m", "-at", "2026-01-01T00:00:00Z"}, "not both"},
		{[]string{"reschedule", "a", "b", "-content-type", "x"}, "flag provided but not defined: -content-type"},
		{[]string{"list", "-limit", "-1"}, "-limit must not be negative"},
		{[]string{"list", "pending"}, `unexpected argument "pending"`},
		{[]string{"cluster", "x"}, `unexpected argument "x"`},
		{[]string{"bind"}, "-app is required"},
		{[]string{"bind", "-app", "a b"}, "an application is 1-64 characters"},
		{[]string{"bind", "-app", "a", "-exchange", ""}, "-exchange is empty"},
		{[]string{"-timeout", "-1s", "get", "a", "b"}, "-timeout must not be negative"},
		{[]string{"-timeout", "soon", "get", "a", "b"}, `invalid value "soon" for flag -timeout`},
		{[]string{"-addr", "ftp://x", "get", "a", "b"}, "want http://host:port"},
		{[]string{"help", "nope"}, `unknown command "nope"`},
	} {
		r := clockctl(t, srv, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("%q: want exit 2 and %q in stderr, got %v", tc.args, tc.want, r)
		}
	}
	if n := len(f.requests()); n != 0 {
		t.Fatalf("usage errors sent %d requests", n)
	}
}

func TestHelp(t *testing.T) {
	for _, name := range []string{"create", "get", "cancel", "reschedule", "replay", "list", "cluster", "bind"} {
		for _, args := range [][]string{{name, "-h"}, {name, "--help"}, {"help", name}} {
			r := clockctl(t, nil, args...)
			if r.code != 0 || r.stderr != "" ||
				!strings.HasPrefix(r.stdout, "Usage: clockctl "+name) || !strings.Contains(r.stdout, "Example") {
				t.Errorf("%q:\n%v", args, r)
			}
		}
	}
	r := clockctl(t, nil, "create", "-h")
	for _, flag := range []string{"-app", "-id", "-at", "-in", "-payload", "-payload-file", "-content-type", "-latest", "-max-attempts"} {
		if !strings.Contains(r.stdout, "\n  "+flag+" ") {
			t.Errorf("create -h does not list %s:\n%s", flag, r.stdout)
		}
	}
	for _, args := range [][]string{{"-h"}, {"help"}} {
		r := clockctl(t, nil, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Commands:") || !strings.Contains(r.stdout, "bind") {
			t.Errorf("%q:\n%v", args, r)
		}
	}
}

func TestShardRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, "-"},
		{[]int{3}, "3"},
		{[]int{0, 1, 2}, "0-2"},
		{[]int{7, 0, 2, 1, 5, 8}, "0-2,5,7-8"},
		{[]int{1, 1, 2}, "1-2"},
	} {
		if got := shardRanges(tc.in); got != tc.want {
			t.Errorf("shardRanges(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
