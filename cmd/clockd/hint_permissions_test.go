package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// The README's broker user for clockd: with its permissions the hint
// connection works; without rights on <exchange>.tokens (the README's
// pattern before, found by review) the connection is refused at every
// attempt, and a WARN says so at the default log level (it was a DEBUG
// line only: hints and revocations were off, silently).
func TestHintConnectionWithTheREADMEsPermissions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, tail string
		works      bool
	}{
		{"README", `(\.hints|\.tokens)?$|^amq\.gen-.*`, true},
		{"without tokens", `(\.hints)?$|^amq\.gen-.*`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.AMQP = testenv.Vhost(t)
			perm := `^` + regexp.QuoteMeta(e.Exchange) + tt.tail
			testenv.SetPermissions(t, e.AMQP, perm, perm, perm)
			d := testenv.StartClockd(t, e.vars(nil)) // log level info, the default
			time.Sleep(8 * time.Second)              // several attempts of the hint connection
			warned := strings.Contains(d.Logs(), "hint connection fails")
			if tt.works && warned {
				t.Errorf("with the README's permissions the hint connection fails:\n%s", d.Logs())
			}
			if !tt.works && !warned {
				t.Errorf("the broker refuses %s.tokens at every attempt and no WARN says so:\n%s", e.Exchange, d.Logs())
			}
		})
	}
}
