package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/httpapi"
)

// downStore is a Store whose reads fail as MySQL not answering.
type downStore struct{ alarm.Store }

func (downStore) Get(context.Context, alarm.Key) (alarm.Clock, error) {
	return alarm.Clock{}, fmt.Errorf("read clock: %w", alarm.ErrUnavailable)
}

// TestOpenAPIDocuments503RetryAfter: every 503 of clockd carries
// "Retry-After: 1" (README, "The API": "unavailable (503, with
// Retry-After: 1)"), and clients written from the OpenAPI document (the
// README points other languages to it) learn it there, as they do for the
// 429's Retry-After, the 405's Allow and the 401's WWW-Authenticate.
func TestOpenAPIDocuments503RetryAfter(t *testing.T) {
	// What clockd sends: a 503 (MySQL did not answer), with Retry-After.
	srv := httptest.NewServer(httpapi.New(httpapi.Options{
		Service: alarm.NewService(downStore{}, nil, time.Now, alarm.Limits{MaxPayloadBytes: 1 << 16}, 0),
		Logger:  slog.New(slog.DiscardHandler),
	}))
	defer srv.Close()
	got, err := http.Get(srv.URL + "/v1/clocks/a/b")
	if err != nil {
		t.Fatal(err)
	}
	got.Body.Close()
	if got.StatusCode != http.StatusServiceUnavailable || got.Header.Get("Retry-After") == "" {
		t.Fatalf("want a 503 with Retry-After from clockd, got %d %v", got.StatusCode, got.Header)
	}

	var doc struct {
		Components struct {
			Responses map[string]struct {
				Headers map[string]any `json:"headers"`
			} `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc.Components.Responses["Unavailable"].Headers["Retry-After"]; !ok {
		t.Errorf("clockd answers 503 with Retry-After: %s; the OpenAPI document's 503 answer (components.responses.Unavailable) declares no Retry-After header",
			got.Header.Get("Retry-After"))
	}
}

// TestOpenAPIDocumentsRequestIDOnEveryAnswer: every answer of clockd
// carries X-Request-Id (the log line of a failure names it), so every
// answer of the OpenAPI document declares it: the shared ones
// (components.responses) and those of each operation.
func TestOpenAPIDocumentsRequestIDOnEveryAnswer(t *testing.T) {
	type response struct {
		Ref     string         `json:"$ref"`
		Headers map[string]any `json:"headers"`
	}
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Responses map[string]response `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	for name, r := range doc.Components.Responses {
		if _, ok := r.Headers["X-Request-Id"]; !ok {
			t.Errorf("components.responses.%s declares no X-Request-Id", name)
		}
	}
	for path, ops := range doc.Paths {
		for method, raw := range ops {
			var op struct {
				Responses map[string]response `json:"responses"`
			}
			if json.Unmarshal(raw, &op) != nil {
				continue // not an operation (parameters)
			}
			for status, r := range op.Responses {
				if _, ok := r.Headers["X-Request-Id"]; r.Ref == "" && !ok {
					t.Errorf("%s %s: answer %s declares no X-Request-Id", method, path, status)
				}
			}
		}
	}
}
