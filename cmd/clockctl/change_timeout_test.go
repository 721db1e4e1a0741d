package main

import (
	"strings"
	"testing"
)

// TestClockctlChangeCutByTimeoutSaysOutcomeUnknown: a change (cancel,
// reschedule, replay, create) cut by -timeout after it was sent may have
// been applied by clockd, so clockctl says the outcome is unknown (as the
// client package does) rather than only that no answer came, which reads
// as "nothing happened" and invites a blind retry.
func TestClockctlChangeCutByTimeoutSaysOutcomeUnknown(t *testing.T) {
	slow := silentServer(t)
	r := ctl(slow.URL, "-timeout", "100ms", "cancel", "a", "b")
	if r.code != 1 {
		t.Fatalf("cancel cut by -timeout:\n%v", r)
	}
	if !strings.Contains(strings.ToLower(r.stderr), "unknown") && !strings.Contains(r.stderr, "may have been applied") {
		t.Errorf("cancel cut by -timeout after it was sent: stderr %q does not say that the cancel may have been applied (outcome unknown)", r.stderr)
	}
	if !strings.Contains(r.stderr, "clockctl get") {
		t.Errorf("cancel cut by -timeout: stderr %q does not say how to learn the outcome (clockctl get)", r.stderr)
	}
	// A read cut by -timeout changed nothing: no answer, and that is all.
	r = ctl(slow.URL, "-timeout", "100ms", "get", "a", "b")
	if r.code != 1 || strings.Contains(r.stderr, "unknown") {
		t.Errorf("get cut by -timeout:\n%v", r)
	}
}
