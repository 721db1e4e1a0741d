package config_test

import (
	"strings"
	"testing"

	"github.com/clockd/clockd/internal/config"
)

// SPEC/README: CLOCKD_IDEMPOTENCY_WINDOW is 0 to 24h, "checked at start".
// Load capped the window at the retentions *before* Validate (found by
// review), so an out-of-range window was cut to the retention and never
// reached the range check: with the default retention (24h) a window of 48h started, silently,
// as 24h; with CLOCKD_RETENTION=1h a window of 1000h started as 1h.
func TestIdempotencyWindowOutOfRangeIsStillRefused(t *testing.T) {
	t.Parallel()
	for _, env := range []map[string]string{
		{"CLOCKD_IDEMPOTENCY_WINDOW": "48h"},
		{"CLOCKD_IDEMPOTENCY_WINDOW": "1000h", "CLOCKD_RETENTION": "1h"},
	} {
		c, err := config.Load("", envOf(env))
		if err == nil {
			t.Errorf("%v: started with clock.idempotency_window %s; want it refused (0 to 24h)", env, c.Clock.IdempotencyWindow)
			continue
		}
		if !strings.Contains(err.Error(), "clock.idempotency_window") {
			t.Errorf("%v: refused, but not for clock.idempotency_window: %v", env, err)
		}
	}
}
