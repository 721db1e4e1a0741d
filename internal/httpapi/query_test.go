package httpapi_test

import (
	"encoding/json"
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
