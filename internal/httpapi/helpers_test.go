package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
)

const (
	testShards     = 8
	testMaxBody    = 256 << 10
	testMaxPayload = 64 << 10
)

// apiEnv is a REST API on a real MySQL store in the test's own database.
type apiEnv struct {
	t      *testing.T
	srv    *httptest.Server
	client *http.Client
	db     *sqlx.DB
	store  *mysql.Store
	reg    *prometheus.Registry
}

// newAPI starts the API; edit may change the options (e.g. readiness checks).
func newAPI(t *testing.T, edit ...func(*httpapi.Options)) *apiEnv {
	t.Helper()
	return newAPIDB(t, func(_ *sqlx.DB, o *httpapi.Options) {
		for _, e := range edit {
			e(o)
		}
	})
}

// newAPIDB is newAPI with edits that need the database (auth, quotas).
func newAPIDB(t *testing.T, edit ...func(*sqlx.DB, *httpapi.Options)) *apiEnv {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := mysql.Open(ctx, dsn, 32)
	if err != nil {
		t.Fatalf("mysql.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	log := slog.New(slog.DiscardHandler)
	if err := mysql.Migrate(ctx, db, log); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	shards, err := mysql.SetupShards(ctx, db, testShards)
	if err != nil {
		t.Fatalf("SetupShards: %v", err)
	}
	reg := prometheus.NewRegistry()
	store := mysql.NewStore(db, mysql.StoreConfig{Shards: shards, Logger: log, Registerer: reg})
	t.Cleanup(store.Close)
	svc := alarm.NewService(store, nil, time.Now, alarm.Limits{MaxPayloadBytes: testMaxPayload}, 0)
	opts := httpapi.Options{
		Service: svc, Logger: log, Registerer: reg, Gatherer: reg, MaxBodyBytes: testMaxBody,
		Ready: []httpapi.Check{{Name: "mysql", Check: store.Ping}},
	}
	for _, e := range edit {
		e(db, &opts)
	}
	// Every request and answer of the API tests is checked against the
	// OpenAPI document (openapi_test.go): drift fails the test.
	srv := httptest.NewServer(validateOpenAPI(t, httpapi.New(opts)))
	t.Cleanup(srv.Close)
	tr := &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}
	t.Cleanup(tr.CloseIdleConnections)
	return &apiEnv{t: t, srv: srv, client: &http.Client{Transport: tr, Timeout: time.Minute}, db: db, store: store, reg: reg}
}

// do sends a request and returns the status and the body. body may be a
// string (sent as is) or any value (sent as JSON); nil sends no body.
func (e *apiEnv) do(method, path string, body any) (int, []byte) {
	e.t.Helper()
	code, data, err := e.try(method, path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	return code, data
}

// try is do without failing the test: safe in goroutines.
func (e *apiEnv) try(method, path string, body any) (int, []byte, error) {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, r)
	if err != nil {
		return 0, nil, err
	}
	if r != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	if ct := resp.Header.Get("Content-Type"); path != "/metrics" && !strings.HasPrefix(ct, "application/json") {
		return 0, nil, fmt.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	return resp.StatusCode, data, nil
}

// mustClock checks the status and the JSON shape of a clock answer and decodes it.
func (e *apiEnv) mustClock(wantCode int, method, path string, body any) httpapi.Clock {
	e.t.Helper()
	code, data := e.do(method, path, body)
	if code != wantCode {
		e.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, code, wantCode, data)
	}
	return checkClockJSON(e.t, data)
}

// mustError checks the status and the JSON shape of an error answer and returns its message.
func (e *apiEnv) mustError(wantCode int, method, path string, body any) string {
	e.t.Helper()
	code, data := e.do(method, path, body)
	if code != wantCode {
		e.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, code, wantCode, data)
	}
	return checkErrorJSON(e.t, code, data)
}

var (
	timeRE    = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$`)
	clockKeys = []string{"application", "attempts", "business_id", "content_type", "created_at", "id",
		"last_error", "latest_ring_at", "max_attempts", "next_try_at", "occurrence_at", "occurrences", "paused",
		"payload", "ring_at", "rung_at", "schedule", "status", "updated_at"}
	codeOf = map[int]string{400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
		405: "method_not_allowed", 409: "conflict", 413: "too_large", 429: "resource_exhausted", 503: "unavailable", 500: "internal"}
)

func keysOf(m map[string]json.RawMessage) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// checkClockJSON checks a clock object has exactly the SPEC's fields with
// the SPEC's types and time format, and decodes it.
func checkClockJSON(t testing.TB, data []byte) httpapi.Clock {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("clock %s: %v", data, err)
	}
	// the GET of one recurring clock adds its upcoming occurrences
	delete(m, "next_occurrences")
	if got := keysOf(m); strings.Join(got, ",") != strings.Join(clockKeys, ",") {
		t.Fatalf("clock fields %v, want %v", got, clockKeys)
	}
	for _, f := range []string{"ring_at", "next_try_at", "created_at", "updated_at", "latest_ring_at", "rung_at"} {
		var s *string
		if err := json.Unmarshal(m[f], &s); err != nil {
			t.Errorf("%s = %s: not a string or null", f, m[f])
			continue
		}
		nullable := f == "latest_ring_at" || f == "rung_at"
		if s == nil {
			if !nullable {
				t.Errorf("%s is null", f)
			}
			continue
		}
		if !timeRE.MatchString(*s) {
			t.Errorf("%s = %q, want RFC 3339 UTC with milliseconds", f, *s)
		}
	}
	for _, f := range []string{"id", "max_attempts", "attempts"} {
		var n int64
		if err := json.Unmarshal(m[f], &n); err != nil {
			t.Errorf("%s = %s: not an integer", f, m[f])
		}
	}
	for _, f := range []string{"application", "business_id", "payload", "content_type", "status"} {
		var s string
		if err := json.Unmarshal(m[f], &s); err != nil {
			t.Errorf("%s = %s: not a string", f, m[f])
		}
	}
	var le *string
	if err := json.Unmarshal(m["last_error"], &le); err != nil {
		t.Errorf("last_error = %s: not a string or null", m["last_error"])
	}
	var c httpapi.Clock
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	if !alarm.Status(c.Status).Valid() {
		t.Errorf("status %q is not a SPEC status", c.Status)
	}
	return c
}

// checkErrorJSON checks an error answer has the SPEC shape and the code
// of its status, and returns the message.
func checkErrorJSON(t testing.TB, status int, data []byte) string {
	t.Helper()
	var outer map[string]json.RawMessage
	if err := json.Unmarshal(data, &outer); err != nil {
		t.Fatalf("error body %s: %v", data, err)
	}
	if got := keysOf(outer); len(got) != 1 || got[0] != "error" {
		t.Fatalf("error body fields %v, want [error]: %s", got, data)
	}
	var inner map[string]json.RawMessage
	if err := json.Unmarshal(outer["error"], &inner); err != nil {
		t.Fatalf("error object %s: %v", outer["error"], err)
	}
	if got := keysOf(inner); strings.Join(got, ",") != "code,message" {
		t.Fatalf("error fields %v, want [code message]: %s", got, data)
	}
	var d httpapi.ErrorDetail
	if err := json.Unmarshal(outer["error"], &d); err != nil {
		t.Fatal(err)
	}
	if want := codeOf[status]; d.Code != want {
		t.Errorf("error code %q for status %d, want %q", d.Code, status, want)
	}
	if d.Message == "" {
		t.Errorf("error message is empty")
	}
	return d.Message
}

// parseTime parses a time of an answer.
func parseTime(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %q: %v", s, err)
	}
	return v
}

func fmtTime(t time.Time) string { return t.UTC().Format(httpapi.TimeFormat) }

// tableState summarises every row of the clock table, so that a test can
// tell that a request wrote nothing.
func (e *apiEnv) tableState() string {
	e.t.Helper()
	var st struct {
		N   int64  `db:"n"`
		Sum string `db:"s"`
	}
	err := e.db.Get(&st, `SELECT COUNT(*) AS n, CAST(COALESCE(SUM(CRC32(CONCAT_WS('|', id, application, business_id,
		status, payload, content_type, target_ring_at, COALESCE(latest_ring_at, 'null'), max_attempts, attempts,
		next_try_time, update_time))), 0) AS CHAR) AS s FROM clock`)
	if err != nil {
		e.t.Fatalf("table state: %v", err)
	}
	return fmt.Sprintf("%d rows, checksum %s", st.N, st.Sum)
}

func (e *apiEnv) count(where string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.Get(&n, "SELECT COUNT(*) FROM clock WHERE "+where, args...); err != nil {
		e.t.Fatalf("count: %v", err)
	}
	return n
}

func (e *apiEnv) exec(q string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Exec(q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

// body builds a create body.
type body map[string]any

func createBody(app, id string, extra ...any) body {
	b := body{"application": app, "business_id": id, "payload": `{"n":1}`, "delay": "1h"}
	for i := 0; i+1 < len(extra); i += 2 {
		k := extra[i].(string)
		if extra[i+1] == nil {
			delete(b, k)
			continue
		}
		b[k] = extra[i+1]
	}
	return b
}

// null is a JSON null in a body built with createBody (nil removes the field).
type null struct{}

func (null) MarshalJSON() ([]byte, error) { return []byte("null"), nil }

// with returns the environment reporting to t (a subtest).
func (e *apiEnv) with(t *testing.T) *apiEnv {
	c := *e
	c.t = t
	return &c
}
