package httpapi

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/lograte"
)

// A batch whose items failed in two ways (MySQL away for some, a bug for
// another) logs one line for each way, each with its own count: the rarer
// failure is not hidden behind the first.
func TestBatchFailuresLoggedOncePerKind(t *testing.T) {
	var logs bytes.Buffer
	a := &api{log: slog.New(slog.NewTextHandler(&logs, nil)), failLog: lograte.New(time.Minute, time.Now)}
	r := httptest.NewRequest("POST", "/v1/clocks/batch", nil)
	unavailable := BatchResult{Status: 503, Error: &ErrorDetail{Code: "unavailable"}, failure: errors.New("mysql away")}
	internal := BatchResult{Status: 500, Error: &ErrorDetail{Code: "internal"}, failure: errors.New("a bug")}
	a.logBatchFailures(r, []BatchResult{{Status: 201}, unavailable, unavailable, internal, unavailable})
	out := logs.String()
	if n := strings.Count(out, `msg="request failed"`); n != 2 {
		t.Fatalf("%d lines, want one per kind of failure:\n%s", n, out)
	}
	for _, want := range []string{"status=503", "items_failed=3", "first_failed_item=1", `err="mysql away"`,
		"status=500", "items_failed=1", "first_failed_item=3", `err="a bug"`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in:\n%s", want, out)
		}
	}
}
