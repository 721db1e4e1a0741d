package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/httpapi"
)

// edgeServer serves e's handler through httpapi.NewServer with sc, as
// clockd does, and returns its address.
func edgeServer(t *testing.T, e *apiEnv, sc httpapi.ServerConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.NewServer(e.srv.Config.Handler, sc, nil)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// metric returns the value of a metric line of /metrics ("" when absent).
func (e *apiEnv) metric(prefix string) string {
	e.t.Helper()
	resp, err := e.client.Get(e.srv.URL + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	text := readAll(e.t, resp)
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, prefix+" ") {
			return strings.TrimPrefix(line, prefix+" ")
		}
	}
	return ""
}

// slowBody opens a connection and sends a POST whose body of n bytes then
// trickles at one byte per interval until stop is closed. It returns the
// connection.
func slowBody(t *testing.T, addr, path string, n int, every time.Duration, stop <-chan struct{}) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", path, n)
	go func() {
		tk := time.NewTicker(every)
		defer tk.Stop()
		for range n - 1 {
			select {
			case <-stop:
				return
			case <-tk.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	return conn
}

// TestSlowBodyCutOff: a body sent at one byte a second is cut off by the
// read timeout, and counted as the client's doing (499), not a 5xx.
func TestSlowBodyCutOff(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	addr := edgeServer(t, e, httpapi.ServerConfig{ReadTimeout: time.Second, ReadHeaderTimeout: time.Second, WriteTimeout: 5 * time.Second})
	stop := make(chan struct{})
	defer close(stop)
	start := time.Now()
	conn := slowBody(t, addr, "/v1/clocks", 1000, time.Second, stop)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.ReadAll(conn) // the answer, then EOF when the server closes
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("connection with a 1 byte/s body still open after %s (err %v), want it cut off after the 1s read timeout", took, err)
	}
	if got := e.metric(`clockd_http_requests_total{code="499",route="POST /v1/clocks"}`); got != "1" {
		t.Errorf("499 count %q, want 1", got)
	}
	if got := e.metric(`clockd_http_requests_total{code="500",route="POST /v1/clocks"}`); got != "" {
		t.Errorf("a slow client counted as 500: %s", got)
	}
}

// recordingHandler keeps the log records at warn and above.
type recordingHandler struct {
	mu   sync.Mutex
	recs []string
}

func (h *recordingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "request_id" {
			msg += " request_id=" + a.Value.String()
		}
		return true
	})
	h.recs = append(h.recs, msg)
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// TestBodyCutOffByClient: a client that sends half its body and hangs up is
// counted apart (499) and not logged as a failure.
func TestBodyCutOffByClient(t *testing.T) {
	t.Parallel()
	logs := &recordingHandler{}
	e := newAPI(t, func(o *httpapi.Options) { o.Logger = slog.New(logs) })
	for _, path := range []string{"/v1/clocks", "/v1/clocks/batch"} {
		conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"application\":", path)
		time.Sleep(100 * time.Millisecond)
		conn.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.metric(`clockd_http_requests_total{code="499",route="POST /v1/clocks/batch"}`) != "1" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for _, route := range []string{"POST /v1/clocks", "POST /v1/clocks/batch"} {
		if got := e.metric(`clockd_http_requests_total{code="499",route="` + route + `"}`); got != "1" {
			t.Errorf("%s: 499 count %q, want 1", route, got)
		}
		if got := e.metric(`clockd_http_requests_total{code="500",route="` + route + `"}`); got != "" {
			t.Errorf("%s: a cut-off body counted as 500: %s", route, got)
		}
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	if len(logs.recs) > 0 {
		t.Errorf("logged as failures: %v", logs.recs)
	}
}

// TestConcurrencyCap: past http.max_concurrent_requests a request answers
// 503 with Retry-After at once; /healthz still answers. Clients sending
// their bodies slowly hold reader slots (4 × the cap), not the slots of
// requests ready to be served.
func TestConcurrencyCap(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free()
	e := newAPI(t, func(o *httpapi.Options) {
		o.MaxConcurrent = 4
		o.Cluster = func(ctx context.Context) (any, error) { <-release; return fakeCluster(), nil }
	})
	addr := edgeServer(t, e, httpapi.ServerConfig{ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path string) (int, time.Duration, http.Header, []byte) {
		start := time.Now()
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			return 0, 0, nil, nil
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, time.Since(start), resp.Header, data
	}

	// 40 bodies at a byte every half second: 16 take the reader slots, the
	// rest are answered 503 at once; requests without a body still pass.
	stop := make(chan struct{})
	defer close(stop)
	for range 40 {
		slowBody(t, addr, "/v1/clocks", 100, 500*time.Millisecond, stop)
	}
	time.Sleep(300 * time.Millisecond)
	if code, took, _, data := get("/v1/clocks/order/none"); code != 404 || took > time.Second {
		t.Errorf("GET while slow bodies arrive: %d after %s: %s, want 404 at once", code, took, data)
	}

	// Hold every work slot, then ask for more.
	var held sync.WaitGroup
	for range 4 {
		held.Add(1)
		go func() { defer held.Done(); get("/v1/cluster") }()
	}
	time.Sleep(300 * time.Millisecond)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, took, h, data := get("/v1/clocks/order/o-" + fmt.Sprint(i))
			if code != 503 || took > time.Second {
				t.Errorf("past the cap: %d after %s: %s, want 503 at once", code, took, data)
				return
			}
			checkErrorJSON(t, code, data)
			if h.Get("Retry-After") == "" {
				t.Errorf("503 past the cap without Retry-After")
			}
		}()
	}
	wg.Wait()
	if code, _, _, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz at the cap: %d", code)
	}
	free()
	held.Wait()
	if code, _, _, data := get("/v1/clocks/order/none"); code != 404 {
		t.Errorf("after the slots are free: %d %s", code, data)
	}
}

// bigClocks creates n clocks of application app with payloads of size
// bytes.
func (e *apiEnv) bigClocks(app string, n, size int) {
	e.t.Helper()
	payload := strings.Repeat("p", size)
	for i := range n {
		e.mustClock(201, "POST", "/v1/clocks", createBody(app, fmt.Sprintf("big-%03d", i), "payload", payload))
	}
}

// TestListBoundedInBytes: a page of large clocks is cut to
// http.max_list_bytes and continues with its cursor; payload=false leaves
// payloads out.
func TestListBoundedInBytes(t *testing.T) {
	t.Parallel()
	e := newAPI(t, func(o *httpapi.Options) { o.MaxListBytes = 256 << 10 })
	e.bigClocks("big", 40, 60<<10) // 2.4 MB of payloads
	seen := map[string]bool{}
	after, pages := "", 0
	for {
		code, data := e.do("GET", "/v1/clocks?application=big&limit=1000"+after, nil)
		if code != 200 {
			t.Fatalf("list: %d %.200s", code, data)
		}
		if len(data) > 256<<10+64<<10 {
			t.Errorf("page of %d bytes, want at most max_list_bytes (256 KiB) plus one clock", len(data))
		}
		var page struct {
			Clocks []httpapi.Clock `json:"clocks"`
			Next   string          `json:"next"`
		}
		if err := json.Unmarshal(data, &page); err != nil {
			t.Fatal(err)
		}
		pages++
		for _, c := range page.Clocks {
			if seen[c.BusinessID] || len(c.Payload) != 60<<10 {
				t.Errorf("clock %s twice or cut", c.BusinessID)
			}
			seen[c.BusinessID] = true
		}
		if page.Next == "" {
			break
		}
		after = "&after=" + page.Next
	}
	if len(seen) != 40 || pages < 10 {
		t.Errorf("%d clocks over %d pages, want 40 over 10 or more", len(seen), pages)
	}
	code, data := e.do("GET", "/v1/clocks?application=big&limit=1000&payload=false", nil)
	var raw struct {
		Clocks []map[string]json.RawMessage `json:"clocks"`
		Next   string                       `json:"next"`
	}
	if err := json.Unmarshal(data, &raw); code != 200 || err != nil || len(raw.Clocks) != 40 || raw.Next != "" {
		t.Fatalf("payload=false: %d %.300s", code, data)
	}
	if _, ok := raw.Clocks[0]["payload"]; ok || len(raw.Clocks[0]) != len(clockKeys)-1 {
		t.Errorf("payload=false clock has fields %v", keysOf(raw.Clocks[0]))
	}
	e.mustError(400, "GET", "/v1/clocks?payload=maybe", nil)
}

// TestSlowReaderBounded: clients that ask for a big list and never read it
// do not make the server hold their pages.
func TestSlowReaderBounded(t *testing.T) { // not parallel: it measures the heap
	e := newAPI(t)
	t0 := time.Now()
	e.bigClocks("big", 100, 60<<10) // 6 MB of payloads: a page of 1000 holds them all
	addr := edgeServer(t, e, httpapi.ServerConfig{ReadTimeout: 10 * time.Second, WriteTimeout: 20 * time.Second})
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	t.Logf("created in %s", time.Since(t0))
	base := heap()
	const clients = 16
	conns := make([]net.Conn, clients)
	for i := range conns {
		c, err := (&net.Dialer{}).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		defer c.Close()
		fmt.Fprintf(c, "GET /v1/clocks?application=big&limit=1000 HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	time.Sleep(2 * time.Second) // every page built and stuck in a write
	held := heap() - min(base, heap())
	t.Logf("heap held by %d stalled list readers: %.1f MiB", clients, float64(held)/(1<<20))
	if held > 48<<20 {
		t.Errorf("%d clients that do not read hold %.0f MiB of heap, want the page bounded (1 MiB each)", clients, float64(held)/(1<<20))
	}
	// A reading client meanwhile is served.
	start := time.Now()
	code, _ := e.do("GET", "/v1/clocks?application=big&limit=5&payload=false", nil)
	if code != 200 || time.Since(start) > time.Second {
		t.Errorf("other client: %d after %s", code, time.Since(start))
	}
	t.Logf("other client served at %s", time.Since(t0))
	// The stalled readers still get a well-formed (bounded) answer when
	// they read at last.
	r := bufio.NewReader(conns[0])
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("stalled reader read at %s", time.Since(t0))
	if resp.StatusCode != 200 || len(data) > 1<<20+64<<10 || !json.Valid(data) {
		t.Errorf("stalled reader's answer: %d, %d bytes", resp.StatusCode, len(data))
	}
}

// TestMethodNotAllowed: a known path with another method answers 405 with
// Allow; an unknown path 404; both in the JSON error form.
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	for _, tt := range []struct {
		method, path string
		allow        []string
	}{
		{"PUT", "/v1/clocks", []string{"GET", "POST"}},
		{"DELETE", "/v1/clocks/batch", []string{"POST"}},
		{"POST", "/v1/clocks/order/o-1", []string{"GET", "DELETE", "PATCH"}},
		{"GET", "/v1/clocks/order/o-1/replay", []string{"POST"}},
		{"POST", "/healthz", []string{"GET"}},
	} {
		a := e.call("", tt.method, tt.path, nil)
		if a.code != 405 {
			t.Errorf("%s %s: %d %s, want 405", tt.method, tt.path, a.code, a.body)
			continue
		}
		checkErrorJSON(t, a.code, a.body)
		for _, m := range tt.allow {
			if !strings.Contains(a.header.Get("Allow"), m) {
				t.Errorf("%s %s: Allow %q lacks %s", tt.method, tt.path, a.header.Get("Allow"), m)
			}
		}
		if !strings.HasPrefix(a.header.Get("Content-Type"), "application/json") {
			t.Errorf("%s %s: Content-Type %q", tt.method, tt.path, a.header.Get("Content-Type"))
		}
	}
	a := e.call("", "GET", "/nowhere", nil)
	if a.code != 404 {
		t.Errorf("GET /nowhere: %d", a.code)
	}
	checkErrorJSON(t, a.code, a.body)
}

// TestServerErrorsSayOnlyTheCode: a 5xx body names its code and the
// request id, never the driver's error or an address; X-Request-Id is on
// every answer and in the log line.
func TestServerErrorsSayOnlyTheCode(t *testing.T) {
	t.Parallel()
	logs := &recordingHandler{}
	e := newAPI(t, func(o *httpapi.Options) { o.Logger = slog.New(logs) })
	e.mustClock(201, "POST", "/v1/clocks", createBody("order", "o-1"))
	e.db.Close()
	var ids []string
	for _, r := range []struct{ method, path string }{{"GET", "/v1/clocks/order/o-1"}, {"GET", "/v1/clocks"}, {"DELETE", "/v1/clocks/order/o-1"}} {
		a := e.call("", r.method, r.path, nil)
		id := a.header.Get("X-Request-Id")
		ids = append(ids, id)
		if a.code != 503 || id == "" {
			t.Fatalf("%s %s: %d (request id %q) %s", r.method, r.path, a.code, id, a.body)
		}
		msg := checkErrorJSON(t, a.code, a.body)
		if !strings.Contains(msg, id) {
			t.Errorf("message %q does not carry the request id %s", msg, id)
		}
		for _, leak := range []string{"sql", "mysql", "127.0.0.1", "3306", "closed"} {
			if strings.Contains(strings.ToLower(msg), leak) {
				t.Errorf("5xx message %q leaks %q", msg, leak)
			}
		}
	}
	code, data := e.do("POST", "/v1/clocks/batch", body{"clocks": []any{createBody("order", "o-3")}})
	if code != 200 || strings.Contains(string(data), "sql") {
		t.Errorf("batch item 5xx: %d %s", code, data)
	}
	a := e.call("", "GET", "/healthz", nil)
	if a.header.Get("X-Request-Id") == "" {
		t.Error("no X-Request-Id on /healthz")
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/healthz", nil)
	req.Header.Set("X-Request-Id", "trace-42")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Request-Id"); got != "trace-42" {
		t.Errorf("caller's X-Request-Id not kept: %q", got)
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	all := strings.Join(logs.recs, "\n")
	for _, id := range ids {
		if !strings.Contains(all, "request_id="+id) {
			t.Errorf("no log line with request_id=%s in:\n%s", id, all)
		}
	}
}

// A CONNECT request (authority form: no path) is answered in the API's
// JSON error shape, with the console mounted too: the mux that mounts it
// matched no pattern and answered Go's plain-text "404 page not found"
// (found by review). With tokens, the call without a token is a 401.
func TestConnectAnsweredInJSON(t *testing.T) {
	t.Parallel()
	console := func(o *httpapi.Options) {
		o.Console = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
		o.ConsolePrefix = "/ui/"
	}
	for _, tc := range []struct {
		name string
		e    *apiEnv
		want int
	}{
		{"auth off", newAPI(t, console), http.StatusNotFound},
		{"tokens", newAuthAPI(t, func(_ *sqlx.DB, o *httpapi.Options) { console(o) }), http.StatusUnauthorized},
	} {
		u, err := url.Parse(tc.e.srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != tc.want || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: CONNECT answered %d %q: %q, want %d in JSON", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.want)
			continue
		}
		checkErrorJSON(t, resp.StatusCode, b)
	}
}
