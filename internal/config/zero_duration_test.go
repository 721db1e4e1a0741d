package config_test

// Found by a review against SPEC.md; the test failed on the code before its fix.

import (
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/config"
)

// config/clockd.yaml documents "0" as a value of several duration keys
// (history.keep "0: no history", clock.idempotency_window "0: every create
// for a finished key sets a new clock", ring.record_gap "0 = no wait"), and
// README's table says CLOCKD_HISTORY_KEEP "0 = no history". The variable
// takes 0, but the same 0 written in the YAML file stops clockd at start:
// yaml.v3 refuses a plain integer for a time.Duration ("cannot unmarshal
// !!int `0` into time.Duration"), so an operator who follows the file's own
// comment cannot start clockd with it.
func TestDocumentedZeroDurationsWorkInTheFile(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		yaml string
		get  func(config.Config) time.Duration
	}{
		{"history:\n  keep: 0\n", func(c config.Config) time.Duration { return c.History.Keep }},
		{"clock:\n  idempotency_window: 0\n", func(c config.Config) time.Duration { return c.Clock.IdempotencyWindow }},
		{"ring:\n  record_gap: 0\n", func(c config.Config) time.Duration { return c.Ring.RecordGap }},
	} {
		c, err := config.Load(writeYAML(t, tt.yaml), noEnv)
		if err != nil {
			t.Errorf("%q, a value config/clockd.yaml documents: Load: %v", tt.yaml, err)
			continue
		}
		if got := tt.get(c); got != 0 {
			t.Errorf("%q: got %s, want 0", tt.yaml, got)
		}
	}
	// the environment takes the same value
	c, err := config.Load("", envOf(map[string]string{"CLOCKD_HISTORY_KEEP": "0"}))
	if err != nil || c.History.Keep != 0 {
		t.Errorf("CLOCKD_HISTORY_KEEP=0: %v, keep %s", err, c.History.Keep)
	}
}

// A number other than 0 for a duration key is still refused, naming the key
// and the file's own line (the 0 rewrite keeps lines where they were).
func TestOtherNumbersForADurationAreRefusedByKeyAndLine(t *testing.T) {
	t.Parallel()
	_, err := config.Load(writeYAML(t, "history:\n  keep: 0\nring:\n  record_gap: 30\n"), noEnv)
	if err == nil || !strings.Contains(err.Error(), "line 4") || !strings.Contains(err.Error(), "ring.record_gap") {
		t.Errorf("record_gap: 30 (no unit) after keep: 0: %v; want a refusal naming line 4 and ring.record_gap", err)
	}
}

// A lease TTL under twice ring.claim_ahead_max + 100ms is refused, naming
// both keys: with it, every lease round re-read every shard's window, or
// (claim_ahead_max 2s, TTL 2s) nothing ever rang while /readyz said ok.
func TestLeaseTTLUnderTwiceTheClaimMarginIsRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env map[string]string
		ok  bool
	}{
		{map[string]string{"CLOCKD_LEASE_TTL": "2s"}, false},
		{map[string]string{"CLOCKD_LEASE_TTL": "2s", "CLOCKD_RING_CLAIM_AHEAD": "2s", "CLOCKD_RING_CLAIM_AHEAD_MAX": "2s"}, false},
		{map[string]string{"CLOCKD_LEASE_TTL": "2200ms"}, true},
		{map[string]string{"CLOCKD_LEASE_TTL": "2s", "CLOCKD_RING_CLAIM_AHEAD_MAX": "200ms"}, true},
		{map[string]string{"CLOCKD_LEASE_TTL": "3s"}, true},
	} {
		_, err := config.Load("", envOf(tt.env))
		switch {
		case tt.ok && err != nil:
			t.Errorf("%v: %v; want it accepted", tt.env, err)
		case !tt.ok && (err == nil || !strings.Contains(err.Error(), "cluster.lease_ttl") || !strings.Contains(err.Error(), "ring.claim_ahead_max")):
			t.Errorf("%v: %v; want a refusal naming cluster.lease_ttl and ring.claim_ahead_max", tt.env, err)
		}
	}
}

// Found by the review of this stop's diff: zeroDurations rewrites a 0 only where the node's column
// holds '0'; an anchored value's column is that of its "&z", so
// "keep: &z 0" (and every alias of it) is left a bare 0 and refused, twice
// (once per key that uses it), naming line 2 both times.
func TestZeroDurationAnchorAliasedByAnotherDurationKey(t *testing.T) {
	t.Parallel()
	c, err := config.Load(writeYAML(t, "history:\n  keep: &z 0\nring:\n  record_gap: *z\n"), noEnv)
	if err != nil {
		t.Fatalf("keep: &z 0 / record_gap: *z (both 0): Load: %v", err)
	}
	if c.History.Keep != 0 || c.Ring.RecordGap != 0 {
		t.Errorf("keep %s, record_gap %s; want 0 and 0", c.History.Keep, c.Ring.RecordGap)
	}
}

// Found by the review of this stop's diff: two duration zeros in one flow mapping on one line: the first
// rewrite shifts the second's column by one, so the second is left a bare 0
// and refused as "cannot unmarshal !!int".
func TestZeroDurationsTwoOnOneFlowLine(t *testing.T) {
	t.Parallel()
	_, err := config.Load(writeYAML(t, "janitor: {pause: 0, retention_failed: 0}\n"), noEnv)
	if err != nil && strings.Contains(err.Error(), "cannot unmarshal") {
		t.Errorf("two zeros on one flow line: Load: %v", err)
	}
}
