package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// The console tells an operator how to fix "rabbit: message unroutable":
// "Bind one: clockctl bind -app APP -queue APP" (trouble page) and "bind one
// with clockctl bind -app APP -queue APP" (clock page). clockctl bind binds
// to $CLOCKD_EXCHANGE, else clock.ring; on a clockd whose amqp.exchange is
// another one, the command as shown binds the queue to the wrong exchange and
// fixes nothing. clockd's own log line for the same trouble names it
// ("fix":"clockctl bind -app APP -exchange EXCHANGE"); the console's hint does
// not (internal/console/templates/trouble.html:9, clock.html:14).
func TestConsoleBindHintNamesTheExchange(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // an exchange of its own, not clock.ring
	d := testenv.StartClockd(t, e.vars(nil))
	ctx := context.Background()
	const app, id = "rvnhint", "h1"
	if code, err := d.Do(ctx, "POST", "/v1/clocks", map[string]any{
		"application": app, "business_id": id, "payload": "{}", "delay": 0,
	}, nil); err != nil || code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var c httpapi.Clock
		if code, err := d.Do(ctx, "GET", "/v1/clocks/"+app+"/"+id, nil, &c); err == nil && code == http.StatusOK &&
			c.LastError != nil && strings.Contains(*c.LastError, "unroutable") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the clock of an application without a queue did not fail unroutable within 30 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(d.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	for _, path := range []string{"/ui/trouble", "/ui/clocks/" + app + "/" + id} {
		var body string
		for end := time.Now().Add(15 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			if body = get(path); strings.Contains(body, "clockctl bind") || time.Now().After(end) {
				break // the trouble page's failing groups are kept for 10 s
			}
		}
		i := strings.Index(body, "clockctl bind")
		if i < 0 {
			t.Errorf("%s shows no clockctl bind hint for the unroutable clock", path)
			continue
		}
		hint := body[i:]
		if j := strings.Index(hint, "</code>"); j >= 0 {
			hint = hint[:j]
		}
		if !strings.Contains(hint, e.Exchange) {
			t.Errorf("%s tells the operator to run %q, which binds to clock.ring; clockd publishes to %q (want -exchange %s)",
				path, hint, e.Exchange, e.Exchange)
		}
	}
}
