package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/mysql"
)

// With auth mode tokens, a request under /v1 is authenticated before its
// body is received, so a client without a token cannot hold the limiter's
// body-reader slots. The console's bodies come before any check (a login
// carries its token in its body): they are received under slots of their
// own, so that slow unauthenticated POSTs to /ui/login cannot make every
// authenticated create answer 503 (found by review: they could).
func TestUnauthenticatedConsoleBodiesDoNotStarveTheAPI(t *testing.T) {
	t.Parallel()
	var opts *httpapi.Options
	e := newAPIDB(t, func(db *sqlx.DB, o *httpapi.Options) {
		st := mysql.NewAuthStore(db)
		o.Auth = auth.New(st, auth.Config{Mode: auth.ModeTokens, AdminToken: bootstrapAdmin})
		o.MaxConcurrent = 2 // 8 body readers
		opts = o
	})
	// The same API with a console mounted (a stand-in that refuses every
	// login, as the console does for a request without a valid admin token).
	o := *opts
	o.Registerer = prometheus.NewRegistry()
	o.ConsolePrefix = "/ui/"
	o.Console = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "That is not a valid token of the admin kind.", http.StatusUnauthorized)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httpapi.NewServer(httpapi.New(o), httpapi.ServerConfig{ReadTimeout: 30 * time.Second,
		ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}, nil)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()

	stop := make(chan struct{})
	defer close(stop)
	// No token, no cookie: 12 slow bodies to the console's login form.
	for range 12 {
		slowBody(t, addr, "/ui/login", 32<<10, 200*time.Millisecond, stop)
	}
	time.Sleep(500 * time.Millisecond)

	client := &http.Client{Timeout: 10 * time.Second}
	data, _ := json.Marshal(createBody("order", "legit-1"))
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/clocks", bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+bootstrapAdmin)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("authenticated create while unauthenticated clients trickle bodies to /ui/login: %d %s, want 201 "+
			"(a client without a token must not be able to take the API's body-reader slots)", resp.StatusCode, body)
	}
	_ = e
}

// Every answer carries an X-Request-Id, the console's too, and is counted
// in clockd_http_requests_total under its route (found by review: the
// console was mounted beside the API's wrappers).
func TestConsoleAnswersCarryARequestID(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := httpapi.New(httpapi.Options{Registerer: reg, ConsolePrefix: "/ui/",
		Console: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "console failure", http.StatusInternalServerError)
		})})
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Request-Id") == "" {
		t.Errorf("GET /ui/ answered %d without X-Request-Id", resp.StatusCode)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var counted float64
	for _, mf := range mfs {
		if mf.GetName() != "clockd_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["route"] == "/ui/" && l["code"] == "500" {
				counted += m.GetCounter().GetValue()
			}
		}
	}
	if counted != 1 {
		t.Errorf(`clockd_http_requests_total{route="/ui/",code="500"} = %v, want 1`, counted)
	}
}

// A path with an empty, "." or ".." segment is refused in the API's JSON
// form, not redirected with Go's HTML page (found by review); /ui still
// leads to /ui/.
func TestNonCanonicalPathsRefused(t *testing.T) {
	t.Parallel()
	h := httpapi.New(httpapi.Options{Registerer: prometheus.NewRegistry(), ConsolePrefix: "/ui/",
		Console: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "console") })})
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range []string{"/v1/clocks//", "/v1/clocks/order/./x", "/v1/clocks/order/x/..", "/v1//clocks/order/x", "/ui/./"} {
		req, _ := http.NewRequest("GET", srv.URL+p, nil)
		req.URL.Opaque = p // sent as written
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || err != nil || e.Error.Code != "invalid_argument" || resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("GET %s: %d %+v (%v), want 400 invalid_argument in JSON with X-Request-Id", p, resp.StatusCode, e, err)
		}
	}
	resp, err := client.Get(srv.URL + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently && resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q, want a redirect to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
}
