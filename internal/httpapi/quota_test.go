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
	const rest = `"creates_per_second":0,"max_payload_bytes":0`
	for _, b := range []string{`{"max_live_clocks":-1,` + rest + `}`, `{"max_live_clocks":"x",` + rest + `}`,
		`{"max_live_clocks":0,"colour":1,` + rest + `}`, `[1]`} {
		if a := e.call(bootstrapAdmin, "PUT", "/v1/applications/order/quota", b); a.code != 400 {
			t.Errorf("quota %s: %d %s, want 400", b, a.code, a.body)
		}
	}
	if a := e.call(bootstrapAdmin, "PUT", "/v1/applications/bad%20app/quota", `{}`); a.code != 400 {
		t.Errorf("quota of a bad application name: %d %s", a.code, a.body)
	}
}

// mustAnswer checks an answer's status; for an error, its SPEC shape too.
func mustAnswer(t *testing.T, a authAnswer, want int, what string) {
	t.Helper()
	if a.code != want {
		t.Fatalf("%s: %d %s, want %d", what, a.code, a.body, want)
	}
	if want >= 400 {
		checkErrorJSON(t, a.code, a.body)
	}
}

// TestQuotaIdenticalRetry: the idempotency rule comes before the quotas. At
// a quota, an identical retry of a create answers 200 with its clock and a
// create with other content for the key answers 409, alone or in a batch;
// only a create that would set a clock gets 429. None of them writes.
func TestQuotaIdenticalRetry(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	for _, tt := range []struct {
		app               string
		live, rate, bytes int
		payload           string // of the clocks made before the quota
	}{
		{"qa-live", 3, 0, 0, "{}"},
		{"qa-rate", 0, 1, 0, "{}"},
		{"qa-payload", 0, 0, 5, "0123456789"}, // a quota lowered under them
	} {
		t.Run(tt.app, func(t *testing.T) {
			e := e.with(t)
			call := func(method, path string, b any) authAnswer { return e.call(bootstrapAdmin, method, path, b) }
			clocks := map[string]httpapi.Clock{}
			for _, id := range []string{"q1", "q2", "q3"} {
				a := call("POST", "/v1/clocks", createBody(tt.app, id, "payload", tt.payload))
				mustAnswer(t, a, 201, "create "+id)
				clocks[id] = checkClockJSON(t, a.body)
			}
			e.setQuota(tt.app, tt.live, tt.rate, tt.bytes)
			emptied := time.Now()
			if tt.rate > 0 { // empty the bucket: it refills in a second
				mustAnswer(t, call("POST", "/v1/clocks", createBody(tt.app, "fill", "payload", tt.payload)), 201, "create fill")
			}
			e.must429(bootstrapAdmin, "POST", "/v1/clocks", createBody(tt.app, "q4", "payload", tt.payload))

			before := e.tableState()
			a := call("POST", "/v1/clocks", createBody(tt.app, "q1", "payload", tt.payload))
			mustAnswer(t, a, 200, "identical retry of q1")
			if c := checkClockJSON(t, a.body); c.ID != clocks["q1"].ID || c.Payload != tt.payload {
				t.Errorf("identical retry answered clock %d %q, want %d", c.ID, c.Payload, clocks["q1"].ID)
			}
			a = call("POST", "/v1/clocks", createBody(tt.app, "q1", "payload", tt.payload, "max_attempts", 7))
			mustAnswer(t, a, 409, "create of q1 with other content")
			if !strings.Contains(string(a.body), "different content") {
				t.Errorf("409 does not say why: %s", a.body)
			}
			a = call("POST", "/v1/clocks/batch", map[string]any{"clocks": []any{
				createBody(tt.app, "q2", "payload", tt.payload),
				createBody(tt.app, "q3", "payload", tt.payload, "delay", "2h"),
				createBody(tt.app, "q5", "payload", tt.payload)}})
			var ans batchAnswer
			if err := json.Unmarshal(a.body, &ans); a.code != 200 || err != nil || len(ans.Results) != 3 {
				t.Fatalf("batch: %d %s", a.code, a.body)
			}
			// On a slow machine the rate bucket may have refilled meanwhile
			// and let q5 be created: then only the retries are judged.
			refilled := tt.rate > 0 && time.Since(emptied) > time.Second
			for i, want := range []int{200, 409, 429} {
				if i == 2 && refilled {
					t.Logf("the bucket refilled (%v since it was emptied): q5 answered %d", time.Since(emptied), ans.Results[i].Status)
					continue
				}
				if ans.Results[i].Status != want || (want >= 400) != (ans.Results[i].Error != nil) {
					t.Errorf("batch item %d: status %d, want %d: %s", i, ans.Results[i].Status, want, a.body)
				}
			}
			if ans.Results[0].Status == 200 {
				if c := checkClockJSON(t, ans.Results[0].Clock); c.ID != clocks["q2"].ID {
					t.Errorf("batch: identical retry of q2 answered clock %d, want %d", c.ID, clocks["q2"].ID)
				}
			}
			if after := e.tableState(); after != before && !refilled {
				t.Errorf("the retries wrote: %s -> %s", before, after)
			}
		})
	}
}

// TestQuotaPayloadOfReschedule: a reschedule's payload is held to
// max_payload_bytes as a create's is, with the same answer.
func TestQuotaPayloadOfReschedule(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	tok := e.newToken(map[string]any{"application": "order", "scopes": []string{"read", "write"}})
	e.setQuota("order", 0, 0, 10)
	const big = "0123456789ABCDEFGHIJ"
	create := e.must429(tok.Secret, "POST", "/v1/clocks", createBody("order", "p-1", "payload", big))
	if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", "p-1", "payload", "{}")); a.code != 201 {
		t.Fatalf("create: %d %s", a.code, a.body)
	}
	patch := e.must429(tok.Secret, "PATCH", "/v1/clocks/order/p-1", map[string]string{"payload": big})
	var cd, pd httpapi.ErrorBody
	if json.Unmarshal(create.body, &cd) != nil || json.Unmarshal(patch.body, &pd) != nil || cd != pd {
		t.Errorf("the refusals differ:\ncreate %s\npatch  %s", create.body, patch.body)
	}
	if !strings.Contains(pd.Error.Message, "max_payload_bytes") {
		t.Errorf("429 does not name the quota: %s", patch.body)
	}
	// within it, or no payload at all: as before
	for _, b := range []map[string]string{{"payload": "0123456789"}, {"delay": "2h"}} {
		if a := e.call(tok.Secret, "PATCH", "/v1/clocks/order/p-1", b); a.code != 200 {
			t.Errorf("PATCH %v: %d %s", b, a.code, a.body)
		}
	}
	e.setQuota("order", 0, 0, 0)
	a := e.call(tok.Secret, "PATCH", "/v1/clocks/order/p-1", map[string]string{"payload": big})
	if a.code != 200 || checkClockJSON(t, a.body).Payload != big {
		t.Errorf("PATCH without a quota: %d %s", a.code, a.body)
	}
}

// TestQuotaPutNeedsEveryField: a PUT of a quota that leaves a limit out, or
// sends it null, answers 400 naming it and changes nothing; it had answered
// 200 and lifted that limit (0 = no limit), unsaid (found by review).
func TestQuotaPutNeedsEveryField(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	e.setQuota("order", 7, 3, 100)
	for _, b := range []struct{ body, missing string }{
		{`{"creates_per_second":5}`, "max_live_clocks"},
		{`{"max_live_clocks":7,"creates_per_second":5}`, "max_payload_bytes"},
		{`{"max_live_clocks":null,"creates_per_second":5,"max_payload_bytes":100}`, "max_live_clocks"},
		{`{}`, "creates_per_second"},
	} {
		a := e.call(bootstrapAdmin, "PUT", "/v1/applications/order/quota", b.body)
		mustAnswer(t, a, 400, "PUT "+b.body)
		if !strings.Contains(string(a.body), b.missing+": missing; ") || !strings.Contains(string(a.body), "GET it first") {
			t.Errorf("PUT %s: %s, want it to name %s as missing and say what to do", b.body, a.body, b.missing)
		}
	}
	a := e.call(bootstrapAdmin, "GET", "/v1/applications/order/quota", nil)
	mustAnswer(t, a, 200, "GET quota")
	var q httpapi.Quota
	if err := json.Unmarshal(a.body, &q); err != nil {
		t.Fatal(err)
	}
	if q.MaxLiveClocks != 7 || q.CreatesPerSecond != 3 || q.MaxPayloadBytes != 100 {
		t.Errorf("quota after refused PUTs: %+v, want 7 / 3 / 100 kept", q)
	}
}
