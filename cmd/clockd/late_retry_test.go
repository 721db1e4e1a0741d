package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// postRaw sends body as it is (a retry resends the very bytes) and returns
// the status and the answer.
func postRaw(t *testing.T, base, path, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(base+path, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type rawAnswer struct {
	ID      int64            `json:"id"`
	Results []rawBatchAnswer `json:"results"`
}

type rawBatchAnswer struct {
	Status int `json:"status"`
	Clock  *struct {
		ID int64 `json:"id"`
	} `json:"clock"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func decodeRaw(t *testing.T, b []byte) rawAnswer {
	t.Helper()
	var a rawAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return a
}

func rfc3339ms(at time.Time) string { return at.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// SPEC, POST /v1/clocks: "200 + the existing clock when an identical one
// exists", and "an identical retry of the create that made it, soon after,
// answers 200 with it". A client whose answer was lost resends the same
// body after the clock's latest_ring_at (or, recurring, its schedule's
// end) has passed: the retry answers 200 with the clock, single create and
// batch item alike, where it answered 400 ("is already past") as if the
// request were wrong. The same body for a key
// without such a clock is still refused.
func TestIdenticalRetryAfterLatestRingAtPassed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(nil))
	now := time.Now()
	oneShot := func(id string) string {
		return fmt.Sprintf(`{"application":"order","business_id":%q,"payload":"p","ring_at":%q,"latest_ring_at":%q}`,
			id, rfc3339ms(now.Add(300*time.Millisecond)), rfc3339ms(now.Add(900*time.Millisecond)))
	}
	recurring := func(id string) string {
		return fmt.Sprintf(`{"application":"order","business_id":%q,"payload":"p","schedule":{"every":"1s","end":%q}}`,
			id, rfc3339ms(now.Add(1500*time.Millisecond)))
	}
	singles := map[string]string{"one-shot": oneShot("late-1"), "recurring": recurring("late-3")}
	ids := map[string]int64{}
	for name, body := range singles {
		code, b := postRaw(t, d.URL, "/v1/clocks", body)
		if code != http.StatusCreated {
			t.Fatalf("%s create: %d %s", name, code, b)
		}
		ids[name] = decodeRaw(t, b).ID
	}
	batch := `{"clocks":[` + oneShot("late-2") + `]}`
	code, b := postRaw(t, d.URL, "/v1/clocks/batch", batch)
	if a := decodeRaw(t, b); code != http.StatusOK || len(a.Results) != 1 || a.Results[0].Status != 201 {
		t.Fatalf("batch create: %d %s", code, b)
	} else {
		ids["batch"] = a.Results[0].Clock.ID
	}

	time.Sleep(time.Until(now.Add(2500 * time.Millisecond))) // latest_ring_at and end have passed

	for name, body := range singles {
		code, b := postRaw(t, d.URL, "/v1/clocks", body)
		if code != http.StatusOK {
			t.Errorf("%s: identical retry after its latest_ring_at/end passed: %d %s, want 200 with clock %d", name, code, b, ids[name])
		} else if got := decodeRaw(t, b).ID; got != ids[name] {
			t.Errorf("%s: identical retry answered clock %d, want %d", name, got, ids[name])
		}
	}
	// in a batch, beside the same request for a key that has no clock
	code, b = postRaw(t, d.URL, "/v1/clocks/batch", `{"clocks":[`+oneShot("late-2")+`,`+oneShot("late-4")+`]}`)
	a := decodeRaw(t, b)
	if code != http.StatusOK || len(a.Results) != 2 {
		t.Fatalf("batch retry: %d %s", code, b)
	}
	if r := a.Results[0]; r.Status != 200 || r.Clock == nil || r.Clock.ID != ids["batch"] {
		t.Errorf("batch: identical retry after latest_ring_at passed: %s, want item 0 200 with clock %d", b, ids["batch"])
	}
	if r := a.Results[1]; r.Status != 400 || r.Error == nil || r.Error.Code != "invalid_argument" ||
		!strings.Contains(r.Error.Message, "is already past") {
		t.Errorf("batch: a new clock whose latest_ring_at passed: %s, want item 1 400 is already past", b)
	}
	// single creates with no clock to be the retry of: 400 as before
	for name, body := range map[string]string{"one-shot": oneShot("late-5"), "recurring": recurring("late-6")} {
		code, b := postRaw(t, d.URL, "/v1/clocks", body)
		if code != http.StatusBadRequest || !strings.Contains(string(b), "invalid_argument") {
			t.Errorf("%s, no clock for the key: %d %s, want 400", name, code, b)
		}
	}
	for _, id := range []string{"late-4", "late-5", "late-6"} {
		resp, err := http.Get(d.URL + "/v1/clocks/order/" + id)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s after its create was refused: %d, want 404", id, resp.StatusCode)
		}
	}
}
