package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/clockd/clockd/internal/httpapi"
)

// TestQueryNotParsed: a query parameter that does not parse, or is given
// twice, is refused by name, never dropped (which would widen a list to
// clocks that were not asked for); GET of one clock refuses parameters as
// the list does.
func TestQueryNotParsed(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	call := func(path string) authAnswer { return e.call(bootstrapAdmin, "GET", path, nil) }
	for _, app := range []string{"a1", "a2"} {
		e.pendingClock(app)
	}
	cancelled := e.pendingClock("a2")
	if a := e.call(bootstrapAdmin, "DELETE", cancelled, nil); a.code != 200 {
		t.Fatalf("cancel: %d %s", a.code, a.body)
	}
	one := e.pendingClock("a1")
	for _, tt := range []struct{ path, field, says string }{
		{"/v1/clocks?application=%zz", "application", "URL-encoded"},
		{"/v1/clocks?application=a2&status=%zz", "status", "URL-encoded"},
		{"/v1/clocks?application=a2;status=cancelled", "application", `";"`},
		{"/v1/clocks?application=a2&status=cancelled;limit=5", "status", `";"`},
		{"/v1/clocks?application=a2&application=a1", "application", "more than once"},
		{"/v1/clocks?application=a2&status=pending&status=", "status", "more than once"},
		{"/v1/clocks?%zz=1", "query", "URL-encoded"},
		{"/v1/clocks?=a1", "query", "without a name"},
		{"/v1/tokens?application=%zz", "application", "URL-encoded"},
		{"/v1/tokens?application=a1&application=a2", "application", "more than once"},
		{"/v1/tokens?application=a1;colour=red", "application", `";"`},
		{one + "?colour=red", "colour", "not a known query parameter"},
		{one + "?%zz", "query", "URL-encoded"},
		{one + "?payload=false", "payload", "not a known query parameter"},
	} {
		a := call(tt.path)
		if a.code != 400 {
			t.Errorf("GET %s: %d %.300s, want 400", tt.path, a.code, a.body)
			continue
		}
		msg := checkErrorJSON(t, a.code, a.body)
		if !strings.HasPrefix(msg, tt.field+": ") || !strings.Contains(msg, tt.says) {
			t.Errorf("GET %s: message %q, want it to name %s and say %s", tt.path, msg, tt.field, tt.says)
		}
	}
	// The same parameters well formed are answered as before.
	list := func(path string) []httpapi.Clock {
		t.Helper()
		a := call(path)
		var page struct {
			Clocks []httpapi.Clock `json:"clocks"`
		}
		if err := json.Unmarshal(a.body, &page); a.code != 200 || err != nil {
			t.Fatalf("GET %s: %d %s", path, a.code, a.body)
		}
		return page.Clocks
	}
	if cs := list("/v1/clocks?application=a2&status=cancelled"); len(cs) != 1 || cs[0].Status != "cancelled" {
		t.Errorf("cancelled of a2: %+v", cs)
	}
	if cs := list("/v1/clocks?application=a2&&status=cancelled&"); len(cs) != 1 {
		t.Errorf("empty pairs: %d clocks, want 1", len(cs))
	}
	if cs := list("/v1/clocks?application=a%31&limit=1"); len(cs) != 1 || cs[0].Application != "a1" { // %31: "1"
		t.Errorf("a1 by 1: %+v", cs)
	}
	if cs := list("/v1/clocks"); len(cs) != 4 {
		t.Errorf("every clock: %d, want 4", len(cs))
	}
	if a := call("/v1/tokens?application=a1"); a.code != 200 {
		t.Errorf("tokens of a1: %d %s", a.code, a.body)
	}
	if a := call(one); a.code != 200 {
		t.Errorf("GET %s: %d %s", one, a.code, a.body)
	}
}

// TestTokenNameNotUTF8: a token's name is text like a clock's fields:
// bytes that are not UTF-8 or a lone surrogate escape are refused, not
// stored as U+FFFD.
func TestTokenNameNotUTF8(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	for _, tt := range []struct{ body, field string }{
		{"{\"application\":\"order\",\"scopes\":[\"read\"],\"name\":\"ci\xffbot\"}", "name"},
		{`{"application":"order","scopes":["read"],"name":"\udc00"}`, "name"},
		{`{"application":"order","scopes":["read"],"name":"ci \ud800bot"}`, "name"},
		{"{\"application\":\"order\",\"scopes\":[\"read\",\"write\xff\"]}", "scopes"},
		{"{\"application\":\"order\xff\",\"scopes\":[\"read\"]}", "application"},
	} {
		a := e.call(bootstrapAdmin, "POST", "/v1/tokens", tt.body)
		if a.code != 400 {
			t.Errorf("token %q: %d %s, want 400", tt.body, a.code, a.body)
			continue
		}
		if msg := checkErrorJSON(t, a.code, a.body); !strings.HasPrefix(msg, tt.field+": ") || !strings.Contains(msg, "UTF-8") {
			t.Errorf("token %q: message %q", tt.body, msg)
		}
	}
	var n int
	if err := e.db.Get(&n, "SELECT COUNT(*) FROM clock_token"); err != nil || n != 0 {
		t.Errorf("%d tokens stored (%v)", n, err)
	}
	// Valid text, escaped or not, is kept as it is.
	tok := e.newToken(`{"application":"order","scopes":["read"],"name":"ci-bot é \ud83d\ude00 ☃"}`)
	if tok.Name != "ci-bot é 😀 ☃" {
		t.Errorf("name %q", tok.Name)
	}
}

// TestWriteCallsRefuseWhatTheyDoNotTake: a change never ignores part of
// its request. A query parameter a call does not take (?dry_run=true on a
// PATCH, ?force=1 on a cancel) and a body on a call that takes none (a
// pause "until" a time) are refused with 400 naming them, and nothing is
// written; an empty body, or {}, is fine.
func TestWriteCallsRefuseWhatTheyDoNotTake(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	one := e.pendingClock("order")
	rec := "/v1/clocks/order/every-hour"
	if a := e.call(bootstrapAdmin, "POST", "/v1/clocks", createBody("order", "every-hour", "delay", nil,
		"schedule", body{"every": "1h"})); a.code != 201 {
		t.Fatalf("recurring create: %d %s", a.code, a.body)
	}
	var tokens int
	countTokens := func() int {
		t.Helper()
		var n int
		if err := e.db.Get(&n, "SELECT COUNT(*) FROM clock_token"); err != nil {
			t.Fatal(err)
		}
		return n
	}
	tokens = countTokens()
	before := e.tableState()
	for _, tt := range []struct {
		method, path string
		body         any
		field        string
	}{
		{"DELETE", one + "?force=1", nil, "force"},
		{"PATCH", one + "?dry_run=true", body{"delay": "2h"}, "dry_run"},
		{"POST", rec + "/pause?until=tomorrow", nil, "until"},
		{"POST", rec + "/resume?x=1", nil, "x"},
		{"POST", one + "/replay?x=1", nil, "x"},
		{"POST", "/v1/clocks?x=1", createBody("order", "new-1"), "x"},
		{"POST", "/v1/clocks/batch?x=1", body{"clocks": []any{createBody("order", "new-2")}}, "x"},
		{"POST", "/v1/tokens?x=1", body{"application": "order", "scopes": []string{"read"}}, "x"},
		{"PUT", "/v1/applications/order/quota?x=1", body{"max_live_clocks": 1}, "x"},
		{"GET", "/v1/applications/order/quota?x=1", nil, "x"},
		{"GET", "/v1/cluster?x=1", nil, "x"},
		{"DELETE", one, body{"force": true}, "force"},
		{"DELETE", one, "garbage-not-json", "body"},
		{"DELETE", one, "[]", "body"},
		{"POST", rec + "/pause", body{"until": "2030-01-01T00:00:00Z"}, "until"},
		{"POST", rec + "/resume", "not even json", "body"},
		{"POST", one + "/replay", body{"now": true}, "now"},
	} {
		a := e.call(bootstrapAdmin, tt.method, tt.path, tt.body)
		if a.code != 400 {
			t.Errorf("%s %s %v: %d %.300s, want 400", tt.method, tt.path, tt.body, a.code, a.body)
			continue
		}
		if msg := checkErrorJSON(t, a.code, a.body); !strings.HasPrefix(msg, tt.field+": ") {
			t.Errorf("%s %s %v: message %q, want it to name %s", tt.method, tt.path, tt.body, msg, tt.field)
		}
	}
	if after := e.tableState(); after != before {
		t.Errorf("refused requests changed the clock table: %s, then %s", before, after)
	}
	if n := countTokens(); n != tokens {
		t.Errorf("a refused token create made a token: %d tokens, then %d", tokens, n)
	}
	if a := e.call(bootstrapAdmin, "GET", "/v1/applications/order/quota", nil); a.code != 200 || strings.Contains(string(a.body), `"max_live_clocks":1`) {
		t.Errorf("quota after a refused PUT: %d %s", a.code, a.body)
	}
	// Without them, the same calls work; an empty object is no body.
	for _, tt := range []struct {
		method, path string
		body         any
	}{
		{"POST", rec + "/pause", "{}"},
		{"POST", rec + "/resume", ""},
		{"DELETE", one, "{ }"},
	} {
		if a := e.call(bootstrapAdmin, tt.method, tt.path, tt.body); a.code != 200 {
			t.Errorf("%s %s %q: %d %s", tt.method, tt.path, tt.body, a.code, a.body)
		}
	}
	if a := e.call(bootstrapAdmin, "GET", "/metrics?format=text", nil); a.code != 200 {
		t.Errorf("GET /metrics with a scraper's parameter: %d %.200s", a.code, a.body)
	}
}

// TestCrossSiteBrowserRequestsRefused: a page of another site cannot make
// a browser change clocks (a text/plain POST needs no CORS preflight, and
// with auth off, the default on loopback, no token either). What browsers
// mark as cross-site, or send with another Origin, is refused with 403 and
// writes nothing; reads, and requests without those headers (curl, the
// client libraries), are served.
func TestCrossSiteBrowserRequestsRefused(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	before := e.tableState()
	send := func(method, path, b string, h map[string]string) authAnswer {
		t.Helper()
		req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return authAnswer{resp.StatusCode, resp.Header, data}
	}
	create := `{"application":"order","business_id":"csrf-1","payload":"{}","delay":"1h"}`
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain;charset=UTF-8"},
		{"Origin": "https://evil.example", "Content-Type": "text/plain"},
	} {
		a := send("POST", "/v1/clocks", create, h)
		if a.code != 403 {
			t.Errorf("cross-site POST %v: %d %s, want 403", h, a.code, a.body)
			continue
		}
		if msg := checkErrorJSON(t, a.code, a.body); !strings.Contains(msg, "cross-origin") {
			t.Errorf("cross-site POST %v: message %q", h, msg)
		}
	}
	if after := e.tableState(); after != before {
		t.Errorf("a refused cross-site request wrote: %s, then %s", before, after)
	}
	if a := send("GET", "/v1/clocks", "", map[string]string{"Sec-Fetch-Site": "cross-site"}); a.code != 200 {
		t.Errorf("cross-site GET: %d %s", a.code, a.body)
	}
	host := strings.TrimPrefix(e.srv.URL, "http://")
	for i, h := range []map[string]string{
		nil, // curl
		{"Sec-Fetch-Site": "same-origin"},
		{"Origin": "http://" + host},
	} {
		if a := send("POST", "/v1/clocks", strings.Replace(create, "csrf-1", "ok-"+strconv.Itoa(i), 1), h); a.code != 201 {
			t.Errorf("POST %v: %d %s, want 201", h, a.code, a.body)
		}
	}
}
