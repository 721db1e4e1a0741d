package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// While MySQL is away every request fails alike. A batch answers 200 with a
// 503 per item, and each item used to log its own WARN "request failed": an
// application retrying batches of 1,000 once a second wrote 1,000 lines a
// second, and single creates one line each. A failed batch is now one line
// (with how many items failed), and failures of one kind are logged at most
// once per 10 s, the next line saying how many were held back; so is the
// group commit's own warning.
func TestFailuresDuringMySQLOutageAreLoggedSparingly(t *testing.T) {
	e := newEnv(t)
	dsn, proxy := proxiedDSN(t, e)
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_MYSQL_REQUEST_TIMEOUT": "1s"}))
	// one create first: the application's quota is then cached, as it is
	// for an application that was creating before the outage
	if code, err := d.Do(context.Background(), "POST", "/v1/clocks/batch", map[string]any{"clocks": []map[string]any{
		{"application": "flood", "business_id": "warm", "payload": "{}", "delay": "1h"}}}, nil); err != nil || code != http.StatusOK {
		t.Fatalf("batch before the outage: %d %v", code, err)
	}
	proxy.Cut()
	time.Sleep(100 * time.Millisecond)
	from := len(d.Logs())
	const batches, per = 2, 1000
	failed := 0
	for b := range batches {
		var clocks []map[string]any
		for i := range per {
			clocks = append(clocks, map[string]any{"application": "flood", "business_id": fmt.Sprintf("f-%d-%04d", b, i), "payload": "{}", "delay": "1h"})
		}
		var res struct {
			Results []httpapi.BatchResult `json:"results"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code, err := d.Do(ctx, "POST", "/v1/clocks/batch", map[string]any{"clocks": clocks}, &res)
		cancel()
		if err != nil || code != http.StatusOK {
			t.Fatalf("batch: %d %v", code, err)
		}
		for _, r := range res.Results {
			if r.Status == http.StatusServiceUnavailable {
				failed++
			}
		}
	}
	if failed != batches*per {
		t.Fatalf("%d of %d items answered 503 with MySQL cut", failed, batches*per)
	}
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code, _ := d.Do(ctx, "POST", "/v1/clocks", map[string]any{"application": "flood", "business_id": fmt.Sprintf("single-%d", i),
			"payload": "{}", "delay": "1h"}, nil)
		cancel()
		if code != http.StatusServiceUnavailable {
			t.Fatalf("single create with MySQL cut: %d", code)
		}
	}
	time.Sleep(200 * time.Millisecond)
	logs := d.Logs()[from:]
	// one for the batches, one for the single creates
	if n := strings.Count(logs, `msg="request failed"`); n != 2 {
		t.Errorf("%d WARN \"request failed\" lines for %d batches of %d and 20 single creates, want 2:\n%s", n, batches, per, logs)
	}
	if n := strings.Count(logs, `msg="create batch failed"`); n > 1 {
		t.Errorf("%d WARN \"create batch failed\" lines, want at most 1:\n%s", n, logs)
	}
	if !strings.Contains(logs, fmt.Sprintf("items_failed=%d", per)) {
		t.Errorf("the batch's line does not say how many items failed:\n%s", logs)
	}
}
