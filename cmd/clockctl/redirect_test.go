package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestClockctlThroughARedirectFails: clockctl cancel through a front that
// answers 301 (http -> https, a moved host name) exits 0, printing the clock
// as a cancel's answer, while nothing was cancelled (the redirect was
// followed as a GET). A script that trusts the exit status believes the
// clock will never ring.
func TestClockctlThroughARedirectFails(t *testing.T) {
	api := realAPIOff(t)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, api+r.URL.RequestURI(), http.StatusMovedPermanently)
	}))
	t.Cleanup(front.Close)
	if r := ctl(api, "create", "-app", "order", "-id", "rd-1", "-in", "1h", "-payload", "{}"); r.code != 0 {
		t.Fatalf("create: %v", r)
	}
	r := ctl(front.URL, "cancel", "order", "rd-1")
	after := ctl(api, "get", "order", "rd-1")
	if r.code == 0 || !strings.Contains(r.stderr, "redirected to") {
		t.Errorf("clockctl cancel through a 301: exit %d, stderr %q; want a failure naming the redirect", r.code, r.stderr)
	}
	if r.code == 0 && strings.Contains(after.stdout, `"pending"`) {
		t.Errorf("clockctl cancel through a 301 exited 0 but the clock is still pending:\ncancel printed %s\nget prints %s", r.stdout, after.stdout)
	}
	r = ctl(front.URL, "create", "-app", "order", "-id", "rd-2", "-in", "1h", "-payload", "{}")
	after = ctl(api, "get", "order", "rd-2")
	if r.code == 0 && after.code != 0 {
		t.Errorf("clockctl create through a 301 exited 0 (stdout %.80q, stderr %q) but no clock was made: %s", r.stdout, r.stderr, after.stderr)
	}
}
