package main

import (
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// One clock the broker refuses outright (its message is larger than the
// broker's max_message_size: channel error 406 PRECONDITION_FAILED) is a
// failed attempt (SPEC) whose last_error says why. It must not take the
// other rings with it: the broker closes only the channel, and tearing the
// connection down at each of its retries failed every ring in flight and
// published them again (1,897 and 7,043 repeated deliveries of healthy
// clocks in 30 s, /readyz flapping). The limit is learned from the first
// refusal: later attempts fail unsent, and the closed channel is replaced
// on the same connection, whose other channels go on.
func TestOneRefusedMessageRepeatsNoOtherRing(t *testing.T) {
	node := testenv.StartRabbitNode(t)
	// read by each channel when it opens: set before clockd connects
	node.Ctl("eval", "application:set_env(rabbit, max_message_size, 4096).")
	e := newEnv(t)
	e.AMQP = node.URL()
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_RETRY_MIN": "500ms", "CLOCKD_RETRY_MAX": "1s"}))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "big")
	warm := postClocks(t, d, spreadSpecs("big", "warm", 1, time.Now().Add(300*time.Millisecond), time.Millisecond))
	if !waitReceived(cons, warm, 15*time.Second) {
		t.Fatal("warm-up clock did not ring")
	}

	// the refused clock is due in the middle of a steady stream of others
	now := time.Now()
	poison := ringSpec{App: "big", BusinessID: "poison", RingAt: now.Add(4 * time.Second).Truncate(time.Millisecond),
		Extra: map[string]any{"payload": strings.Repeat("x", 8000), "max_attempts": 5}}
	specs := spreadSpecs("big", "ok", 3000, now.Add(2*time.Second), 8*time.Second)
	all := postClocks(t, d, append(specs, poison))
	ok := all[:len(specs)]
	if !waitReceived(cons, ok, 40*time.Second) {
		t.Fatalf("%d of %d healthy clocks never rang", len(judge(cons, ok).missing()), len(ok))
	}
	var p httpapi.Clock
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if p = getClock(t, d, "big", "poison"); p.Status == "dead" || time.Now().After(end) {
			break
		}
	}
	if p.Status != "dead" || p.Attempts != 5 {
		t.Errorf("refused clock: status %s after %d attempts, want dead after its max_attempts 5", p.Status, p.Attempts)
	}
	if p.LastError == nil || !strings.Contains(*p.LastError, "max_message_size") || !strings.Contains(*p.LastError, "4096") {
		last := "<none>"
		if p.LastError != nil {
			last = *p.LastError
		}
		t.Errorf("refused clock's last_error does not say why: %s", last)
	}
	// The rings in flight on the channel the broker closed repeat (their
	// confirms were lost with it): at 375 rings/s a handful at most. The
	// whole connection's, at every retry, were hundreds to thousands.
	j := judge(cons, append(ok, warm...))
	j.check(t)
	if j.dups > 20 {
		t.Errorf("one refused clock made %d rings of other, healthy clocks repeat (%s)", j.dups, j)
	}
	if n, _ := scrapeGauge(d, "clockd_rabbit_reconnects_total"); n != 0 {
		t.Errorf("one refused clock tore the broker connection down %v times", n)
	}
	if n := strings.Count(d.Logs(), "larger than its max_message_size"); n != 1 {
		t.Errorf("the broker's limit was logged %d times, want once:\n%s", n, d.Logs())
	}
}
