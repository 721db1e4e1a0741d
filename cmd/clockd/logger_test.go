package main

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/config"
)

// Durations in log lines are strings such as "1.5s" (README), in JSON and
// in text, whatever a caller passes (found by review: a time.Duration was
// written as integer nanoseconds).
func TestLoggedDurationsAreStrings(t *testing.T) {
	var buf bytes.Buffer
	newLogger(config.Log{Level: "info", Format: "json"}, &buf).Info("x", "for", 1500*time.Millisecond)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["for"] != "1.5s" {
		t.Errorf("json: for = %#v, want \"1.5s\"", rec["for"])
	}
	buf.Reset()
	newLogger(config.Log{Level: "info", Format: "text"}, &buf).Info("x", "for", 1500*time.Millisecond)
	if !bytes.Contains(buf.Bytes(), []byte("for=1.5s")) {
		t.Errorf("text: %s", buf.String())
	}
}
