package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/httpapi"
)

func js(v any) string {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func TestCreate(t *testing.T) {
	t.Parallel()
	e := newAPI(t)

	t.Run("new clock by ring_at", func(t *testing.T) {
		e := e.with(t)
		ringAt := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
		before := time.Now().UTC().Truncate(time.Millisecond)
		c := e.mustClock(201, "POST", "/v1/clocks", body{"application": "order", "business_id": "o-123",
			"payload": `{"order":123}`, "ring_at": ringAt.Format(time.RFC3339Nano)})
		after := time.Now()
		if c.ID <= 0 || c.Application != "order" || c.BusinessID != "o-123" || c.Payload != `{"order":123}` ||
			c.ContentType != "application/json" || c.Status != "pending" || c.Attempts != 0 || c.MaxAttempts != 0 {
			t.Errorf("clock %+v", c)
		}
		if c.RingAt != fmtTime(ringAt) || c.NextTryAt != c.RingAt {
			t.Errorf("ring_at %s next_try_at %s, want %s", c.RingAt, c.NextTryAt, fmtTime(ringAt))
		}
		if c.LatestRingAt != nil || c.LastError != nil || c.RungAt != nil {
			t.Errorf("latest_ring_at %v last_error %v rung_at %v, want null", c.LatestRingAt, c.LastError, c.RungAt)
		}
		created := parseTime(t, c.CreatedAt)
		if created.Before(before) || created.After(after) || c.UpdatedAt != c.CreatedAt {
			t.Errorf("created_at %s updated_at %s, want between %v and %v", c.CreatedAt, c.UpdatedAt, before, after)
		}
		// The answer is what MySQL holds.
		if got := e.mustClock(200, "GET", "/v1/clocks/order/o-123", nil); !reflect.DeepEqual(got, c) {
			t.Errorf("GET after create:\n got %+v\nwant %+v", got, c)
		}
		var r struct {
			Shard  int   `db:"shard"`
			Target int64 `db:"target_ring_at"`
			Next   int64 `db:"next_try_time"`
		}
		if err := e.db.Get(&r, "SELECT shard, target_ring_at, next_try_time FROM clock WHERE id = ?", c.ID); err != nil {
			t.Fatal(err)
		}
		if r.Target != ringAt.UnixMilli() || r.Next != ringAt.UnixMilli() || r.Shard != alarm.ShardOf("order", "o-123", testShards) {
			t.Errorf("row %+v, want target/next %d shard %d", r, ringAt.UnixMilli(), alarm.ShardOf("order", "o-123", testShards))
		}

		t.Run("identical again is 200 with the same clock", func(t *testing.T) {
			e := e.with(t)
			again := e.mustClock(200, "POST", "/v1/clocks", body{"application": "order", "business_id": "o-123",
				"payload": `{"order":123}`, "content_type": "application/json",
				"ring_at": ringAt.In(time.FixedZone("CET", 3600)).Format(time.RFC3339Nano)})
			if !reflect.DeepEqual(again, c) {
				t.Errorf("got %+v\nwant %+v", again, c)
			}
		})
		for name, b := range map[string]body{
			"other payload":        {"application": "order", "business_id": "o-123", "payload": `{"order":124}`, "ring_at": fmtTime(ringAt)},
			"no payload":           {"application": "order", "business_id": "o-123", "ring_at": fmtTime(ringAt)},
			"other content_type":   {"application": "order", "business_id": "o-123", "payload": `{"order":123}`, "ring_at": fmtTime(ringAt), "content_type": "text/plain"},
			"other ring_at":        {"application": "order", "business_id": "o-123", "payload": `{"order":123}`, "ring_at": fmtTime(ringAt.Add(time.Millisecond))},
			"other latest_ring_at": {"application": "order", "business_id": "o-123", "payload": `{"order":123}`, "ring_at": fmtTime(ringAt), "latest_ring_at": fmtTime(ringAt.Add(time.Hour))},
			"other max_attempts":   {"application": "order", "business_id": "o-123", "payload": `{"order":123}`, "ring_at": fmtTime(ringAt), "max_attempts": 3},
			"delay":                {"application": "order", "business_id": "o-123", "payload": `{"order":123}`, "delay": "3h"},
		} {
			t.Run(name+" is 409", func(t *testing.T) {
				e := e.with(t)
				msg := e.mustError(409, "POST", "/v1/clocks", b)
				if !strings.Contains(msg, "order/o-123") {
					t.Errorf("conflict message %q does not name the clock", msg)
				}
			})
		}
	})

	t.Run("every optional field", func(t *testing.T) {
		e := e.with(t)
		ringAt := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
		latest := ringAt.Add(2 * time.Hour)
		c := e.mustClock(201, "POST", "/v1/clocks", body{"application": "Shop.EU_1-x", "business_id": "订单 #42 ✓",
			"payload": "plain \u0000 text", "content_type": "text/plain; charset=utf-8", "ring_at": fmtTime(ringAt),
			"latest_ring_at": fmtTime(latest), "max_attempts": 7})
		if c.Application != "Shop.EU_1-x" || c.BusinessID != "订单 #42 ✓" || c.Payload != "plain \u0000 text" ||
			c.ContentType != "text/plain; charset=utf-8" || c.MaxAttempts != 7 ||
			c.LatestRingAt == nil || *c.LatestRingAt != fmtTime(latest) {
			t.Errorf("clock %+v", c)
		}
		got := e.mustClock(200, "GET", "/v1/clocks/Shop.EU_1-x/"+url.PathEscape("订单 #42 ✓"), nil)
		if !reflect.DeepEqual(got, c) {
			t.Errorf("GET:\n got %+v\nwant %+v", got, c)
		}
	})

	t.Run("ring_at in the past rings now", func(t *testing.T) {
		e := e.with(t)
		ringAt := time.Now().Add(-48 * time.Hour).UTC().Truncate(time.Millisecond)
		before := time.Now().UTC().Truncate(time.Millisecond)
		c := e.mustClock(201, "POST", "/v1/clocks", createBody("order", "past", "delay", nil, "ring_at", fmtTime(ringAt)))
		after := time.Now()
		if c.RingAt != fmtTime(ringAt) {
			t.Errorf("ring_at %s, want %s", c.RingAt, fmtTime(ringAt))
		}
		if next := parseTime(t, c.NextTryAt); next.Before(before) || next.After(after) {
			t.Errorf("next_try_at %s, want now (%v .. %v)", c.NextTryAt, before, after)
		}
	})

	t.Run("delay", func(t *testing.T) {
		e := e.with(t)
		c := e.mustClock(201, "POST", "/v1/clocks", createBody("order", "d-1", "delay", "30m"))
		// created_at is the request's moment rounded down to the
		// millisecond, ring_at that moment plus the delay rounded up
		if d := parseTime(t, c.RingAt).Sub(parseTime(t, c.CreatedAt)); d != 30*time.Minute && d != 30*time.Minute+time.Millisecond {
			t.Errorf("ring_at - created_at = %v, want 30m (or 1 ms more)", d)
		}
		time.Sleep(25 * time.Millisecond)
		// A retried delay-based create is the same clock although "now" moved.
		for _, delay := range []any{"30m", "1800s", 1800000} {
			if again := e.mustClock(200, "POST", "/v1/clocks", createBody("order", "d-1", "delay", delay)); !reflect.DeepEqual(again, c) {
				t.Errorf("retry with delay %v:\n got %+v\nwant %+v", delay, again, c)
			}
		}
		// So is a create naming the ring time that the delay gave.
		e.mustClock(200, "POST", "/v1/clocks", createBody("order", "d-1", "delay", nil, "ring_at", c.RingAt))
		e.mustError(409, "POST", "/v1/clocks", createBody("order", "d-1", "delay", "31m"))
		// (created_at keeps whole milliseconds: a delay 1 ms longer may
		// have given the same ring_at; 2 ms cannot)
		e.mustError(409, "POST", "/v1/clocks", createBody("order", "d-1", "delay", 1800002))
		e.mustError(409, "POST", "/v1/clocks", createBody("order", "d-1", "delay", 1799998))
		e.mustError(409, "POST", "/v1/clocks", createBody("order", "d-1", "delay", "30m", "payload", "other"))

		ms := e.mustClock(201, "POST", "/v1/clocks", createBody("order", "d-2", "delay", 1500))
		if d := parseTime(t, ms.RingAt).Sub(parseTime(t, ms.CreatedAt)); d != 1500*time.Millisecond && d != 1501*time.Millisecond {
			t.Errorf("integer delay 1500: ring_at - created_at = %v", d)
		}
		zero := e.mustClock(201, "POST", "/v1/clocks", createBody("order", "d-3", "delay", "0s"))
		if d := parseTime(t, zero.RingAt).Sub(parseTime(t, zero.CreatedAt)); (d != 0 && d != time.Millisecond) || zero.NextTryAt != zero.RingAt {
			t.Errorf("zero delay: ring_at %s next %s created %s", zero.RingAt, zero.NextTryAt, zero.CreatedAt)
		}
	})

	t.Run("identical create of a clock that is no longer pending", func(t *testing.T) {
		e := e.with(t)
		c := e.mustClock(201, "POST", "/v1/clocks", createBody("order", "gone", "delay", "10m"))
		e.mustClock(200, "DELETE", "/v1/clocks/order/gone", nil)
		again := e.mustClock(200, "POST", "/v1/clocks", createBody("order", "gone", "delay", "10m"))
		if again.ID != c.ID || again.Status != "cancelled" {
			t.Errorf("got %+v, want the cancelled clock %d", again, c.ID)
		}
	})
}

// TestTrailingSpaceBusinessID: MySQL's PAD SPACE collations compare "o-1 "
// equal to "o-1"; such ids must be refused, not confused with another clock.
func TestTrailingSpaceBusinessID(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	e.mustClock(201, "POST", "/v1/clocks", createBody("order", "o-1"))
	before := e.tableState()
	e.mustError(400, "POST", "/v1/clocks", createBody("order", "o-1 ", "payload", "another"))
	e.mustError(400, "GET", "/v1/clocks/order/o-1%20", nil)
	e.mustError(400, "DELETE", "/v1/clocks/order/o-1%20", nil)
	e.mustError(400, "PATCH", "/v1/clocks/order/o-1%20", body{"payload": "x"})
	if after := e.tableState(); after != before {
		t.Errorf("table changed: %s -> %s", before, after)
	}
	if c := e.mustClock(200, "GET", "/v1/clocks/order/o-1", nil); c.Status != "pending" {
		t.Errorf("o-1 is %s", c.Status)
	}
}

// TestDotSegmentKeys: "." and ".." cannot be path segments (clients and
// net/http remove them: GET /v1/clocks/order/.. is GET /v1/clocks), so such
// keys are refused; other keys with dots work through url.PathEscape, as
// clockctl builds paths.
func TestDotSegmentKeys(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	for _, id := range []string{".", ".."} {
		if msg := e.mustError(400, "POST", "/v1/clocks", createBody("order", id)); !strings.Contains(msg, "business_id") {
			t.Errorf("business_id %q: message %q", id, msg)
		}
		if msg := e.mustError(400, "POST", "/v1/clocks", createBody(id, "o-1")); !strings.Contains(msg, "application") {
			t.Errorf("application %q: message %q", id, msg)
		}
	}
	if n := e.count("1=1"); n != 0 {
		t.Errorf("%d rows written", n)
	}
	for _, k := range [][2]string{{"order", "..."}, {"order", "a.."}, {"order", ".a"}, {"...", "x"}, {"a.b", "?#%&=+ "[:6]}} {
		c := e.mustClock(201, "POST", "/v1/clocks", createBody(k[0], k[1]))
		path := "/v1/clocks/" + url.PathEscape(k[0]) + "/" + url.PathEscape(k[1])
		if got := e.mustClock(200, "GET", path, nil); got.ID != c.ID {
			t.Errorf("GET %s: clock %d, want %d", path, got.ID, c.ID)
		}
		if got := e.mustClock(200, "DELETE", path, nil); got.ID != c.ID || got.Status != "cancelled" {
			t.Errorf("DELETE %s: %+v", path, got)
		}
	}
}

type batchAnswer struct {
	Results []struct {
		Status int                  `json:"status"`
		Clock  json.RawMessage      `json:"clock"`
		Error  *httpapi.ErrorDetail `json:"error"`
	} `json:"results"`
}

func TestBatchCreate(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	existing := e.mustClock(201, "POST", "/v1/clocks", createBody("order", "existing", "delay", "5m"))

	items := []any{
		createBody("order", "b-1"),                     // 201
		createBody("bad app", "b-2"),                   // 400
		createBody("order", "b-1"),                     // 200: identical to item 0
		createBody("order", "b-1", "payload", "other"), // 409: differs from item 0
		createBody("order", "b-3", "delay", nil),       // 400: no ring time
		createBody("order", "existing", "delay", "5m"), // 200: identical to a stored clock
		createBody("order", "existing", "delay", "6m"), // 409
		json.RawMessage(`{"application":"order","business_id":"b-4","delay":"1m","colour":"red"}`), // 400
		createBody("order", "b-5", "payload", strings.Repeat("p", testMaxPayload+1)),               // 413
		createBody("billing", "b-1", "ring_at", fmtTime(time.Now().Add(-time.Hour)), "delay", nil), // 201
		json.RawMessage(`null`), // 400
		json.RawMessage(`"x"`),  // 400
	}
	want := []int{201, 400, 200, 409, 400, 200, 409, 400, 413, 201, 400, 400}
	code, data := e.do("POST", "/v1/clocks/batch", body{"clocks": items})
	if code != 200 {
		t.Fatalf("batch: status %d, body %s", code, data)
	}
	var ans batchAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		t.Fatal(err)
	}
	if len(ans.Results) != len(want) {
		t.Fatalf("%d results, want %d", len(ans.Results), len(want))
	}
	clocks := map[int]httpapi.Clock{}
	for i, r := range ans.Results {
		if r.Status != want[i] {
			t.Errorf("item %d: status %d, want %d (%s)", i, r.Status, want[i], data)
			continue
		}
		if r.Status < 300 {
			if r.Error != nil || r.Clock == nil {
				t.Errorf("item %d: %d with error %v / clock %s", i, r.Status, r.Error, r.Clock)
				continue
			}
			clocks[i] = checkClockJSON(t, r.Clock)
			continue
		}
		if r.Clock != nil || r.Error == nil {
			t.Errorf("item %d: %d with clock %s / error %v", i, r.Status, r.Clock, r.Error)
			continue
		}
		errJSON, _ := json.Marshal(map[string]any{"error": r.Error})
		checkErrorJSON(t, r.Status, errJSON)
	}
	if clocks[0].ID == 0 || clocks[2].ID != clocks[0].ID || clocks[5].ID != existing.ID || clocks[9].ID == clocks[0].ID {
		t.Errorf("ids: item0 %d item2 %d item5 %d (existing %d) item9 %d",
			clocks[0].ID, clocks[2].ID, clocks[5].ID, existing.ID, clocks[9].ID)
	}
	if !strings.Contains(ans.Results[1].Error.Message, "application") || !strings.Contains(ans.Results[7].Error.Message, "colour") ||
		!strings.Contains(ans.Results[8].Error.Message, "payload") || !strings.Contains(ans.Results[4].Error.Message, "ring_at") {
		t.Errorf("messages do not name the fields: %s", data)
	}
	if n := e.count("1=1"); n != 3 {
		t.Errorf("%d rows, want 3 (existing, order/b-1, billing/b-1)", n)
	}
	if got := e.mustClock(200, "GET", "/v1/clocks/order/b-1", nil); got.Payload != `{"n":1}` {
		t.Errorf("order/b-1 payload %q", got.Payload)
	}

	t.Run("1000 items", func(t *testing.T) {
		e := e.with(t)
		items := make([]any, 1000)
		for i := range items {
			items[i] = createBody("bulk", fmt.Sprintf("k-%04d", i), "delay", fmt.Sprintf("%dms", 60000+i))
		}
		code, data := e.do("POST", "/v1/clocks/batch", body{"clocks": items})
		if code != 200 {
			t.Fatalf("status %d: %.300s", code, data)
		}
		var ans batchAnswer
		if err := json.Unmarshal(data, &ans); err != nil {
			t.Fatal(err)
		}
		seen := map[int64]bool{}
		for i, r := range ans.Results {
			if r.Status != 201 {
				t.Fatalf("item %d: %d %v", i, r.Status, r.Error)
			}
			var c httpapi.Clock
			_ = json.Unmarshal(r.Clock, &c)
			if c.BusinessID != fmt.Sprintf("k-%04d", i) || seen[c.ID] {
				t.Fatalf("item %d: clock %s/%s id %d out of order or repeated", i, c.Application, c.BusinessID, c.ID)
			}
			seen[c.ID] = true
		}
		if n := e.count("application = 'bulk'"); n != 1000 {
			t.Errorf("%d rows, want 1000", n)
		}
	})

	t.Run("more than 1000 items is 413", func(t *testing.T) {
		e := e.with(t)
		before := e.tableState()
		items := make([]any, 1001)
		for i := range items {
			items[i] = createBody("toomany", fmt.Sprintf("k-%d", i))
		}
		msg := e.mustError(413, "POST", "/v1/clocks/batch", body{"clocks": items})
		if !strings.Contains(msg, "clocks") {
			t.Errorf("message %q does not name clocks", msg)
		}
		if after := e.tableState(); after != before {
			t.Errorf("table changed: %s -> %s", before, after)
		}
	})
}

func TestGet(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	c := e.mustClock(201, "POST", "/v1/clocks", createBody("order", "o-1"))
	if got := e.mustClock(200, "GET", "/v1/clocks/order/o-1", nil); !reflect.DeepEqual(got, c) {
		t.Errorf("got %+v\nwant %+v", got, c)
	}
	for _, path := range []string{"/v1/clocks/order/o-2", "/v1/clocks/other/o-1", "/v1/clocks/ORDER/o-1", "/v1/clocks/order/O-1"} {
		if msg := e.mustError(404, "GET", path, nil); !strings.Contains(msg, "not found") {
			t.Errorf("GET %s: message %q", path, msg)
		}
	}
	// A rung clock shows rung_at, a dead one its last_error.
	rungAt := time.Now().UTC().Truncate(time.Millisecond)
	e.exec("UPDATE clock SET status = 'rung', attempts = 1, rung_at = ? WHERE id = ?", rungAt.UnixMilli(), c.ID)
	got := e.mustClock(200, "GET", "/v1/clocks/order/o-1", nil)
	if got.Status != "rung" || got.Attempts != 1 || got.RungAt == nil || *got.RungAt != fmtTime(rungAt) {
		t.Errorf("rung clock %+v", got)
	}
	e.exec("UPDATE clock SET status = 'dead', last_error = 'NO_ROUTE: no queue bound' WHERE id = ?", c.ID)
	if got := e.mustClock(200, "GET", "/v1/clocks/order/o-1", nil); got.Status != "dead" || got.LastError == nil ||
		*got.LastError != "NO_ROUTE: no queue bound" {
		t.Errorf("dead clock %+v", got)
	}
	if msg := e.mustError(400, "GET", "/v1/clocks/bad%20app/o-1", nil); !strings.Contains(msg, "application") {
		t.Errorf("message %q", msg)
	}
	if msg := e.mustError(400, "GET", "/v1/clocks/order/a%2Fb", nil); !strings.Contains(msg, "business_id") {
		t.Errorf("message %q", msg)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	c := e.mustClock(201, "POST", "/v1/clocks", createBody("order", "o-1"))
	time.Sleep(5 * time.Millisecond)
	got := e.mustClock(200, "DELETE", "/v1/clocks/order/o-1", nil)
	if got.ID != c.ID || got.Status != "cancelled" || got.UpdatedAt <= c.UpdatedAt || got.RingAt != c.RingAt {
		t.Errorf("cancelled clock %+v (was %+v)", got, c)
	}
	if st := e.mustClock(200, "GET", "/v1/clocks/order/o-1", nil); st.Status != "cancelled" {
		t.Errorf("status after cancel %q", st.Status)
	}
	e.mustError(409, "DELETE", "/v1/clocks/order/o-1", nil)
	if msg := e.mustError(404, "DELETE", "/v1/clocks/order/nope", nil); msg != "cancel clock order/nope: not found" {
		t.Errorf("404 message %q, want %q (the clock named once)", msg, "cancel clock order/nope: not found")
	}
	for _, st := range []alarm.Status{alarm.StatusFiring, alarm.StatusRung, alarm.StatusExpired, alarm.StatusDead} {
		id := "s-" + string(st)
		e.mustClock(201, "POST", "/v1/clocks", createBody("order", id))
		e.exec("UPDATE clock SET status = ? WHERE application = 'order' AND business_id = ?", string(st), id)
		before := e.tableState()
		if msg := e.mustError(409, "DELETE", "/v1/clocks/order/"+id, nil); !strings.Contains(msg, string(st)) {
			t.Errorf("cancel of a %s clock: message %q does not say why", st, msg)
		}
		if after := e.tableState(); after != before {
			t.Errorf("cancel of a %s clock changed the table", st)
		}
	}
}

func TestReschedule(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	c := e.mustClock(201, "POST", "/v1/clocks", createBody("order", "o-1", "max_attempts", 2))
	path := "/v1/clocks/order/o-1"

	newAt := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Millisecond)
	got := e.mustClock(200, "PATCH", path, body{"ring_at": fmtTime(newAt)})
	if got.RingAt != fmtTime(newAt) || got.NextTryAt != fmtTime(newAt) || got.Payload != c.Payload || got.MaxAttempts != 2 ||
		got.ID != c.ID || got.CreatedAt != c.CreatedAt || got.Status != "pending" {
		t.Errorf("after ring_at patch %+v", got)
	}
	if stored := e.mustClock(200, "GET", path, nil); !reflect.DeepEqual(stored, got) {
		t.Errorf("PATCH answer differs from the stored clock:\n got %+v\nwant %+v", got, stored)
	}

	before := time.Now()
	got = e.mustClock(200, "PATCH", path, body{"delay": "2h"})
	if at := parseTime(t, got.RingAt); at.Before(before.Add(2*time.Hour)) || at.After(time.Now().Add(2*time.Hour+time.Millisecond)) {
		t.Errorf("delay patch: ring_at %s", got.RingAt)
	}
	ringAt := got.RingAt

	got = e.mustClock(200, "PATCH", path, body{"payload": "new payload"})
	if got.Payload != "new payload" || got.RingAt != ringAt || got.NextTryAt != ringAt {
		t.Errorf("payload patch %+v", got)
	}

	latest := parseTime(t, ringAt).Add(time.Hour)
	got = e.mustClock(200, "PATCH", path, body{"latest_ring_at": fmtTime(latest), "max_attempts": 0})
	if got.LatestRingAt == nil || *got.LatestRingAt != fmtTime(latest) || got.MaxAttempts != 0 {
		t.Errorf("latest/max patch %+v", got)
	}
	// moving ring_at past latest_ring_at is refused and changes nothing
	state := e.tableState()
	e.mustError(400, "PATCH", path, body{"ring_at": fmtTime(latest.Add(time.Second))})
	if e.tableState() != state {
		t.Errorf("refused patch changed the table")
	}
	got = e.mustClock(200, "PATCH", path, body{"latest_ring_at": nil})
	if got.LatestRingAt != nil {
		t.Errorf("latest_ring_at null did not clear: %v", *got.LatestRingAt)
	}
	if stored := e.mustClock(200, "GET", path, nil); !reflect.DeepEqual(stored, got) {
		t.Errorf("stored %+v\nanswer %+v", stored, got)
	}

	past := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	before = time.Now().UTC().Truncate(time.Millisecond)
	got = e.mustClock(200, "PATCH", path, body{"ring_at": fmtTime(past)})
	if next := parseTime(t, got.NextTryAt); got.RingAt != fmtTime(past) || next.Before(before) || next.After(time.Now()) {
		t.Errorf("past ring_at patch: ring_at %s next_try_at %s", got.RingAt, got.NextTryAt)
	}

	e.mustError(404, "PATCH", "/v1/clocks/order/nope", body{"payload": "x"})
	for _, st := range []string{"cancelled", "firing", "rung", "expired", "dead"} {
		id := "s-" + st
		e.mustClock(201, "POST", "/v1/clocks", createBody("order", id))
		e.exec("UPDATE clock SET status = ? WHERE application = 'order' AND business_id = ?", st, id)
		state := e.tableState()
		if msg := e.mustError(409, "PATCH", "/v1/clocks/order/"+id, body{"payload": "x"}); !strings.Contains(msg, st) {
			t.Errorf("patch of a %s clock: message %q", st, msg)
		}
		if e.tableState() != state {
			t.Errorf("patch of a %s clock changed the table", st)
		}
	}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	longAgo := time.Now().Add(-24 * time.Hour).UnixMilli()
	for _, tt := range []struct {
		status     string
		latest     any // latest_ring_at to set
		wantLatest bool
	}{
		{"expired", time.Now().Add(-time.Hour).UnixMilli(), false}, // a past limit is dropped
		{"dead", time.Now().Add(time.Hour).UnixMilli(), true},      // a future limit stays
		{"dead", nil, false},
	} {
		id := fmt.Sprintf("r-%s-%v", tt.status, tt.wantLatest)
		if tt.latest == nil {
			id += "-none"
		}
		c := e.mustClock(201, "POST", "/v1/clocks", createBody("order", id, "max_attempts", 3))
		e.exec(`UPDATE clock SET status = ?, attempts = 3, next_try_time = ?, latest_ring_at = ?, last_error = 'nack'
			WHERE id = ?`, tt.status, longAgo, tt.latest, c.ID)
		before := time.Now().UTC().Truncate(time.Millisecond)
		got := e.mustClock(200, "POST", "/v1/clocks/order/"+id+"/replay", nil)
		after := time.Now()
		if got.Status != "pending" || got.Attempts != 0 || got.ID != c.ID || got.RingAt != c.RingAt || got.MaxAttempts != 3 {
			t.Errorf("%s: replayed %+v", tt.status, got)
		}
		if next := parseTime(t, got.NextTryAt); next.Before(before) || next.After(after) {
			t.Errorf("%s: next_try_at %s, want now", tt.status, got.NextTryAt)
		}
		if (got.LatestRingAt != nil) != tt.wantLatest {
			t.Errorf("%s: latest_ring_at %v, want set=%v", tt.status, got.LatestRingAt, tt.wantLatest)
		}
		if stored := e.mustClock(200, "GET", "/v1/clocks/order/"+id, nil); !reflect.DeepEqual(stored, got) {
			t.Errorf("stored %+v\nanswer %+v", stored, got)
		}
		// now pending: a second replay is a conflict
		e.mustError(409, "POST", "/v1/clocks/order/"+id+"/replay", nil)
	}
	for _, st := range []string{"pending", "firing", "rung", "cancelled"} {
		id := "s-" + st
		e.mustClock(201, "POST", "/v1/clocks", createBody("order", id))
		e.exec("UPDATE clock SET status = ? WHERE application = 'order' AND business_id = ?", st, id)
		state := e.tableState()
		if msg := e.mustError(409, "POST", "/v1/clocks/order/"+id+"/replay", nil); !strings.Contains(msg, st) {
			t.Errorf("replay of a %s clock: message %q", st, msg)
		}
		if e.tableState() != state {
			t.Errorf("replay of a %s clock changed the table", st)
		}
	}
	if msg := e.mustError(404, "POST", "/v1/clocks/order/nope/replay", nil); msg != "replay clock order/nope: not found" {
		t.Errorf("404 message %q, want %q (the clock named once)", msg, "replay clock order/nope: not found")
	}
}

type listAnswer struct {
	Clocks []json.RawMessage `json:"clocks"`
	Next   *string           `json:"next"`
}

func (e *apiEnv) list(query string) ([]httpapi.Clock, string) {
	e.t.Helper()
	code, data := e.do("GET", "/v1/clocks"+query, nil)
	if code != 200 {
		e.t.Fatalf("list %s: status %d: %s", query, code, data)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		e.t.Fatal(err)
	}
	if got := keysOf(raw); strings.Join(got, ",") != "clocks,next" {
		e.t.Fatalf("list fields %v", got)
	}
	var ans listAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		e.t.Fatal(err)
	}
	if ans.Clocks == nil || ans.Next == nil {
		e.t.Fatalf("list %s: clocks or next is null: %s", query, data)
	}
	out := make([]httpapi.Clock, len(ans.Clocks))
	for i, c := range ans.Clocks {
		out[i] = checkClockJSON(e.t, c)
	}
	return out, *ans.Next
}

func TestList(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	var aIDs []int64 // newest first
	for i := 0; i < 23; i++ {
		c := e.mustClock(201, "POST", "/v1/clocks", createBody("a", fmt.Sprintf("a-%02d", i)))
		aIDs = append([]int64{c.ID}, aIDs...)
		if i < 4 {
			e.mustClock(201, "POST", "/v1/clocks", createBody("b", fmt.Sprintf("b-%02d", i)))
		}
	}
	for i := 0; i < 23; i += 5 { // cancel a-00, a-05, a-10, a-15, a-20
		e.mustClock(200, "DELETE", fmt.Sprintf("/v1/clocks/a/a-%02d", i), nil)
	}

	// page through every clock of a: newest first, no duplicates, no gaps
	pageThrough := func(query string, limit int) []int64 {
		var ids []int64
		after := ""
		for pages := 0; ; pages++ {
			if pages > 50 {
				t.Fatalf("%s: paging does not end", query)
			}
			q := fmt.Sprintf("%s&limit=%d", query, limit)
			if after != "" {
				q += "&after=" + after
			}
			cs, next := e.list(q)
			if len(cs) > limit {
				t.Fatalf("%s: %d clocks on a page of %d", q, len(cs), limit)
			}
			for _, c := range cs {
				ids = append(ids, c.ID)
			}
			if next == "" {
				return ids
			}
			if len(cs) != limit {
				t.Fatalf("%s: a short page (%d) with a next cursor", q, len(cs))
			}
			after = next
		}
	}
	if got := pageThrough("?application=a", 5); !reflect.DeepEqual(got, aIDs) {
		t.Errorf("paging a by 5:\n got %v\nwant %v", got, aIDs)
	}
	if got := pageThrough("?application=a", 23); !reflect.DeepEqual(got, aIDs) {
		t.Errorf("one page of exactly 23:\n got %v\nwant %v", got, aIDs)
	}
	var pendingA []int64
	for i, id := range aIDs {
		if (22-i)%5 != 0 {
			pendingA = append(pendingA, id)
		}
	}
	if got := pageThrough("?application=a&status=pending", 6); !reflect.DeepEqual(got, pendingA) {
		t.Errorf("pending of a by 6 (exactly 3 pages):\n got %v\nwant %v", got, pendingA)
	}
	cs, next := e.list("?status=cancelled")
	if len(cs) != 5 || next != "" {
		t.Errorf("cancelled: %d clocks, next %q", len(cs), next)
	}
	for _, c := range cs {
		if c.Status != "cancelled" || c.Application != "a" {
			t.Errorf("cancelled filter returned %s/%s %s", c.Application, c.BusinessID, c.Status)
		}
	}
	cs, _ = e.list("?application=b")
	if len(cs) != 4 {
		t.Errorf("b: %d clocks", len(cs))
	}
	cs, next = e.list("")
	if len(cs) != 27 || next != "" {
		t.Errorf("no filter: %d clocks, next %q", len(cs), next)
	}
	for i := 1; i < len(cs); i++ {
		if cs[i].ID >= cs[i-1].ID {
			t.Fatalf("not newest first: %d after %d", cs[i].ID, cs[i-1].ID)
		}
	}
	// By status alone, over both applications (one index range each,
	// merged): the same clocks as the unfiltered list, paged.
	var pendingAll []int64
	for _, c := range cs {
		if c.Status == "pending" {
			pendingAll = append(pendingAll, c.ID)
		}
	}
	if got := pageThrough("?status=pending", 7); len(pendingAll) < 20 || !reflect.DeepEqual(got, pendingAll) {
		t.Errorf("pending of every application by 7:\n got %v\nwant %v", got, pendingAll)
	}
	if cs, next := e.list("?application=nobody"); len(cs) != 0 || next != "" {
		t.Errorf("unknown application: %d clocks, next %q", len(cs), next)
	}
	if cs, _ := e.list("?status=rung"); len(cs) != 0 {
		t.Errorf("rung: %d clocks", len(cs))
	}
	if cs, _ := e.list("?limit=1000"); len(cs) != 27 {
		t.Errorf("limit=1000: %d clocks", len(cs))
	}

	for _, tt := range []struct{ query, field string }{
		{"?limit=x", "limit"},
		{"?limit=0", "limit"},
		{"?limit=-1", "limit"},
		{"?limit=1001", "limit"},
		{"?limit=1.5", "limit"},
		{"?limit=+5", "limit"},
		{"?limit=99999999999999999999", "limit"},
		{"?status=done", "status"},
		{"?status=PENDING", "status"},
		{"?after=x", "after"},
		{"?after=0", "after"},
		{"?after=-5", "after"},
		{"?after=+5", "after"},
		{"?after=%205", "after"},
		{"?application=bad%20app", "application"},
		{"?colour=red", "colour"},
	} {
		if msg := e.mustError(400, "GET", "/v1/clocks"+tt.query, nil); !strings.Contains(msg, tt.field) {
			t.Errorf("%s: message %q does not name %s", tt.query, msg, tt.field)
		}
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	code, data := e.do("GET", "/healthz", nil)
	if code != 200 {
		t.Errorf("/healthz: %d %s", code, data)
	}
	code, data = e.do("GET", "/readyz", nil)
	if code != 200 || !strings.Contains(string(data), `"mysql":"ok"`) {
		t.Errorf("/readyz: %d %s", code, data)
	}
	e.mustClock(201, "POST", "/v1/clocks", createBody("order", "m-1"))
	e.mustError(404, "GET", "/v1/clocks/order/none", nil)

	resp, err := e.client.Get(e.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text := readAll(t, resp)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("/metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`clockd_http_requests_total{code="201",route="POST /v1/clocks"} 1`,
		`clockd_http_requests_total{code="404",route="GET /v1/clocks/{application}/{business_id}"} 1`,
		`clockd_http_requests_total{code="200",route="GET /healthz"} 1`,
		"clockd_http_request_seconds_bucket",
		"clockd_create_batch_rows_count 1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	e.mustError(404, "GET", "/nowhere", nil)
	e.mustError(404, "GET", "/v1/cluster", nil)
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return sb.String()
}

func TestReadyzUnavailable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(validateOpenAPI(t, httpapi.New(httpapi.Options{Ready: []httpapi.Check{
		// MySQL's own words for a refused account name the account and the
		// host it came from; /readyz answers without a token
		{Name: "mysql", Check: func(context.Context) error {
			return errors.New("Error 1045 (28000): Access denied for user 'clockd_svc'@'10.20.30.40' (using password: YES)")
		}},
		{Name: "rabbitmq", Check: func(context.Context) error { return errors.New("dial tcp 10.1.2.3:5672: connection refused") }},
	}})))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text := readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(text, "connection refused") ||
		!strings.Contains(text, "rabbitmq") || !strings.Contains(text, "Access denied") {
		t.Errorf("/readyz: %d %s", resp.StatusCode, text)
	}
	for _, secret := range []string{"clockd_svc", "10.20.30.40", "10.1.2.3", "5672"} {
		if strings.Contains(text, secret) {
			t.Errorf("/readyz reveals %q: %s", secret, text)
		}
	}
	resp2, err := srv.Client().Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != 200 {
		t.Errorf("/healthz while not ready: %d", resp2.StatusCode)
	}
}

// /readyz is open and never held back: a flood of probes runs the checks
// (a MySQL ping) about once a second, not once each, and still sees a
// change within that second.
func TestReadyzFloodChecksOnceASecond(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	var failing atomic.Bool
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Ready: []httpapi.Check{
		{Name: "mysql", Check: func(context.Context) error {
			calls.Add(1)
			if failing.Load() {
				return errors.New("dial tcp: connection refused")
			}
			return nil
		}},
	}}))
	defer srv.Close()
	get := func() int {
		resp, err := srv.Client().Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for range 25 {
				if code := get(); code != 200 {
					t.Errorf("/readyz: %d", code)
					return
				}
			}
		})
	}
	wg.Wait()
	if n, most := calls.Load(), int64(time.Since(start)/time.Second)+2; n > most {
		t.Errorf("500 probes in %v ran the checks %d times, want at most %d", time.Since(start), n, most)
	}
	failing.Store(true)
	time.Sleep(1100 * time.Millisecond)
	if code := get(); code != 503 {
		t.Errorf("/readyz 1.1 s after MySQL went away: %d, want 503", code)
	}
}

// While a readiness check is slow (a stalled MySQL: up to 3 s), the other
// probes answer the last result at once instead of queueing behind it.
func TestReadyzSlowCheckDoesNotHoldOtherProbes(t *testing.T) {
	t.Parallel()
	var slow atomic.Bool
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Ready: []httpapi.Check{
		{Name: "mysql", Check: func(ctx context.Context) error {
			if slow.Load() {
				<-ctx.Done() // the 3 s bound
				return ctx.Err()
			}
			return nil
		}},
	}}))
	defer srv.Close()
	get := func() (int, time.Duration) {
		start := time.Now()
		resp, err := srv.Client().Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	if code, _ := get(); code != 200 {
		t.Fatalf("/readyz: %d", code)
	}
	slow.Store(true)
	time.Sleep(1100 * time.Millisecond)
	first := make(chan int, 1)
	go func() { code, _ := get(); first <- code }() // runs the slow check
	time.Sleep(200 * time.Millisecond)
	if code, took := get(); code != 200 || took > 500*time.Millisecond {
		t.Errorf("a probe during a slow check: %d after %v, want the last answer (200) at once", code, took)
	}
	if code := <-first; code != 503 {
		t.Errorf("the probe that ran the slow check: %d, want 503", code)
	}
}

// TestDatabaseGone: with MySQL unreachable the API answers 503 unavailable
// (never a 2xx for a change it could not commit) and /readyz says so.
func TestDatabaseGone(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	e.mustClock(201, "POST", "/v1/clocks", createBody("order", "o-1"))
	e.db.Close()
	for _, r := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/clocks", createBody("order", "o-2")},
		{"GET", "/v1/clocks/order/o-1", nil},
		{"DELETE", "/v1/clocks/order/o-1", nil},
		{"PATCH", "/v1/clocks/order/o-1", body{"payload": "x"}},
		{"POST", "/v1/clocks/order/o-1/replay", nil},
		{"GET", "/v1/clocks", nil},
		{"GET", "/readyz", nil},
	} {
		code, data := e.do(r.method, r.path, r.body)
		if code != http.StatusServiceUnavailable {
			t.Errorf("%s %s: %d %s, want 503", r.method, r.path, code, data)
			continue
		}
		if r.path != "/readyz" {
			checkErrorJSON(t, code, data)
		}
	}
	// a 503 says when to retry, as the concurrency cap's does
	resp, err := e.client.Get(e.srv.URL + "/v1/clocks/order/o-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("GET with MySQL gone: %d, Retry-After %q; want 503 with Retry-After 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	code, data := e.do("POST", "/v1/clocks/batch", body{"clocks": []any{createBody("order", "o-3")}})
	var ans batchAnswer
	if err := json.Unmarshal(data, &ans); code != 200 || err != nil || len(ans.Results) != 1 || ans.Results[0].Status != 503 {
		t.Errorf("batch: %d %s", code, data)
	}
}
