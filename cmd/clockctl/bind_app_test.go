package main

import (
	"strings"
	"testing"
)

// bind refuses exactly the application names the server refuses (it asks
// alarm.CheckApplication), before it connects anywhere.
func TestBindChecksTheApplicationAsTheServerDoes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		app  string
		want string // in the message; "" = accepted (then it fails to connect)
	}{
		{"order", ""},
		{"Order.v2_eu-West9", ""},
		{"...", ""},
		{strings.Repeat("a", 64), ""},
		{".", "URL path segment"},
		{"..", "URL path segment"},
		{strings.Repeat("a", 65), "longer than 64"},
		{"a b", "allowed are A-Z a-z 0-9 . _ -"},
		{"a/b", "allowed are A-Z a-z 0-9 . _ -"},
		{"ordér", "allowed are A-Z a-z 0-9 . _ -"},
		{"a\xff", "allowed are A-Z a-z 0-9 . _ -"},
	}
	for _, tt := range tests {
		t.Run(tt.app, func(t *testing.T) {
			t.Parallel()
			r := runBind(func(string) string { return "" }, "-app", tt.app, "-amqp", "amqp://guest:guest@127.0.0.1:1/")
			if tt.want == "" {
				if r.code != exitError || !strings.Contains(r.stderr, "connect to") {
					t.Errorf("-app %q: %+v, want it accepted (then a connection failure)", tt.app, r)
				}
				return
			}
			if r.code != exitUsage || !strings.Contains(r.stderr, "-app") || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("-app %q: %+v, want a usage error saying %q", tt.app, r, tt.want)
			}
		})
	}
}
