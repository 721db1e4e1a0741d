package config_test

// Values that config.Load accepts although clockd then
// runs with a silently odd setting, or panics later at start.

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/clockd/clockd/internal/config"
)

// A huge http.max_concurrent_requests passes validation (only "at least 1"
// is checked); serve then panics in httpapi.newLimiter with "makechan: size
// out of range" (4 × the value overflows int). Reproduce:
//
//	CLOCKD_HTTP_MAX_CONCURRENT_REQUESTS=9223372036854775807 clockd serve
//	-> panic: makechan: size out of range, exit 2
//
// Load must refuse it, naming the key.
func TestHugeMaxConcurrentRequestsRefused(t *testing.T) {
	t.Parallel()
	for _, v := range []int64{1 << 61, 1<<63 - 1} {
		_, err := config.Load("", envOf(map[string]string{"CLOCKD_HTTP_MAX_CONCURRENT_REQUESTS": strconv.FormatInt(v, 10)}))
		if err == nil || !strings.Contains(err.Error(), "http.max_concurrent_requests") {
			t.Errorf("CLOCKD_HTTP_MAX_CONCURRENT_REQUESTS=%d: Load returned %v; want an error naming http.max_concurrent_requests "+
				"(serve panics with makechan: size out of range on it)", v, err)
		}
	}
}

// Whitespace around a string value (a stray blank in a manifest, the
// newline at the end of a secret mounted from a file) is kept as part of
// the value, while numbers and durations are trimmed. With
// CLOCKD_EXCHANGE="clock.ring\n" clockd declares and publishes to an
// exchange named "clock.ring\n" that no application binds: every ring comes
// back unroutable and retries forever, and nothing says why the name
// differs. A bootstrap admin token with a trailing newline can never be
// sent in an Authorization header. Load must trim these values or refuse
// them, naming the key.
func TestStringValuesWithSurroundingBlanks(t *testing.T) {
	t.Parallel()
	token := "0123456789abcdef0123456789abcdef"
	tests := []struct {
		name, key, value, want string
		get                    func(config.Config) string
	}{
		{"CLOCKD_EXCHANGE", "amqp.exchange", "clock.ring\n", "clock.ring", func(c config.Config) string { return c.AMQP.Exchange }},
		{"CLOCKD_EXCHANGE", "amqp.exchange", " clock.ring", "clock.ring", func(c config.Config) string { return c.AMQP.Exchange }},
		{"CLOCKD_ADMIN_TOKEN", "auth.admin_token", token + "\n", token, func(c config.Config) string { return c.Auth.AdminToken }},
		{"CLOCKD_INSTANCE_ID", "cluster.instance_id", "   ", "", func(c config.Config) string { return c.Cluster.InstanceID }},
	}
	for _, tt := range tests {
		c, err := config.Load("", envOf(map[string]string{tt.name: tt.value}))
		switch {
		case err != nil:
			if !strings.Contains(err.Error(), tt.key) {
				t.Errorf("%s=%q: error %v does not name %s", tt.name, tt.value, err, tt.key)
			}
		case tt.get(c) != tt.want && !(tt.want == "" && strings.TrimSpace(tt.get(c)) != ""):
			t.Errorf("%s=%q: accepted as %q (want it trimmed to %q, or refused naming %s)", tt.name, tt.value, tt.get(c), tt.want, tt.key)
		}
	}
}

// A YAML file of several documents (two files concatenated, a "---" left by
// a template) is read only up to its first document: every key of the
// later documents is dropped without a word, so an override written there
// silently does not apply. Load must refuse a second document (or apply
// it), never ignore it.
func TestYAMLSecondDocumentIgnored(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "clockd.yaml")
	data := "clock:\n  shards: 8\n---\n# production overrides\nhistory:\n  keep: 0s\nclock:\n  shards: 64\n"
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path, noEnv)
	if err != nil {
		return // refused: fine
	}
	if c.Clock.Shards != 64 || c.History.Keep != 0 {
		t.Errorf("a second YAML document was silently ignored: shards %d (the second document says 64), history.keep %s (it says 0s); "+
			"want an error, or the document applied", c.Clock.Shards, c.History.Keep)
	}
}
