package httpapi_test

// The order of checks, found by a review against SPEC.md: a request that
// is invalid in itself, or could never change a clock, is answered so
// (400, 404, 409) before an application's quota is asked. Each test failed
// on the code before its fix, for the reason its comment gives.

import (
	"encoding/json"
	"testing"
	"time"
)

// An application at its max_live_clocks quota sends a create that is wrong
// in itself (both ring_at and delay): SPEC answers such a request 400
// invalid_argument. clockd asks the quota before it validates the request,
// so the answer is 429 resource_exhausted with a Retry-After: the client is
// told to wait and send again a request that can never succeed (the same
// mistake was fixed for replay, admitReplay: "429 with Retry-After for a
// replay that could never succeed").
func TestInvalidCreateAtQuotaIsRefusedAsInvalid(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	tok := e.newToken(map[string]any{"application": "order", "scopes": []string{"read", "write"}})
	e.setQuota("order", 1, 0, 0)
	if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", "live-0")); a.code != 201 {
		t.Fatalf("first create: %d %s", a.code, a.body)
	}
	bad := createBody("order", "bad-0", "ring_at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)) // and delay "1h"
	a := e.call(tok.Secret, "POST", "/v1/clocks", bad)
	if a.code != 400 {
		t.Errorf("create with both ring_at and delay, at the live-clocks quota: %d (Retry-After %q) %s; want 400 invalid_argument",
			a.code, a.header.Get("Retry-After"), a.body)
	}
	// the same in a batch item
	a = e.call(tok.Secret, "POST", "/v1/clocks/batch", map[string]any{"clocks": []any{bad}})
	var ans batchAnswer
	if err := json.Unmarshal(a.body, &ans); a.code != 200 || err != nil || len(ans.Results) != 1 {
		t.Fatalf("batch: %d %s", a.code, a.body)
	}
	if ans.Results[0].Status != 400 {
		t.Errorf("batch item with both ring_at and delay, at the live-clocks quota: status %d %s; want 400", ans.Results[0].Status, a.body)
	}
}

// A create that is refused as invalid writes nothing, yet it takes a token
// of its application's creates_per_second bucket (the quota is asked before
// the request is validated): with a rate of 1, one bad request makes the
// next valid create answer 429, although no clock was created in that
// second. README: "A create over a quota answers 429 ... and writes
// nothing"; a refused create should not count as one.
func TestInvalidCreateTakesNoCreatesPerSecondToken(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	tok := e.newToken(map[string]any{"application": "order", "scopes": []string{"read", "write"}})
	e.setQuota("order", 0, 1, 0)
	bad := createBody("order", "bad-0", "ring_at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)) // and delay "1h"
	if a := e.call(tok.Secret, "POST", "/v1/clocks", bad); a.code != 400 {
		t.Fatalf("invalid create: %d %s, want 400", a.code, a.body)
	}
	if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", "good-0")); a.code != 201 {
		t.Errorf("valid create right after a refused invalid one, rate 1/s, no clock created yet: %d (Retry-After %q) %s; want 201",
			a.code, a.header.Get("Retry-After"), a.body)
	}
	// A batch: an invalid item before a valid one takes the one token.
	time.Sleep(1100 * time.Millisecond)
	a := e.call(tok.Secret, "POST", "/v1/clocks/batch", map[string]any{"clocks": []any{
		createBody("order", "bad-1", "ring_at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)),
		createBody("order", "good-1")}})
	var ans batchAnswer
	if err := json.Unmarshal(a.body, &ans); a.code != 200 || err != nil || len(ans.Results) != 2 {
		t.Fatalf("batch: %d %s", a.code, a.body)
	}
	if ans.Results[0].Status != 400 || ans.Results[1].Status != 201 {
		t.Errorf("batch [invalid, valid] at 1 create/s: statuses %d, %d; want 400, 201: %s",
			ans.Results[0].Status, ans.Results[1].Status, a.body)
	}
}

// latest_ring_at "0001-01-01T00:00:00Z" (what Go's zero time.Time
// marshals to) is a time long past: SPEC "never ring after this", and
// clockd refuses any other past latest_ring_at ("is already past"; before
// 1970: "is before 1970"). clockd takes this one instant for "no limit"
// (alarm: LatestRingAt.IsZero()): the create answers 201 with
// "latest_ring_at": null and the clock will ring, and a PATCH with it
// removes the clock's limit instead of being refused.
func TestLatestRingAtOfYearOneIsNotNoLimit(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	const yearOne = "0001-01-01T00:00:00Z"
	code, data := e.do("POST", "/v1/clocks", createBody("order", "zero-latest", "latest_ring_at", yearOne))
	if code != 400 {
		t.Errorf("create with latest_ring_at %s: %d %s; want 400 (a past latest_ring_at)", yearOne, code, data)
	}
	// compare: one second before 1970 is refused
	e.mustError(400, "POST", "/v1/clocks", createBody("order", "pre-1970", "latest_ring_at", "1969-12-31T23:59:59Z"))

	limit := time.Now().Add(2 * time.Hour).UTC().Truncate(time.Millisecond)
	c := e.mustClock(201, "POST", "/v1/clocks", createBody("order", "limited", "latest_ring_at", fmtTime(limit)))
	if c.LatestRingAt == nil {
		t.Fatalf("created without its latest_ring_at: %+v", c)
	}
	code, data = e.do("PATCH", "/v1/clocks/order/limited", map[string]any{"latest_ring_at": yearOne})
	if code != 400 {
		t.Errorf("PATCH latest_ring_at %s: %d %s; want 400", yearOne, code, data)
	}
	got := e.mustClock(200, "GET", "/v1/clocks/order/limited", nil)
	if got.LatestRingAt == nil || *got.LatestRingAt != fmtTime(limit) {
		t.Errorf("after the PATCH the clock's latest_ring_at is %v, want %s (unchanged)", orNull(got.LatestRingAt), fmtTime(limit))
	}
}

func orNull(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

// The same order of checks on a reschedule: a PATCH whose payload is over
// the application's max_payload_bytes is answered 429 (Retry-After: 60)
// before the clock is looked at, so a PATCH of a clock that does not exist
// answers 429 instead of SPEC's 404, and one of a cancelled clock 429
// instead of 409: the client is told to wait a minute and send again a
// change that can never be made. (A replay refused by the quota is let
// through to its 404 or 409: admitReplay.)
func TestRescheduleOverPayloadQuotaOfNoPendingClock(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	tok := e.newToken(map[string]any{"application": "order", "scopes": []string{"read", "write"}})
	e.setQuota("order", 0, 0, 10)
	big := map[string]any{"payload": "01234567890123456789"}
	if a := e.call(tok.Secret, "PATCH", "/v1/clocks/order/no-such-clock", big); a.code != 404 {
		t.Errorf("PATCH of a clock that does not exist, payload over the quota: %d (Retry-After %q) %s; want 404",
			a.code, a.header.Get("Retry-After"), a.body)
	}
	if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", "gone", "payload", "small")); a.code != 201 {
		t.Fatalf("create: %d %s", a.code, a.body)
	}
	if a := e.call(tok.Secret, "DELETE", "/v1/clocks/order/gone", nil); a.code != 200 {
		t.Fatalf("cancel: %d %s", a.code, a.body)
	}
	if a := e.call(tok.Secret, "PATCH", "/v1/clocks/order/gone", big); a.code != 409 {
		t.Errorf("PATCH of a cancelled clock, payload over the quota: %d (Retry-After %q) %s; want 409",
			a.code, a.header.Get("Retry-After"), a.body)
	}
}

// README: "A request that could never succeed is answered as such before
// any quota is asked". Found by the review of this stop's diff: admitPatch
// let through only a missing or non-pending clock, so a PATCH whose fields can never apply to
// the clock it names (ring_at on a recurring clock, latest_ring_at before
// the clock's ring_at) is still told 429 with Retry-After when its payload
// is over max_payload_bytes, and 400 with a small payload.
func TestReschedulePayloadOverQuotaThatCanNeverApply(t *testing.T) {
	t.Parallel()
	e := newAuthAPI(t)
	tok := e.newToken(map[string]any{"application": "order", "scopes": []string{"read", "write"}})
	e.setQuota("order", 0, 0, 10)
	if a := e.call(tok.Secret, "POST", "/v1/clocks", createBody("order", "every", "payload", "small", "delay", nil,
		"schedule", map[string]any{"every": "1h"})); a.code != 201 {
		t.Fatalf("recurring create: %d %s", a.code, a.body)
	}
	small := map[string]any{"payload": "x", "ring_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	if a := e.call(tok.Secret, "PATCH", "/v1/clocks/order/every", small); a.code != 400 {
		t.Fatalf("PATCH ring_at of a recurring clock, small payload: %d %s; want 400", a.code, a.body)
	}
	big := map[string]any{"payload": "01234567890123456789", "ring_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
	if a := e.call(tok.Secret, "PATCH", "/v1/clocks/order/every", big); a.code != 400 {
		t.Errorf("PATCH ring_at of a recurring clock (never valid), payload over the quota: %d (Retry-After %q) %s; want 400 as with a small payload",
			a.code, a.header.Get("Retry-After"), a.body)
	}
}
