package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/httpapi"
)

func (e *apiEnv) setQuota(app string, live, rate, payload int) {
	e.t.Helper()
	a := e.call(bootstrapAdmin, "PUT", "/v1/applications/"+app+"/quota",
		map[string]int{"max_live_clocks": live, "creates_per_second": rate, "max_payload_bytes": payload})
	var q httpapi.Quota
	if err := json.Unmarshal(a.body, &q); a.code != 200 || err != nil || q.MaxLiveClocks != live ||
		q.CreatesPerSecond != rate || q.MaxPayloadBytes != payload || q.Application != app || q.UpdatedAt == nil {
		e.t.Fatalf("set quota: %d %s", a.code, a.body)
	}
}

// must429 checks a 429 answer: resource_exhausted, Retry-After, nothing
// written.
func (e *apiEnv) must429(token, method, path string, b any) authAnswer {
	e.t.Helper()
	before := e.tableState()
	a := e.call(token, method, path, b)
	if a.code != 429 {
		e.t.Fatalf("%s %s: %d %s, want 429", method, path, a.code, a.body)
	}
	checkErrorJSON(e.t, a.code, a.body)
	if s, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || s < 1 {
		e.t.Errorf("Retry-After %q", a.header.Get("Retry-After"))
	}
	if after := e.tableState(); after != before {
		e.t.Errorf("a refused create changed the table: %s -> %s", before, after)
	}
	return a
}

func TestQuotaCreatesPerSecond(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	tok := e.newToken(map[string]any{"application": "order", "scopes": []string{"read", "write"}})
	e.setQuota("order", 0, 2, 0)
	for i := range 2 {
		if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", fmt.Sprint("r-", i))); a.code != 201 {
			t.Fatalf("create %d within the rate: %d %s", i, a.code, a.body)
		}
	}
	a := e.must429(tok.Secret, "POST", "/v1/clocks", createBody("order", "r-2"))
	if !strings.Contains(string(a.body), "creates_per_second") {
		t.Errorf("429 does not name the quota: %s", a.body)
	}
	// Another application is not limited by order's quota.
	if a := e.call(bootstrapAdmin, "POST", "/v1/clocks", createBody("member", "r-0")); a.code != 201 {
		t.Errorf("other application: %d %s", a.code, a.body)
	}
	// Refilled after a second.
	time.Sleep(1100 * time.Millisecond)
	if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", "r-2")); a.code != 201 {
		t.Errorf("after a second: %d %s", a.code, a.body)
	}
	// A batch: per-item 429, the others written.
	time.Sleep(1100 * time.Millisecond)
	a = e.call(tok.Secret, "POST", "/v1/clocks/batch", map[string]any{"clocks": []any{
		createBody("order", "b-0"), createBody("order", "b-1"), createBody("order", "b-2")}})
	var ans batchAnswer
	if err := json.Unmarshal(a.body, &ans); a.code != 200 || err != nil || len(ans.Results) != 3 {
		t.Fatalf("batch: %d %s", a.code, a.body)
	}
	if ans.Results[0].Status != 201 || ans.Results[1].Status != 201 || ans.Results[2].Status != 429 ||
		ans.Results[2].Error == nil || ans.Results[2].Error.Code != "resource_exhausted" {
		t.Errorf("batch over the rate: %s", a.body)
	}
	if n := e.count("application = 'order' AND business_id = 'b-2'"); n != 0 {
		t.Errorf("the refused item was written")
	}
}

func TestQuotaLiveClocksAndPayload(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	tok := e.newToken(map[string]any{"application": "order", "scopes": []string{"read", "write"}})
	e.setQuota("order", 2, 0, 10)
	if a := e.call(bootstrapAdmin, "GET", "/v1/applications/order/quota", nil); a.code != 200 ||
		!strings.Contains(string(a.body), `"max_live_clocks":2`) {
		t.Errorf("get quota: %d %s", a.code, a.body)
	}
	a := e.must429(tok.Secret, "POST", "/v1/clocks", createBody("order", "big", "payload", "12345678901"))
	if !strings.Contains(string(a.body), "max_payload_bytes") {
		t.Errorf("429 does not name the quota: %s", a.body)
	}
	for i := range 2 {
		if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", fmt.Sprint("l-", i), "payload", "{}")); a.code != 201 {
			t.Fatalf("create %d within the quota: %d %s", i, a.code, a.body)
		}
	}
	e.must429(tok.Secret, "POST", "/v1/clocks", createBody("order", "l-2", "payload", "{}"))
	e.must429(bootstrapAdmin, "POST", "/v1/clocks", createBody("order", "l-2", "payload", "{}")) // admins too: it is the application's
	// A finished clock no longer counts, once the count is refreshed.
	if a := e.call(tok.Secret, "DELETE", "/v1/clocks/order/l-0", nil); a.code != 200 {
		t.Fatalf("cancel: %d %s", a.code, a.body)
	}
	time.Sleep(1100 * time.Millisecond)
	if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", "l-2", "payload", "{}")); a.code != 201 {
		t.Errorf("after a cancel: %d %s", a.code, a.body)
	}
	// 0 lifts the limits.
	e.setQuota("order", 0, 0, 0)
	if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", "l-3", "payload", "12345678901")); a.code != 201 {
		t.Errorf("without a quota: %d %s", a.code, a.body)
	}
	for _, b := range []string{`{"max_live_clocks":-1}`, `{"max_live_clocks":"x"}`, `{"colour":1}`, `[1]`} {
		if a := e.call(bootstrapAdmin, "PUT", "/v1/applications/order/quota", b); a.code != 400 {
			t.Errorf("quota %s: %d %s, want 400", b, a.code, a.body)
		}
	}
	if a := e.call(bootstrapAdmin, "PUT", "/v1/applications/bad%20app/quota", `{}`); a.code != 400 {
		t.Errorf("quota of a bad application name: %d %s", a.code, a.body)
	}
}
