package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/client"
	"github.com/clockd/clockd/internal/testenv"
)

// TestCreateBatchRidesOutMySQLStall: while MySQL stalls, clockd answers a
// single create 503 and a batch 200 with a 503 in each item. CreateBatch
// is retried on 503 like Create: it sends the 503 items again, with the
// client's backoff, until MySQL is back, and every clock is made.
func TestCreateBatchRidesOutMySQLStall(t *testing.T) {
	t.Parallel()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartProxy(t, cfg.Addr)
	cfg.Addr = proxy.Addr
	d := startClockd(t, map[string]string{"CLOCKD_MYSQL_DSN": cfg.FormatDSN(), "CLOCKD_MYSQL_REQUEST_TIMEOUT": "1s"})
	c := newClient(t, d.URL, client.WithRetry(client.Retry{Attempts: 8, Min: 500 * time.Millisecond, Max: time.Second}))
	ctx := ctxT(t)
	// clockd is up and MySQL answers
	if _, _, err := c.Create(ctx, client.NewClock{Application: "stall", BusinessID: "warm", Payload: "{}", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}

	// What clockd answers to a batch while MySQL is stalled (README): 200,
	// each item 503 unavailable. Do hands it over as it came.
	proxy.Stall()
	status, raw, err := c.Do(ctx, http.MethodPost, "/v1/clocks/batch", nil, map[string]any{"clocks": []map[string]any{
		{"application": "stall", "business_id": "raw-1", "payload": "{}", "delay": "1h"}}})
	var ans struct {
		Results []struct {
			Status int `json:"status"`
			Error  *struct {
				Code string `json:"code"`
			} `json:"error"`
		} `json:"results"`
	}
	if err != nil || status != http.StatusOK || json.Unmarshal(raw, &ans) != nil || len(ans.Results) != 1 ||
		ans.Results[0].Status != http.StatusServiceUnavailable || ans.Results[0].Error == nil || ans.Results[0].Error.Code != "unavailable" {
		t.Fatalf("batch with MySQL stalled: %d %s %v; want 200 with one item 503 unavailable", status, raw, err)
	}

	// Single create: retried through a stall that ends after ~2.5 s.
	go func() { time.Sleep(2500 * time.Millisecond); proxy.Resume() }()
	if _, _, err := c.Create(ctx, client.NewClock{Application: "stall", BusinessID: "single", Payload: "{}", Delay: time.Hour}); err != nil {
		t.Fatalf("Create through a 2.5 s MySQL stall: %v (want it retried until MySQL is back)", err)
	}
	d.WaitReady(20 * time.Second)

	// The same for a batch.
	proxy.Stall()
	go func() { time.Sleep(2500 * time.Millisecond); proxy.Resume() }()
	var batch []client.NewClock
	for i := range 3 {
		batch = append(batch, client.NewClock{Application: "stall", BusinessID: fmt.Sprintf("b-%d", i), Payload: "{}", Delay: time.Hour})
	}
	res, err := c.CreateBatch(ctx, batch)
	if err != nil {
		t.Fatalf("CreateBatch: %v", err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Errorf("CreateBatch item %d through a 2.5 s MySQL stall: %v; want it sent again until MySQL is back", i, r.Err)
		} else if r.Clock.BusinessID != batch[i].BusinessID {
			t.Errorf("CreateBatch item %d is clock %q, want %q", i, r.Clock.BusinessID, batch[i].BusinessID)
		}
	}
	for i := range batch {
		if _, err := c.Get(ctx, "stall", batch[i].BusinessID); err != nil {
			t.Errorf("clock %s after the batch: %v", batch[i].BusinessID, err)
		}
	}
}

// fakeBatch is a clockd stand-in for POST /v1/clocks/batch: answer says
// the status of each item (by business id) in the n-th request (from 1);
// a status of 0 drops the connection of that request instead of answering.
type fakeBatch struct {
	mu       sync.Mutex
	requests [][]string // the business ids of each request
	answer   func(n int, businessID string) int
}

func (f *fakeBatch) serve(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Clocks []struct {
				Application string `json:"application"`
				BusinessID  string `json:"business_id"`
			} `json:"clocks"`
		}
		if r.URL.Path != "/v1/clocks/batch" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		var ids []string
		for _, c := range req.Clocks {
			ids = append(ids, c.BusinessID)
		}
		f.requests = append(f.requests, ids)
		n := len(f.requests)
		f.mu.Unlock()
		var results []map[string]any
		for _, c := range req.Clocks {
			st := f.answer(n, c.BusinessID)
			if st == 0 {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
			if st < 300 {
				results = append(results, map[string]any{"status": st, "clock": map[string]any{
					"id": n, "application": c.Application, "business_id": c.BusinessID, "status": "pending"}})
				continue
			}
			code := map[int]string{400: "invalid_argument", 500: "internal", 503: "unavailable"}[st]
			results = append(results, map[string]any{"status": st, "error": map[string]string{"code": code, "message": "m"}})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"results": results})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func (f *fakeBatch) sent() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s []string
	for _, r := range f.requests {
		s = append(s, strings.Join(r, ","))
	}
	return strings.Join(s, " | ")
}

func batchOf(ids ...string) []client.NewClock {
	var b []client.NewClock
	for _, id := range ids {
		b = append(b, client.NewClock{Application: "order", BusinessID: id, Payload: "{}", Delay: time.Hour})
	}
	return b
}

// TestCreateBatchResendsOnly503Items: the items of a batch answered 503
// are sent again, alone, under the retry policy, and their new results
// take their places; the other items (made, refused, 500) are not sent
// again. Items still 503 when the attempts are used up keep
// ErrUnavailable; a resend that fails as a whole gives its error to the
// items it carried only; a first answer that fails as a whole fails the
// call.
func TestCreateBatchResendsOnly503Items(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	retry := client.WithRetry(client.Retry{Attempts: 3, Min: 10 * time.Millisecond, Max: 20 * time.Millisecond})

	// a made, b refused, c 503 then made, d internal error, e 503 until the end
	f := &fakeBatch{answer: func(n int, id string) int {
		switch id {
		case "a":
			return 201
		case "b":
			return 400
		case "c":
			if n == 1 {
				return 503
			}
			return 201
		case "d":
			return 500
		}
		return 503
	}}
	c := newClient(t, f.serve(t), retry)
	res, err := c.CreateBatch(ctx, batchOf("a", "b", "c", "d", "e"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.sent(), "a,b,c,d,e | c,e | e"; got != want {
		t.Errorf("requests %q, want %q", got, want)
	}
	if len(res) != 5 {
		t.Fatalf("%d results", len(res))
	}
	for i, id := range map[int]string{0: "a", 2: "c"} {
		if r := res[i]; r.Err != nil || !r.Created || r.Clock.BusinessID != id {
			t.Errorf("item %s: %+v, want created", id, r)
		}
	}
	wantErr(t, "item b", res[1].Err, client.ErrInvalid)
	var e *client.Error
	if !errors.As(res[3].Err, &e) || e.Status != http.StatusInternalServerError {
		t.Errorf("item d: %v, want the 500", res[3].Err)
	}
	wantErr(t, "item e", res[4].Err, client.ErrUnavailable)
	if !errors.As(res[4].Err, &e) || !strings.HasSuffix(e.Path, "[4]") {
		t.Errorf("item e: %v, want its error to name item 4", res[4].Err)
	}

	// The resend of c gets no answer (twice): c is unavailable, a keeps
	// its clock.
	f = &fakeBatch{answer: func(n int, id string) int {
		if id == "a" {
			return 201
		}
		if n == 1 {
			return 503
		}
		return 0
	}}
	c = newClient(t, f.serve(t), retry)
	res, err = c.CreateBatch(ctx, batchOf("a", "c"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.sent(), "a,c | c | c"; got != want {
		t.Errorf("requests %q, want %q", got, want)
	}
	if res[0].Err != nil || res[0].Clock.BusinessID != "a" {
		t.Errorf("item a: %+v", res[0])
	}
	wantErr(t, "item c, resend without an answer", res[1].Err, client.ErrUnavailable)

	// No answer at all: the call fails, after the attempts.
	f = &fakeBatch{answer: func(int, string) int { return 0 }}
	c = newClient(t, f.serve(t), retry)
	if res, err := c.CreateBatch(ctx, batchOf("a", "c")); err == nil || !errors.Is(err, client.ErrUnavailable) || res != nil {
		t.Errorf("batch without answers: %v %v, want ErrUnavailable", res, err)
	}
	if got, want := f.sent(), "a,c | a,c | a,c"; got != want {
		t.Errorf("requests %q, want %q", got, want)
	}

	// The context ends while the 503 items wait for their resend: they
	// keep their 503, without a request more.
	f = &fakeBatch{answer: func(int, string) int { return 503 }}
	slow := newClient(t, f.serve(t), client.WithRetry(client.Retry{Attempts: 10, Min: time.Second, Max: time.Second}))
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err = slow.CreateBatch(cctx, batchOf("a"))
	if err != nil || len(res) != 1 || time.Since(start) > 5*time.Second {
		t.Fatalf("batch cut by its context: %v %v after %v", res, err, time.Since(start))
	}
	wantErr(t, "item a, context ended", res[0].Err, client.ErrUnavailable)
	if got := f.sent(); got != "a" {
		t.Errorf("requests %q, want one", got)
	}
}
