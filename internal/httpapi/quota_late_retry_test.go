package httpapi_test

import (
	"encoding/json"
	"testing"
	"time"
)

// README: "The idempotency rule comes first: a create for the key of a
// live clock sets no clock, so at a quota too an identical retry answers
// 200 with the clock". Also the retry sent after the clock's
// latest_ring_at passed (invalid as a new clock, see Service.Create): it
// answered 429, as if it would set a clock. A create for the key that is
// not identical still hears the quota's 429.
func TestQuotaLateIdenticalRetry(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	call := func(method, path string, b any) authAnswer { return e.call(bootstrapAdmin, method, path, b) }
	now := time.Now()
	retry := createBody("ql-live", "q1", "delay", nil, "ring_at", now.Add(100*time.Millisecond).Format(time.RFC3339Nano),
		"latest_ring_at", now.Add(300*time.Millisecond).Format(time.RFC3339Nano))
	a := call("POST", "/v1/clocks", retry)
	mustAnswer(t, a, 201, "create q1")
	first := checkClockJSON(t, a.body)
	e.setQuota("ql-live", 1, 0, 0)
	time.Sleep(time.Until(now.Add(400 * time.Millisecond))) // latest_ring_at passed; q1 is still live (no ring loop)

	a = call("POST", "/v1/clocks", retry)
	mustAnswer(t, a, 200, "identical retry of q1 after its latest_ring_at, at the quota")
	if c := checkClockJSON(t, a.body); c.ID != first.ID {
		t.Errorf("retry answered clock %d, want %d", c.ID, first.ID)
	}
	other := createBody("ql-live", "q1", "delay", nil, "ring_at", now.Add(100*time.Millisecond).Format(time.RFC3339Nano),
		"latest_ring_at", now.Add(200*time.Millisecond).Format(time.RFC3339Nano))
	e.must429(bootstrapAdmin, "POST", "/v1/clocks", other)

	a = call("POST", "/v1/clocks/batch", map[string]any{"clocks": []any{retry, other}})
	var ans batchAnswer
	if err := json.Unmarshal(a.body, &ans); a.code != 200 || err != nil || len(ans.Results) != 2 {
		t.Fatalf("batch: %d %s", a.code, a.body)
	}
	if ans.Results[0].Status != 200 || ans.Results[1].Status != 429 {
		t.Errorf("batch at the quota: %s, want 200 for the identical retry, 429 for the other", a.body)
	}
}
