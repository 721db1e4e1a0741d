package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/mysql"
)

const bootstrapAdmin = "bootstrap-admin-token-for-tests"

// newAuthAPI is the API in tokens mode with quotas, on the test's database;
// the bootstrap admin token is bootstrapAdmin.
func newAuthAPI(t *testing.T, edit ...func(*sqlx.DB, *httpapi.Options)) *apiEnv {
	t.Helper()
	return newAPIDB(t, append([]func(*sqlx.DB, *httpapi.Options){func(db *sqlx.DB, o *httpapi.Options) {
		st := mysql.NewAuthStore(db)
		o.Auth = auth.New(st, auth.Config{Mode: auth.ModeTokens, AdminToken: bootstrapAdmin})
		o.Quotas = auth.NewQuotas(st, auth.QuotaConfig{})
		o.Cluster = func(context.Context) (any, error) { return fakeCluster(), nil }
	}}, edit...)...)
}

// authAnswer is one HTTP answer.
type authAnswer struct {
	code   int
	header http.Header
	body   []byte
}

// call sends a request with a bearer token ("" for none).
func (e *apiEnv) call(token, method, path string, body any) authAnswer {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return authAnswer{resp.StatusCode, resp.Header, data}
}

// newToken creates a token through the API with the admin token.
func (e *apiEnv) newToken(body any) httpapi.Token {
	e.t.Helper()
	a := e.call(bootstrapAdmin, "POST", "/v1/tokens", body)
	if a.code != http.StatusCreated {
		e.t.Fatalf("create token %v: %d %s", body, a.code, a.body)
	}
	var tok httpapi.Token
	if err := json.Unmarshal(a.body, &tok); err != nil || tok.Secret == "" || tok.ID == 0 {
		e.t.Fatalf("token answer %s: %v", a.body, err)
	}
	return tok
}

// pendingClock creates a pending clock of app as admin and returns its path.
func (e *apiEnv) pendingClock(app string) string {
	e.t.Helper()
	id := fmt.Sprintf("c-%d", time.Now().UnixNano())
	if a := e.call(bootstrapAdmin, "POST", "/v1/clocks", createBody(app, id)); a.code != 201 {
		e.t.Fatalf("create %s/%s: %d %s", app, id, a.code, a.body)
	}
	return "/v1/clocks/" + app + "/" + id
}

// TestAuthMatrix is every endpoint × every kind of caller.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	own := e.newToken(map[string]any{"application": "order", "scopes": []string{"read", "write"}})
	readOnly := e.newToken(map[string]any{"application": "order", "scopes": []string{"read"}})
	writeOnly := e.newToken(map[string]any{"application": "order", "scopes": []string{"write"}})
	other := e.newToken(map[string]any{"application": "member", "scopes": []string{"read", "write"}})
	revoked := e.newToken(map[string]any{"application": "order", "scopes": []string{"read", "write"}})
	admin := e.newToken(map[string]any{"admin": true, "name": "ops"})
	// Used once (so that it is cached), then revoked: it must stop at once.
	if a := e.call(revoked.Secret, "GET", "/v1/clocks?application=order", nil); a.code != 200 {
		t.Fatalf("token before revocation: %d %s", a.code, a.body)
	}
	if a := e.call(bootstrapAdmin, "DELETE", fmt.Sprintf("/v1/tokens/%d", revoked.ID), nil); a.code != 200 {
		t.Fatalf("revoke: %d %s", a.code, a.body)
	}

	type caller struct {
		name  string
		token string
	}
	none, bad, rev := caller{"no token", ""}, caller{"bad token", "clk_not-a-token"}, caller{"revoked", revoked.Secret}
	oth, ownC, adm := caller{"other application", other.Secret}, caller{"own", own.Secret}, caller{"admin", admin.Secret}
	boot := caller{"bootstrap admin", bootstrapAdmin}

	type endpoint struct {
		name       string
		kind       string // read, write, admin, token (any valid one) or open
		ok         int    // status of a caller that may
		method     string
		path       func() string
		body       func() any
		batchItems bool // a 200 whose item says 403 for another application
	}
	n := 0
	fresh := func() string { n++; return fmt.Sprintf("m-%d-%d", time.Now().UnixNano(), n) }
	static := func(p string) func() string { return func() string { return p } }
	noBody := func() any { return nil }
	endpoints := []endpoint{
		{"create", "write", 201, "POST", static("/v1/clocks"), func() any { return createBody("order", fresh()) }, false},
		{"batch", "write", 200, "POST", static("/v1/clocks/batch"), func() any {
			return map[string]any{"clocks": []any{createBody("order", fresh())}}
		}, true},
		{"get", "read", 200, "GET", func() string { return e.pendingClock("order") }, noBody, false},
		{"list", "read", 200, "GET", static("/v1/clocks?application=order"), noBody, false},
		{"cancel", "write", 200, "DELETE", func() string { return e.pendingClock("order") }, noBody, false},
		{"reschedule", "write", 200, "PATCH", func() string { return e.pendingClock("order") }, func() any { return body{"delay": "2h"} }, false},
		{"replay", "write", 200, "POST", func() string {
			p := e.pendingClock("order")
			e.exec("UPDATE clock SET status = 'dead' WHERE business_id = ?", p[strings.LastIndex(p, "/")+1:])
			return p + "/replay"
		}, noBody, false},
		{"cluster", "admin", 200, "GET", static("/v1/cluster"), noBody, false},
		{"metrics", "admin", 200, "GET", static("/metrics"), noBody, false},
		{"token create", "admin", 201, "POST", static("/v1/tokens"), func() any {
			return map[string]any{"application": "order", "scopes": []string{"read"}}
		}, false},
		{"token list", "admin", 200, "GET", static("/v1/tokens"), noBody, false},
		{"token revoke", "admin", 200, "DELETE", func() string {
			return fmt.Sprintf("/v1/tokens/%d", e.newToken(map[string]any{"application": "x", "scopes": []string{"read"}}).ID)
		}, noBody, false},
		{"quota get", "admin", 200, "GET", static("/v1/applications/order/quota"), noBody, false},
		{"quota set", "admin", 200, "PUT", static("/v1/applications/order/quota"), func() any {
			return map[string]int{"max_live_clocks": 0, "creates_per_second": 0, "max_payload_bytes": 0}
		}, false},
		{"openapi", "token", 200, "GET", static("/v1/openapi.json"), noBody, false},
		{"healthz", "open", 200, "GET", static("/healthz"), noBody, false},
		{"readyz", "open", 200, "GET", static("/readyz"), noBody, false},
	}
	for _, ep := range endpoints {
		wrongScope := caller{"wrong scope", writeOnly.Secret}
		if ep.kind == "write" {
			wrongScope.token = readOnly.Secret
		}
		want := map[string]int{}
		switch ep.kind {
		case "open":
			for _, c := range []caller{none, bad, rev, oth, wrongScope, ownC, adm, boot} {
				want[c.name] = 200
			}
		case "token":
			for _, c := range []caller{oth, wrongScope, ownC, adm, boot} {
				want[c.name] = ep.ok
			}
			want[none.name], want[bad.name], want[rev.name] = 401, 401, 401
		case "admin":
			want = map[string]int{none.name: 401, bad.name: 401, rev.name: 401, oth.name: 403, wrongScope.name: 403,
				ownC.name: 403, adm.name: ep.ok, boot.name: ep.ok}
		default:
			want = map[string]int{none.name: 401, bad.name: 401, rev.name: 401, oth.name: 403, wrongScope.name: 403,
				ownC.name: ep.ok, adm.name: ep.ok, boot.name: ep.ok}
		}
		for _, c := range []caller{none, bad, rev, oth, wrongScope, ownC, adm, boot} {
			t.Run(ep.name+"/"+c.name, func(t *testing.T) {
				e := e.with(t)
				a := e.call(c.token, ep.method, ep.path(), ep.body())
				code := a.code
				if ep.batchItems && code == 200 && c.name == oth.name {
					var ans batchAnswer
					if err := json.Unmarshal(a.body, &ans); err != nil || len(ans.Results) != 1 {
						t.Fatalf("batch answer %s", a.body)
					}
					code = ans.Results[0].Status // per item
				}
				if code != want[c.name] {
					t.Fatalf("%s %s as %s: %d %s, want %d", ep.method, ep.name, c.name, code, a.body, want[c.name])
				}
				if a.code >= 400 {
					checkErrorJSON(t, a.code, a.body)
				}
				if a.code == 401 && !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("401 without WWW-Authenticate: Bearer: %q", a.header.Get("WWW-Authenticate"))
				}
				if a.header.Get("X-Request-Id") == "" {
					t.Errorf("no X-Request-Id")
				}
			})
		}
	}
}

// TestAuthNoExistenceLeak: another application's token gets the same 403
// whether the clock exists or not; a list without application shows the
// caller's own clocks only.
func TestAuthNoExistenceLeak(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	other := e.newToken(map[string]any{"application": "member", "scopes": []string{"read", "write"}})
	own := e.newToken(map[string]any{"application": "order", "scopes": []string{"read"}})
	exists := e.pendingClock("order")
	e.pendingClock("member")
	for _, m := range []string{"GET", "DELETE", "PATCH"} {
		var b any
		if m == "PATCH" {
			b = body{"delay": "3h"}
		}
		a1 := e.call(other.Secret, m, exists, b)
		a2 := e.call(other.Secret, m, "/v1/clocks/order/does-not-exist", b)
		if a1.code != 403 || a2.code != 403 || !bytes.Equal(a1.body, a2.body) {
			t.Errorf("%s: existing %d %s, missing %d %s: want the same 403", m, a1.code, a1.body, a2.code, a2.body)
		}
	}
	a := e.call(own.Secret, "GET", "/v1/clocks", nil)
	var page struct {
		Clocks []httpapi.Clock `json:"clocks"`
	}
	if err := json.Unmarshal(a.body, &page); a.code != 200 || err != nil || len(page.Clocks) != 1 || page.Clocks[0].Application != "order" {
		t.Errorf("list without application: %d %s, want only order's clock", a.code, a.body)
	}
	if a := e.call(own.Secret, "GET", "/v1/clocks?application=member", nil); a.code != 403 {
		t.Errorf("list of another application: %d %s", a.code, a.body)
	}
	// Tokens are never listed with their secret, and show their last use.
	a = e.call(bootstrapAdmin, "GET", "/v1/tokens", nil)
	if a.code != 200 || strings.Contains(string(a.body), own.Secret) || strings.Contains(string(a.body), `"token"`) {
		t.Errorf("token list: %d %s", a.code, a.body)
	}
	var list struct {
		Tokens []httpapi.Token `json:"tokens"`
	}
	_ = json.Unmarshal(a.body, &list)
	used := false
	for _, tok := range list.Tokens {
		if tok.ID == own.ID && tok.LastUsedAt != nil {
			used = true
		}
	}
	if !used {
		t.Errorf("token %d has no last_used_at after use: %s", own.ID, a.body)
	}
	var hash []byte
	if err := e.db.Get(&hash, "SELECT secret_hash FROM clock_token WHERE id = ?", own.ID); err != nil || len(hash) != 32 {
		t.Errorf("stored hash: %x %v", hash, err)
	}
	var n int
	_ = e.db.Get(&n, "SELECT COUNT(*) FROM clock_token WHERE INSTR(secret_hash, ?) > 0 OR secret_prefix = ?", own.Secret, own.Secret)
	if n != 0 {
		t.Errorf("the secret is stored in the clear")
	}
	// Bad token bodies.
	for _, b := range []string{`{}`, `{"application":"order"}`, `{"application":"order","scopes":["admin"]}`,
		`{"admin":true,"application":"order"}`, `{"application":"order","scopes":["read"],"colour":1}`} {
		if a := e.call(bootstrapAdmin, "POST", "/v1/tokens", b); a.code != 400 {
			t.Errorf("token %s: %d %s, want 400", b, a.code, a.body)
		}
	}
	if a := e.call(bootstrapAdmin, "DELETE", "/v1/tokens/999999", nil); a.code != 404 {
		t.Errorf("revoke unknown token: %d %s", a.code, a.body)
	}
	// A token id is decimal digits: "+7" or " 7" does not name token 7,
	// and the token stays valid.
	for _, id := range []string{"+" + strconv.FormatInt(own.ID, 10), "%20" + strconv.FormatInt(own.ID, 10), "0x1", "-1"} {
		if a := e.call(bootstrapAdmin, "DELETE", "/v1/tokens/"+id, nil); a.code != 400 {
			t.Errorf("revoke %s: %d %s, want 400", id, a.code, a.body)
		}
	}
	if a := e.call(own.Secret, "GET", "/v1/clocks?application=order", nil); a.code != 200 {
		t.Errorf("token revoked by a malformed id: %d %s", a.code, a.body)
	}
}

// TestAuthMissesNeedATokenToo: with tokens on, a request that no route
// takes (an unknown path, another method, a path with an empty or dot
// segment) answers 401 without a valid token, not the 404, 405 with its
// Allow header, or 400 that map the API for anyone (found by review); with
// a token it gets those answers as before.
func TestAuthMissesNeedATokenToo(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	app := e.newToken(map[string]any{"application": "order", "scopes": []string{"read"}})
	probes := []struct {
		method, path string
		withToken    int
		allow        string
	}{
		{"OPTIONS", "/v1/clocks", 405, "GET, HEAD, POST"},
		{"PROPFIND", "/v1/clocks/order/o-1", 405, "DELETE, GET, HEAD, PATCH"},
		{"PUT", "/v1/clocks/order/o-1", 405, "DELETE, GET, HEAD, PATCH"},
		{"GET", "/v1/clocks/order/o-1/replay", 405, "POST"},
		{"POST", "/v1/tokens/1", 405, "DELETE"},
		{"POST", "/v1/applications/order/quota", 405, "GET, HEAD, PUT"},
		{"DELETE", "/metrics", 405, "GET, HEAD"},
		{"GET", "/v1/no-such-route", 404, ""},
		{"GET", "/V1/CLOCKS", 404, ""},
		{"GET", "/", 404, ""},
		{"GET", "/v1/clocks//o-1", 400, ""},
		{"GET", "/v1/./tokens", 400, ""},
	}
	for _, p := range probes {
		for _, tok := range []string{"", "not-a-token"} {
			a := e.call(tok, p.method, p.path, nil)
			if a.code != http.StatusUnauthorized || a.header.Get("Allow") != "" {
				t.Errorf("%s %s with token %q: %d (Allow %q) %s, want 401 and no Allow", p.method, p.path, tok, a.code, a.header.Get("Allow"), a.body)
				continue
			}
			checkErrorJSON(t, a.code, a.body)
			if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s: 401 without WWW-Authenticate: Bearer", p.method, p.path)
			}
		}
		for _, tok := range []string{app.Secret, bootstrapAdmin} {
			a := e.call(tok, p.method, p.path, nil)
			if a.code != p.withToken || a.header.Get("Allow") != p.allow {
				t.Errorf("%s %s with a token: %d (Allow %q) %s, want %d (Allow %q)", p.method, p.path, a.code, a.header.Get("Allow"), a.body, p.withToken, p.allow)
			}
		}
	}
	// the probes stay open
	for _, path := range []string{"/healthz", "/readyz"} {
		if a := e.call("", "GET", path, nil); a.code != 200 {
			t.Errorf("GET %s without a token: %d %s", path, a.code, a.body)
		}
	}
}
