package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/clockd/clockd/internal/httpapi"
)

// openAPIChecker validates requests and answers against the OpenAPI
// document that clockd serves (internal/httpapi/openapi.json).
type openAPIChecker struct {
	doc    *openapi3.T
	router routers.Router
	opts   *openapi3filter.Options
	// Bodies are validated with schemas compiled once each: kin-openapi
	// compiles a JSON Schema 2020-12 validator on every call (7 ms a body,
	// far more under -race), which would slow the API suite tenfold.
	compiler *jsonschema.Compiler
	mu       sync.Mutex
	schemas  map[string]*jsonschema.Schema
}

// docURL is where the compiler finds openapi.json.
const docURL = "mem:///openapi.json"

// schema compiles (once) the schema at a JSON pointer of openapi.json.
func (c *openAPIChecker) schema(pointer string) (*jsonschema.Schema, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sch, ok := c.schemas[pointer]; ok {
		return sch, nil
	}
	sch, err := c.compiler.Compile(docURL + pointer)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", pointer, err)
	}
	c.schemas[pointer] = sch
	return sch, nil
}

// validateBody checks a JSON body against the schema at pointer.
func (c *openAPIChecker) validateBody(pointer string, body []byte) error {
	sch, err := c.schema(pointer)
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("body is not JSON: %w", err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%#v", err) // the whole tree of causes
	}
	return nil
}

// pointerEscape escapes a JSON pointer token.
func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

var (
	checkerOnce sync.Once
	checker     *openAPIChecker
	checkerErr  error
)

// loadOpenAPI loads and validates the document once per test binary.
func loadOpenAPI(t testing.TB) *openAPIChecker {
	t.Helper()
	checkerOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(httpapi.OpenAPI())
		if err != nil {
			checkerErr = fmt.Errorf("load openapi.json: %w", err)
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			checkerErr = fmt.Errorf("openapi.json is not a valid OpenAPI document: %w", err)
			return
		}
		// Match any host: the test servers listen on random ports.
		doc.Servers = nil
		router, err := legacy.NewRouter(doc)
		if err != nil {
			checkerErr = fmt.Errorf("router of openapi.json: %w", err)
			return
		}
		opts := &openapi3filter.Options{
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			MultiError:         true,
			ExcludeRequestBody: true, ExcludeResponseBody: true, // validateBody does them
		}
		raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(httpapi.OpenAPI()))
		if err != nil {
			checkerErr = err
			return
		}
		comp := jsonschema.NewCompiler()
		comp.DefaultDraft(jsonschema.Draft2020)
		if err := comp.AddResource(docURL, raw); err != nil {
			checkerErr = err
			return
		}
		checker = &openAPIChecker{doc: doc, router: router, opts: opts, compiler: comp, schemas: map[string]*jsonschema.Schema{}}
	})
	if checkerErr != nil {
		t.Fatal(checkerErr)
	}
	return checker
}

// exchange is one request and its answer as the server saw them.
type exchange struct {
	method, target string
	header         http.Header
	reqBody        []byte
	status         int
	respHeader     http.Header
	respBody       []byte
}

// check returns what in the exchange disagrees with the document; nil
// when nothing does.
func (c *openAPIChecker) check(x exchange) error {
	u, err := url.Parse(x.target)
	if err != nil {
		return err
	}
	u.Scheme, u.Host = "http", "clockd.test"
	req, err := http.NewRequest(x.method, u.String(), bytes.NewReader(x.reqBody))
	if err != nil {
		return err
	}
	req.Header = x.header.Clone()
	if len(x.reqBody) > 0 && req.Header.Get("Content-Type") == "" {
		// clockd reads every body as JSON, whatever its Content-Type says.
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		// A path or method the document does not have (or a path parameter
		// it does not allow, such as an escaped '/') must be refused, with
		// the SPEC error body.
		if x.status < 400 || x.status > 499 {
			return fmt.Errorf("%s %s is not in openapi.json but answered %d", x.method, u.Path, x.status)
		}
		return c.checkErrorBody(x)
	}
	if x.method == http.MethodPost && route.Path == "/v1/clocks/batch" && x.status == http.StatusOK {
		// Each item is accepted or refused on its own: only the accepted
		// ones must be valid by the document.
		body, err := acceptedItems(x)
		if err != nil {
			return err
		}
		if req, err = http.NewRequest(x.method, u.String(), bytes.NewReader(body)); err != nil {
			return err
		}
		req.Header = x.header.Clone()
		req.Header.Set("Content-Type", "application/json")
	}
	reqIn := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: c.opts}
	opPointer := "#/paths/" + pointerEscape(route.Path) + "/" + strings.ToLower(route.Method)
	var errs []error
	if x.status >= 200 && x.status <= 299 {
		// clockd accepted it, so the document must allow it.
		if err := openapi3filter.ValidateRequest(context.Background(), reqIn); err != nil {
			errs = append(errs, fmt.Errorf("request accepted with %d but not valid by openapi.json: %w", x.status, err))
		}
		if rb := route.Operation.RequestBody; rb != nil {
			// no body is fine where none is required (cancel, pause, ...)
			if len(x.reqBody) > 0 || rb.Value == nil || rb.Value.Required {
				if err := c.validateBody(opPointer+"/requestBody/content/application~1json/schema", reqBody(req)); err != nil {
					errs = append(errs, fmt.Errorf("request body accepted with %d but not valid by openapi.json: %w", x.status, err))
				}
			}
		} else if len(x.reqBody) > 0 {
			errs = append(errs, fmt.Errorf("request with a body accepted with %d, openapi.json has none", x.status))
		}
	}
	respIn := &openapi3filter.ResponseValidationInput{RequestValidationInput: reqIn, Status: x.status,
		Header: x.respHeader, Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, ExcludeResponseBody: true}}
	if err := openapi3filter.ValidateResponse(context.Background(), respIn); err != nil {
		errs = append(errs, fmt.Errorf("answer %d not valid by openapi.json: %w", x.status, err))
	} else if err := c.checkResponseBody(route, opPointer, x); err != nil {
		errs = append(errs, fmt.Errorf("answer %d not valid by openapi.json: %w", x.status, err))
	}
	return errors.Join(errs...)
}

// reqBody returns what req would send.
func reqBody(req *http.Request) []byte {
	if req.GetBody == nil {
		return nil
	}
	rc, err := req.GetBody()
	if err != nil {
		return nil
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return b
}

// checkResponseBody checks the answer's media type and body against the
// response the document gives for its status.
func (c *openAPIChecker) checkResponseBody(route *routers.Route, opPointer string, x exchange) error {
	code := strconv.Itoa(x.status)
	ref := route.Operation.Responses.Value(code)
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("status %d is not in openapi.json", x.status)
	}
	pointer := opPointer + "/responses/" + code
	if ref.Ref != "" {
		pointer = ref.Ref
	}
	ct := x.respHeader.Get("Content-Type")
	switch {
	case ref.Value.Content == nil:
		if len(x.respBody) > 0 {
			return fmt.Errorf("a body, where openapi.json has none")
		}
		return nil
	case ref.Value.Content.Get("application/json") != nil && strings.HasPrefix(ct, "application/json"):
		return c.validateBody(pointer+"/content/application~1json/schema", x.respBody)
	case ref.Value.Content.Get("text/plain") != nil && strings.HasPrefix(ct, "text/plain"):
		return nil
	}
	return fmt.Errorf("Content-Type %q is not in openapi.json", ct)
}

// acceptedItems replaces the body of a batch request with its items that
// were answered 2xx.
func acceptedItems(x exchange) ([]byte, error) {
	var in struct {
		Clocks []json.RawMessage `json:"clocks"`
	}
	var out struct {
		Results []struct {
			Status int `json:"status"`
		} `json:"results"`
	}
	if err := json.Unmarshal(x.reqBody, &in); err != nil {
		return nil, fmt.Errorf("batch request accepted but not a JSON object with clocks: %w", err)
	}
	if err := json.Unmarshal(x.respBody, &out); err != nil || len(out.Results) != len(in.Clocks) {
		return nil, fmt.Errorf("batch answer: %d results for %d clocks (%v)", len(out.Results), len(in.Clocks), err)
	}
	kept := []json.RawMessage{}
	for i, r := range out.Results {
		if r.Status >= 200 && r.Status <= 299 {
			kept = append(kept, in.Clocks[i])
		}
	}
	return json.Marshal(map[string]any{"clocks": kept})
}

// checkErrorBody validates an answer against the Error schema.
func (c *openAPIChecker) checkErrorBody(x exchange) error {
	return c.validateBody("#/components/schemas/Error", x.respBody)
}

// validateOpenAPI wraps the API so that every request it serves and every
// answer it gives is checked against openapi.json; a disagreement fails the
// test (reported when the server has been closed, after the last check).
// Call it before registering the server's Close with t.Cleanup.
func validateOpenAPI(t *testing.T, h http.Handler) http.Handler {
	t.Helper()
	v := newValidator(loadOpenAPI(t))
	t.Cleanup(func() {
		for _, f := range v.close() {
			t.Errorf("OpenAPI drift: %s", f)
		}
	})
	return v.wrap(h)
}

func newValidator(c *openAPIChecker) *validator {
	v := &validator{c: c, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go v.run()
	return v
}

// close waits for the checks queued and returns the disagreements found.
func (v *validator) close() []string {
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	v.signal()
	<-v.done
	return v.failures
}

// wrap returns h with every exchange queued for its check.
func (v *validator) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var reqBody bytes.Buffer
		if r.Body != nil {
			r.Body = &teeBody{ReadCloser: r.Body, buf: &reqBody}
		}
		tw := &teeWriter{ResponseWriter: w}
		x := &queued{exchange: exchange{method: r.Method, target: r.URL.RequestURI(), header: r.Header.Clone()}}
		h.ServeHTTP(tw, r)
		if tw.failed || r.Method == http.MethodHead || r.Context().Err() != nil {
			tw.discard()
			return // the client went away mid-answer, or no body to check
		}
		x.reqBody, x.status, x.respHeader = reqBody.Bytes(), tw.code(), w.Header().Clone()
		x.respBody, x.file = tw.mem.Bytes(), tw.file
		v.add(x, tw)
	})
}

// validator checks the exchanges of one test server one at a time, after
// their handlers returned: the answer reaches the client as soon as
// without the hook (the tests time some), and at most one decoded body is
// in memory at once (the tests measure the heap): a large answer waits in
// its temporary file.
type validator struct {
	c        *openAPIChecker
	mu       sync.Mutex
	queue    []*queued
	closed   bool // the test is over: no more checks are queued
	failures []string
	wake     chan struct{}
	done     chan struct{}
}

// queued is an exchange waiting for its check; a large answer is in file.
type queued struct {
	exchange
	file *os.File
}

func (v *validator) signal() {
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

func (v *validator) add(x *queued, tw *teeWriter) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		// A handler of a server the test did not wait for (an
		// http.Server closed without waiting): too late to report.
		tw.discard()
		return
	}
	v.queue = append(v.queue, x)
	v.signal()
}

func (v *validator) run() {
	defer close(v.done)
	for range v.wake {
		for {
			v.mu.Lock()
			if len(v.queue) == 0 {
				closed := v.closed
				v.mu.Unlock()
				if closed {
					return
				}
				break
			}
			x := v.queue[0]
			v.queue = v.queue[1:]
			v.mu.Unlock()
			v.check(x)
		}
	}
}

func (v *validator) check(x *queued) {
	if x.file != nil {
		b, err := os.ReadFile(x.file.Name())
		x.file.Close()
		os.Remove(x.file.Name())
		if err != nil {
			return
		}
		x.respBody = b
	}
	if err := v.c.check(x.exchange); err != nil {
		v.mu.Lock()
		defer v.mu.Unlock()
		v.failures = append(v.failures, fmt.Sprintf("%s %s -> %d %s: %v\nrequest body: %s", x.method, x.target, x.status,
			shorten(x.respBody), err, shorten(x.reqBody)))
	}
}

func shorten(b []byte) string {
	s := string(b)
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return strings.TrimSpace(s)
}

// teeBody keeps a copy of what the handler reads of the request body.
type teeBody struct {
	io.ReadCloser
	buf *bytes.Buffer
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.buf.Len() < 16<<20 {
		b.buf.Write(p[:n])
	}
	return n, err
}

// teeWriter passes the answer through untouched (streaming, flushes and
// hijacks work as without it) and keeps a copy: in memory up to 64 KiB,
// then in a temporary file, so that the copy of a large answer held by a
// stalled client does not weigh on the heap the tests measure.
type teeWriter struct {
	http.ResponseWriter
	status int
	mem    bytes.Buffer
	file   *os.File
	failed bool
}

const teeMem = 64 << 10

func (w *teeWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *teeWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	if err != nil {
		w.failed = true
	}
	w.keep(p[:n])
	return n, err
}

func (w *teeWriter) keep(p []byte) {
	if w.file == nil && w.mem.Len()+len(p) <= teeMem {
		w.mem.Write(p)
		return
	}
	if w.file == nil {
		f, err := os.CreateTemp("", "clockd-openapi-tee-")
		if err != nil {
			w.failed = true // cannot keep it: not checked
			return
		}
		w.file = f
		_, _ = f.Write(w.mem.Bytes())
		w.mem = bytes.Buffer{}
	}
	if _, err := w.file.Write(p); err != nil {
		w.failed = true
	}
}

// discard removes the temporary file of a copy that is not checked.
func (w *teeWriter) discard() {
	if w.file != nil {
		w.file.Close()
		os.Remove(w.file.Name())
	}
}

func (w *teeWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// fakeCluster is a cluster view of the shape clockd answers, for the
// tests that stand in for the real one.
func fakeCluster() httpapi.ClusterView {
	now := "2026-01-01T10:00:00.000Z"
	return httpapi.ClusterView{Now: now, ShardCount: 2, Unowned: []int{1}, Instances: []httpapi.ClusterInstance{{
		InstanceID: "test-1", HTTPAddr: "127.0.0.1:8080", StartedAt: now, ExpiresAt: now, Live: true,
		Shards: []httpapi.ClusterShard{{Shard: 0, Epoch: 1, LeaseUntil: now}}}}}
}

// TestOpenAPIDocument: the document is valid OpenAPI 3.1, served open at
// GET /v1/openapi.json byte for byte, and names every route clockd has.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	c := loadOpenAPI(t)
	if c.doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", c.doc.OpenAPI)
	}
	e := newAPI(t)
	code, data := e.do("GET", "/v1/openapi.json", nil)
	if code != 200 || !bytes.Equal(data, httpapi.OpenAPI()) {
		t.Errorf("GET /v1/openapi.json: %d, %d bytes (want %d)", code, len(data), len(httpapi.OpenAPI()))
	}
	for _, p := range []string{"/v1/clocks", "/v1/clocks/batch", "/v1/clocks/{application}/{business_id}",
		"/v1/clocks/{application}/{business_id}/replay", "/v1/clocks/{application}/{business_id}/pause",
		"/v1/clocks/{application}/{business_id}/resume", "/v1/tokens", "/v1/tokens/{id}",
		"/v1/applications/{application}/quota", "/v1/cluster", "/v1/openapi.json", "/healthz", "/readyz", "/metrics"} {
		if c.doc.Paths.Find(p) == nil {
			t.Errorf("path %s missing from openapi.json", p)
		}
	}
}

// TestOpenAPIHookReportsDrift: a handler whose answers break the document,
// behind the hook the API tests use, is reported, a large answer too (the
// one kept in a temporary file); a conforming one is not.
func TestOpenAPIHookReportsDrift(t *testing.T) {
	t.Parallel()
	v := newValidator(loadOpenAPI(t))
	srv := httptest.NewServer(v.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "r-1") // as clockd sends on every answer
		switch r.URL.Path {
		case "/healthz":
			fmt.Fprint(w, `{"status":"ok"}`)
		case "/readyz":
			fmt.Fprint(w, `{"status":"ok","checks":{"mysql":"ok"},"extra":"`+strings.Repeat("x", 100<<10)+`"}`)
		default:
			fmt.Fprint(w, `{"id":"not a number"}`)
		}
	})))
	for _, p := range []string{"/healthz", "/v1/clocks/order/o-1", "/readyz"} {
		resp, err := srv.Client().Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	srv.Close()
	failures := v.close()
	if len(failures) != 2 || !strings.Contains(failures[0], "/v1/clocks/order/o-1") || !strings.Contains(failures[1], "/readyz") {
		t.Errorf("failures %d, want 2 (the clock, the large readiness answer):\n%s", len(failures), strings.Join(failures, "\n"))
	}
}

// TestOpenAPICheckerCatchesDrift proves the hook is not a no-op: answers
// and requests that break the document are reported.
func TestOpenAPICheckerCatchesDrift(t *testing.T) {
	t.Parallel()
	c := loadOpenAPI(t)
	good := `{"id":1,"application":"order","business_id":"o-1","payload":"{}","content_type":"application/json",` +
		`"ring_at":"2026-01-01T10:30:00.000Z","latest_ring_at":null,"max_attempts":0,"status":"pending","attempts":0,` +
		`"next_try_at":"2026-01-01T10:30:00.000Z","last_error":null,"created_at":"2026-01-01T10:00:00.000Z",` +
		`"updated_at":"2026-01-01T10:00:00.000Z","rung_at":null,"schedule":null,"paused":false,"occurrences":0,"occurrence_at":null}`
	json := http.Header{"Content-Type": {"application/json"}, "X-Request-Id": {"r-1"}}
	for name, tt := range map[string]struct {
		x    exchange
		want bool // valid
	}{
		"a clock": {exchange{method: "GET", target: "/v1/clocks/order/o-1", status: 200, respHeader: json, respBody: []byte(good)}, true},
		"a field too many": {exchange{method: "GET", target: "/v1/clocks/order/o-1", status: 200, respHeader: json,
			respBody: []byte(strings.Replace(good, `"id":1`, `"id":1,"shard":3`, 1))}, false},
		"a field missing": {exchange{method: "GET", target: "/v1/clocks/order/o-1", status: 200, respHeader: json,
			respBody: []byte(strings.Replace(good, `"rung_at":null`, `"rung_at2":null`, 1))}, false},
		"a time without milliseconds": {exchange{method: "GET", target: "/v1/clocks/order/o-1", status: 200, respHeader: json,
			respBody: []byte(strings.Replace(good, `"ring_at":"2026-01-01T10:30:00.000Z"`, `"ring_at":"2026-01-01T10:30:00Z"`, 1))}, false},
		"an answer without X-Request-Id": {exchange{method: "GET", target: "/v1/clocks/order/o-1", status: 200,
			respHeader: http.Header{"Content-Type": {"application/json"}}, respBody: []byte(good)}, false},
		"an undocumented status": {exchange{method: "GET", target: "/v1/clocks/order/o-1", status: 418, respHeader: json,
			respBody: []byte(`{"error":{"code":"internal","message":"x"}}`)}, false},
		"an unknown status name": {exchange{method: "GET", target: "/v1/clocks/order/o-1", status: 200, respHeader: json,
			respBody: []byte(strings.Replace(good, `"pending"`, `"sleeping"`, 1))}, false},
		"an accepted request with an unknown field": {exchange{method: "POST", target: "/v1/clocks", header: json,
			reqBody: []byte(`{"application":"order","business_id":"o-1","delay":"1m","colour":"red"}`),
			status:  201, respHeader: json, respBody: []byte(good)}, false},
		"an accepted create": {exchange{method: "POST", target: "/v1/clocks", header: json,
			reqBody: []byte(`{"application":"order","business_id":"o-1","delay":"1m"}`), status: 201, respHeader: json, respBody: []byte(good)}, true},
		"an undocumented path answered 200": {exchange{method: "GET", target: "/v1/secret", status: 200, respHeader: json, respBody: []byte(`{}`)}, false},
		"an unknown path answered 404": {exchange{method: "GET", target: "/v1/secret", status: 404, respHeader: json,
			respBody: []byte(`{"error":{"code":"not_found","message":"no such path"}}`)}, true},
		"an error with another shape": {exchange{method: "GET", target: "/v1/clocks/order/o-1", status: 404, respHeader: json,
			respBody: []byte(`{"error":"not found"}`)}, false},
	} {
		if tt.x.header == nil {
			tt.x.header = http.Header{}
		}
		err := c.check(tt.x)
		if (err == nil) != tt.want {
			t.Errorf("%s: check = %v, want valid %v", name, err, tt.want)
		}
	}
}
