package config_test

import (
	"strings"
	"testing"

	"github.com/clockd/clockd/internal/config"
)

// README, Configuration: "A bad value stops clockd at start with a message
// naming the key." clockd declares the ring exchange and, beside it,
// "<exchange>.hints" and "<exchange>.tokens". An exchange name the broker can
// never declare was accepted at start (found by review):
//   - "amq.rvn": RabbitMQ refuses the reserved prefix; clockd starts, logs
//     "rabbitmq unavailable, retrying" for ever, /readyz stays 503, nothing
//     rings — without naming amqp.exchange as the cause.
//   - "amq.direct": the rings publish (it is predeclared), but
//     "amq.direct.hints" is refused, logged only at DEBUG ("hint connection
//     lost"), so hints and token revocation over the broker silently never
//     work.
//   - 250 characters: within the 1..255 check, but "<exchange>.tokens" is
//     257 characters, more than an AMQP short string holds: again only a
//     DEBUG line, hints and revocations silently off.
func TestExchangeNamesTheBrokerCannotDeclareAreRefused(t *testing.T) {
	for name, exchange := range map[string]string{
		"reserved prefix":                   "amq.rvn",
		"predeclared amq exchange":          "amq.direct",
		"derived names over 255 characters": strings.Repeat("r", 250),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.Load("", envOf(map[string]string{"CLOCKD_EXCHANGE": exchange}))
			if err == nil {
				t.Fatalf("CLOCKD_EXCHANGE=%.40q (%d characters) accepted; clockd would start and its exchange, or %s.hints / %s.tokens, cannot be declared",
					exchange, len(exchange), "<exchange>", "<exchange>")
			}
			if !strings.Contains(err.Error(), "amqp.exchange") {
				t.Errorf("error does not name amqp.exchange: %v", err)
			}
		})
	}
}
