package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// A cross-site HEAD of the live tail is refused like its GET. Go's mux
// routes HEAD to the GET handler and http.CrossOriginProtection passes
// HEAD as safe, so any page could open a tail with fetch(url, {method:
// "HEAD", mode: "no-cors"}); with auth off, the tail then took the rings
// of an application without a queue of its own, and they were marked rung.
func TestCrossSiteHEADOfTheTailRefused(t *testing.T) {
	e := startConsoleEnv(t, map[string]string{"CLOCKD_AUTH_MODE": "off", "CLOCKD_ADMIN_TOKEN": ""})
	e.create(t, "unbound", "u-1", map[string]any{"delay": "2s"})
	req, _ := http.NewRequest("HEAD", e.ui("tail/events?app=unbound"), nil)
	// what a browser sends for fetch(url, {method:"HEAD", mode:"no-cors"})
	// on a page of another site
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Sec-Fetch-Mode", "no-cors")
	req.Header.Set("Sec-Fetch-Dest", "empty")
	req.Header.Set("Origin", "https://evil.example")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusForbidden {
		return
	}
	// The connection stays open in the transport's pool, as a browser's
	// would while the page is open.
	deadline := time.Now().Add(15 * time.Second)
	st := ""
	for time.Now().Before(deadline) {
		if st, _ = e.status(t, "unbound", "u-1"); st != "pending" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("a cross-site HEAD of the live tail answered %d (want 403); clock unbound/u-1, whose application has no queue, is now %q (want pending: nobody received it)", resp.StatusCode, st)
}

// The page of a recurring clock shows its schedule and no lateness: its
// ring_at is the next occurrence and its rung_at the last one's, so their
// difference was shown as a negative lateness ("-2.99s after ring at").
func TestRecurringClockPageShowsItsSchedule(t *testing.T) {
	e := startConsoleEnv(t, map[string]string{"CLOCKD_AUTH_MODE": "off", "CLOCKD_ADMIN_TOKEN": ""})
	testenv.BindQueue(t, e.amqp, e.exchange, "cron")
	if code, out := e.api(t, "POST", "/v1/clocks", map[string]any{"application": "cron", "business_id": "every-3s",
		"payload": "{}", "schedule": map[string]any{"every": "3s"}}); code != http.StatusCreated {
		t.Fatalf("create recurring: %d %v", code, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var rung int
		if err := e.db.QueryRow("SELECT COUNT(*) FROM clock WHERE application = 'cron' AND rung_at IS NOT NULL").Scan(&rung); err != nil {
			t.Fatal(err)
		}
		if rung > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cron/every-3s never rang an occurrence")
		}
		time.Sleep(100 * time.Millisecond)
	}
	page := get(t, http.DefaultClient, e.ui("clocks/cron/every-3s"))
	i := strings.Index(page, "rung at</th>")
	if i < 0 {
		t.Fatalf("no rung at row on the clock page:\n%s", page)
	}
	row := page[i:]
	row = row[:strings.Index(row, "</tr>")]
	if strings.Contains(row, "(-") {
		t.Errorf("the page of a recurring clock shows a negative lateness for its last occurrence: %s", row)
	}
}
