package console_test

// Do the shipped alert rules fire on the series clockd
// really exports?

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clockd/clockd/internal/testenv"
)

// ClockdDeadClocksGrowing is sum(increase(clockd_rings_total{result="dead"}[15m])) > 0.
// clockd creates the series clockd_rings_total{result="dead"} only when the
// first clock of the process dies (nothing initialises it to 0: a fresh
// /metrics has no clockd_rings_total at all), so Prometheus sees it appear
// at 1 (or at however many died in the first scrape interval). increase()
// of a series whose first sample is already 1 and then stays 1 is 0: the
// first dead clocks after every start of an instance never fire the alert.
// A single clock that dies (the common case: one application without a
// queue, max_attempts 5) is never alerted on. The shipped promtool test
// hides it by feeding a series that starts at 0 ('0+1x30').
//
// The test reads what a fresh clockd exports and feeds promtool the series
// Prometheus would then scrape: absent, then 1 for 20 minutes. The alert
// must fire.
func TestDeadClocksAlertFiresOnTheFirstDeadClock(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found: %v", err)
	}
	// What a fresh clockd exports.
	amqp := testenv.AMQPURL(t)
	exchange := testenv.Name("clock.ring.review-")
	testenv.DeleteExchangeOnCleanup(t, amqp, exchange)
	d := testenv.StartClockd(t, map[string]string{
		"CLOCKD_MYSQL_DSN": testenv.MySQLDSN(t), "CLOCKD_AMQP_URL": amqp, "CLOCKD_EXCHANGE": exchange,
		"CLOCKD_SHARDS": "4", "CLOCKD_LEASE_TTL": "3s",
	})
	resp, err := http.Get(d.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	initialised := strings.Contains(string(body), `clockd_rings_total{result="dead"} 0`)
	before := `_x5` // no series until the first dead clock
	if initialised {
		before = `0x5`
	}
	t.Logf("fresh clockd exports clockd_rings_total{result=\"dead\"} 0: %v", initialised)

	dir := t.TempDir()
	rules, err := os.ReadFile(repoFile(t, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "clockd-alerts.yml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	// Expect no alert: promtool then fails when the alert does fire, and
	// passes when it stays quiet — which is the bug.
	test := `rule_files: [clockd-alerts.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'clockd_rings_total{job="clockd",instance="a",result="rung"}'
        values: '0+60x25'
      - series: 'clockd_rings_total{job="clockd",instance="a",result="dead"}'
        values: '` + before + ` 1x20'
    alert_rule_test:
      - {eval_time: 7m, alertname: ClockdDeadClocksGrowing, exp_alerts: []}
      - {eval_time: 10m, alertname: ClockdDeadClocksGrowing, exp_alerts: []}
      - {eval_time: 15m, alertname: ClockdDeadClocksGrowing, exp_alerts: []}
`
	if err := os.WriteFile(filepath.Join(dir, "dead_test.yml"), []byte(test), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "dead_test.yml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	fired := err != nil && strings.Contains(string(out), "ClockdDeadClocksGrowing") && strings.Contains(string(out), "got:")
	if !fired {
		t.Errorf("a clock died (clockd_rings_total{result=\"dead\"} appears at 1, as clockd exports it) and ClockdDeadClocksGrowing "+
			"never fired at 7, 10 or 15 minutes.\npromtool (expecting no alert): err %v\n%s", err, out)
	}
}
