package console_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	_ "github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/testenv"
)

// consoleEnv is one clockd (auth mode tokens, a bootstrap admin token) with
// its own database and exchange, and a direct connection to its database to
// check what the console's buttons did.
type consoleEnv struct {
	d        *testenv.Clockd
	db       *sql.DB
	amqp     string
	exchange string
	admin    string
	instance string
}

func startConsoleEnv(t *testing.T, extra map[string]string) *consoleEnv {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	e := &consoleEnv{amqp: testenv.AMQPURL(t), exchange: testenv.Name("clock.ring.console-"),
		admin: testenv.Name("console-admin-"), instance: testenv.Name("console-")}
	testenv.DeleteExchangeOnCleanup(t, e.amqp, e.exchange)
	env := map[string]string{
		"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_AMQP_URL": e.amqp, "CLOCKD_EXCHANGE": e.exchange,
		"CLOCKD_SHARDS": "4", "CLOCKD_LEASE_TTL": "3s", "CLOCKD_INSTANCE_ID": e.instance,
		"CLOCKD_AUTH_MODE": "tokens", "CLOCKD_ADMIN_TOKEN": e.admin,
		"CLOCKD_RETRY_MIN": "200ms", "CLOCKD_RETRY_MAX": "1s",
	}
	for k, v := range extra {
		env[k] = v
	}
	e.d = testenv.StartClockd(t, env)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e.db = db
	return e
}

// api calls the REST API with the admin token.
func (e *consoleEnv) api(t *testing.T, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.d.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e.admin)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &out)
	return resp.StatusCode, out
}

func (e *consoleEnv) create(t *testing.T, app, id string, fields map[string]any) {
	t.Helper()
	body := map[string]any{"application": app, "business_id": id, "payload": `{"id":"` + id + `"}`}
	for k, v := range fields {
		body[k] = v
	}
	if code, out := e.api(t, "POST", "/v1/clocks", body); code != http.StatusCreated {
		t.Fatalf("create %s/%s: %d %v", app, id, code, out)
	}
}

// status reads a clock's status straight from MySQL.
func (e *consoleEnv) status(t *testing.T, app, id string) (status string, attempts int) {
	t.Helper()
	if err := e.db.QueryRow("SELECT status, attempts FROM clock WHERE application = ? AND business_id = ?", app, id).Scan(&status, &attempts); err != nil {
		t.Fatalf("read %s/%s: %v", app, id, err)
	}
	return status, attempts
}

func (e *consoleEnv) waitStatus(t *testing.T, app, id, want string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		st, n := e.status(t, app, id)
		if st == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s is %s (attempts %d) after %s, want %s", app, id, st, n, limit, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *consoleEnv) ui(path string) string { return e.d.URL + "/ui/" + path }

// login logs the tab in through the login form.
func (e *consoleEnv) login(t *testing.T, ctx context.Context) {
	t.Helper()
	do(t, ctx, "login",
		chromedp.Navigate(e.ui("")),
		chromedp.WaitVisible(chromedp.ID("token")), // redirected to the login page
		chromedp.SendKeys(chromedp.ID("token"), e.admin),
		chromedp.Click(chromedp.ID("login")),
		chromedp.WaitVisible(chromedp.ID("due-chart")),
	)
	if got := title(t, ctx); !strings.HasPrefix(got, "Overview") {
		t.Fatalf("after login the page is %q, want the overview", got)
	}
}

// TestConsoleInBrowser drives the console in headless chromium against a
// real clockd, MySQL and RabbitMQ: login, each page, a cancel and a replay
// through the buttons (checked in MySQL), a refused forged form, a ring
// appearing in the live tail, and the cluster page with heap sizes.
func TestConsoleInBrowser(t *testing.T) {
	e := startConsoleEnv(t, nil)
	// Clocks for the pages: two pending far ahead, one that dies (no
	// queue, one attempt allowed) and one failing unroutable.
	e.create(t, "shop", "order-1", map[string]any{"delay": "1h"})
	e.create(t, "shop", "order-2", map[string]any{"delay": "1h"})
	e.create(t, "billing", "invoice-9", map[string]any{"delay": "0s", "max_attempts": 1})
	e.create(t, "lost", "nobody-listens", map[string]any{"delay": "0s"})
	e.waitStatus(t, "billing", "invoice-9", "dead", 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, n := e.status(t, "lost", "nobody-listens"); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lost/nobody-listens never failed an attempt")
		}
		time.Sleep(100 * time.Millisecond)
	}

	ctx := tab(t, 3*time.Minute)

	t.Run("login", func(t *testing.T) {
		// A wrong token is refused on the login page.
		do(t, ctx, "wrong token",
			chromedp.Navigate(e.ui("")),
			chromedp.WaitVisible(chromedp.ID("token")),
			chromedp.SendKeys(chromedp.ID("token"), "not-a-token"),
			chromedp.Click(chromedp.ID("login")),
			chromedp.WaitVisible(chromedp.ID("err")),
		)
		if got := text(t, ctx, chromedp.ID("err")); !strings.Contains(got, "not a valid token") {
			t.Errorf("wrong token: error %q", got)
		}
		e.login(t, ctx)
		apps := text(t, ctx, chromedp.ID("apps"))
		for _, app := range []string{"shop", "billing", "lost"} {
			if !strings.Contains(apps, app) {
				t.Errorf("overview lacks application %s:\n%s", app, apps)
			}
		}
		screenshot(t, ctx, "overview")
	})

	t.Run("cancel", func(t *testing.T) {
		do(t, ctx, "open the clock",
			chromedp.Navigate(e.ui("clocks?application=shop")),
			chromedp.WaitVisible(chromedp.ID("clock-list")),
			chromedp.Click(chromedp.Search(`//a[text()="order-1"]`)),
			chromedp.WaitVisible(chromedp.ID("cancel")),
		)
		screenshot(t, ctx, "clock")
		do(t, ctx, "cancel", chromedp.Click(chromedp.ID("cancel")), chromedp.WaitVisible(chromedp.ID("msg")))
		msg, status := text(t, ctx, chromedp.ID("msg")), text(t, ctx, chromedp.ID("status"))
		if msg != "Cancelled." || !strings.Contains(status, "cancelled") {
			t.Errorf("after cancel: message %q, status %q", msg, status)
		}
		if st, _ := e.status(t, "shop", "order-1"); st != "cancelled" {
			t.Errorf("MySQL has shop/order-1 %s after the cancel button, want cancelled", st)
		}
	})

	t.Run("message only from an action", func(t *testing.T) {
		// The note after an action travels in the redirect's query; a
		// link with a note of someone else's ("log in at evil.example")
		// shows none.
		do(t, ctx, "forged note",
			chromedp.Navigate(e.ui("clocks/shop/order-1?msg="+url.QueryEscape("Your session expired, log in at evil.example")+"&sig=forged")),
			chromedp.WaitVisible(chromedp.ID("status")),
		)
		shown, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("msg") !== null`))
		if err != nil {
			t.Fatal(err)
		}
		if shown {
			t.Errorf("a note from a link was shown: %q", text(t, ctx, chromedp.ID("msg")))
		}
	})

	t.Run("csrf refused", func(t *testing.T) {
		// A form whose CSRF token is not this session's (as a forged one
		// from another site would be) is refused and changes nothing.
		do(t, ctx, "forged cancel",
			chromedp.Navigate(e.ui("clocks/shop/order-2")),
			chromedp.WaitVisible(chromedp.ID("cancel")),
			chromedp.SetAttributeValue(chromedp.CSS(`#cancel-form input[name="csrf"]`), "value", "forged"),
			chromedp.Click(chromedp.ID("cancel")),
			chromedp.WaitVisible(chromedp.ID("err")),
		)
		if got := text(t, ctx, chromedp.ID("err")); !strings.Contains(got, "CSRF") {
			t.Errorf("forged form: page says %q", got)
		}
		if got := title(t, ctx); !strings.HasPrefix(got, "Refused") {
			t.Errorf("forged form: title %q", got)
		}
		if st, _ := e.status(t, "shop", "order-2"); st != "pending" {
			t.Errorf("shop/order-2 is %s after a forged cancel, want pending", st)
		}
	})

	t.Run("trouble and replay", func(t *testing.T) {
		// #failing or #no-failing, whichever the page has: a missing
		// failing list fails here, not after the test's deadline
		do(t, ctx, "trouble page", chromedp.Navigate(e.ui("trouble")), chromedp.WaitVisible(chromedp.CSS(`#failing, #no-failing`)))
		failing := text(t, ctx, chromedp.CSS(`#failing, #no-failing`))
		if !strings.Contains(failing, "lost") || !strings.Contains(failing, "clockctl bind -app lost") {
			t.Errorf("trouble page lacks the failing unroutable clock and the bind hint:\n%s", failing)
		}
		screenshot(t, ctx, "trouble")
		// Bind a queue now so that the replayed clock rings.
		testenv.BindQueue(t, e.amqp, e.exchange, "billing")
		do(t, ctx, "replay",
			chromedp.Navigate(e.ui("trouble?application=billing")),
			chromedp.WaitVisible(chromedp.Search(`//a[text()="invoice-9"]`)),
			chromedp.Click(chromedp.CSS(`.failed button.replay-one`)),
			chromedp.WaitVisible(chromedp.ID("msg")),
		)
		if msg := text(t, ctx, chromedp.ID("msg")); !strings.Contains(msg, "Replayed billing/invoice-9") {
			t.Errorf("after replay: message %q", msg)
		}
		e.waitStatus(t, "billing", "invoice-9", "rung", 30*time.Second)
	})

	t.Run("live tail", func(t *testing.T) {
		do(t, ctx, "tail page",
			chromedp.Navigate(e.ui("tail?app=radio")),
			chromedp.WaitVisible(chromedp.CSS(`#tail-state[data-state="ready"]`)),
		)
		e.create(t, "radio", "song-42", map[string]any{"delay": "300ms"})
		do(t, ctx, "a ring in the tail", chromedp.WaitVisible(chromedp.CSS(`#tail tr.ring a.business-id`)))
		if got := text(t, ctx, chromedp.CSS(`#tail tr.ring a.business-id`)); got != "song-42" {
			t.Errorf("tail shows %q, want song-42", got)
		}
		screenshot(t, ctx, "tail")
		e.waitStatus(t, "radio", "song-42", "rung", 30*time.Second)
	})

	t.Run("cluster", func(t *testing.T) {
		// Heap sizes come with the heartbeat (every lease TTL / 4).
		var inst string
		deadline := time.Now().Add(30 * time.Second)
		for {
			do(t, ctx, "cluster page", chromedp.Navigate(e.ui("cluster")), chromedp.WaitVisible(chromedp.ID("instances")))
			inst = text(t, ctx, chromedp.ID("instances"))
			if strings.Contains(text(t, ctx, chromedp.CSS("#instances td.heap-bytes")), "B") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster page shows no heap size after 30s:\n%s", inst)
			}
			time.Sleep(500 * time.Millisecond)
		}
		if !strings.Contains(inst, e.instance) || !strings.Contains(inst, "live") {
			t.Errorf("cluster page lacks the live instance %s:\n%s", e.instance, inst)
		}
		if _, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("all-owned"))); err != nil {
			t.Errorf("cluster page does not say every shard is owned: %v", err)
		}
		if shards := text(t, ctx, chromedp.ID("shards")); strings.Count(shards, e.instance) != 4 {
			t.Errorf("shard table does not show the 4 shards held by %s:\n%s", e.instance, shards)
		}
		screenshot(t, ctx, "cluster")
	})

	t.Run("logout", func(t *testing.T) {
		do(t, ctx, "logout",
			chromedp.Navigate(e.ui("")),
			chromedp.WaitVisible(chromedp.ID("logout")),
			chromedp.Click(chromedp.ID("logout")),
			chromedp.WaitVisible(chromedp.ID("token")),
			chromedp.Navigate(e.ui("cluster")),
			chromedp.WaitVisible(chromedp.ID("token")),
		)
		if got := title(t, ctx); !strings.HasPrefix(got, "Log in") {
			t.Errorf("after logout /ui/cluster shows %q, want the login page", got)
		}
	})

	t.Run("http", func(t *testing.T) { testHTTP(t, e) })
	t.Run("metrics of the dashboard and rules exist", func(t *testing.T) { testMetricsExist(t, e) })
}

// testHTTP checks what a browser does not show: the cookie's attributes,
// and actions refused without a session or without the CSRF token.
func testHTTP(t *testing.T, e *consoleEnv) {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// Without a session: pages redirect to the login page, actions 401.
	resp, err := c.Get(e.ui("cluster"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/login") {
		t.Errorf("GET /ui/cluster without session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, err = c.PostForm(e.ui("clocks/shop/order-2/cancel"), url.Values{"csrf": {"x"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("cancel without session: %d, want 401", resp.StatusCode)
	}
	// Log in: read the login form's CSRF token, post the admin token.
	page := get(t, c, e.ui("login"))
	csrf := formValue(t, page, "csrf")
	resp, err = c.PostForm(e.ui("login"), url.Values{"csrf": {csrf}, "token": {e.admin}, "next": {"/ui/"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	var session *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "clockd_console" {
			session = ck
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/ui/" {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui/", session)
	}
	// With the session but without the CSRF token: 403, nothing changes.
	resp, err = c.PostForm(e.ui("clocks/shop/order-2/cancel"), url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cancel without CSRF token: %d, want 403", resp.StatusCode)
	}
	if st, _ := e.status(t, "shop", "order-2"); st != "pending" {
		t.Errorf("shop/order-2 is %s after refused cancels, want pending", st)
	}
	// With both: a move through the form moves the clock in MySQL.
	page = get(t, c, e.ui("clocks/shop/order-2"))
	csrf = formValue(t, page, "csrf")
	before := ringAt(t, e, "shop", "order-2")
	resp, err = c.PostForm(e.ui("clocks/shop/order-2/move"), url.Values{"csrf": {csrf}, "when": {"2h"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("move: %d, want 303", resp.StatusCode)
	}
	if after := ringAt(t, e, "shop", "order-2"); after-before < int64(50*time.Minute/time.Millisecond) {
		t.Errorf("move by 2h moved target_ring_at from %d to %d", before, after)
	}
	// Every page answers quickly on this small table (the bound on a
	// large one is by design: capped counts and index ranges).
	for _, p := range []string{"", "clocks?application=shop", "trouble", "cluster", "tail?app=shop"} {
		resp, err := c.Get(e.ui(p))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /ui/%s: %d", p, resp.StatusCode)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("GET /ui/%s: CSP %q", p, csp)
		}
	}
}

func ringAt(t *testing.T, e *consoleEnv, app, id string) int64 {
	t.Helper()
	var v int64
	if err := e.db.QueryRow("SELECT target_ring_at FROM clock WHERE application = ? AND business_id = ?", app, id).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func get(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", u, resp.StatusCode, b)
	}
	return string(b)
}

// formValue finds the value of the first input with the given name.
func formValue(t *testing.T, page, name string) string {
	t.Helper()
	marker := fmt.Sprintf(`name="%s" value="`, name)
	i := strings.Index(page, marker)
	if i < 0 {
		t.Fatalf("no input %s in page", name)
	}
	rest := page[i+len(marker):]
	return rest[:strings.IndexByte(rest, '"')]
}
