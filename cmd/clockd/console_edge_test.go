package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// The console under /ui/ is held to http.max_concurrent_requests as the API
// is: past the cap a request answers 503 at once. Before, it was mounted
// beside the API's limiter: every /ui/ request with a made-up session
// cookie cost a MySQL query however many were under way, and with MySQL
// stalled each was held for the console's 5 s session check (found by the
// review of the edge; the API answered 503 at once under the same stall).
func TestConsoleHeldToMaxConcurrentRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dsn, proxy := proxiedDSN(t, e)
	addr := testenv.FreeAddr(t)
	base := "http://" + addr
	client := &http.Client{Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	serveInProcess(t, e.vars(map[string]string{"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_HTTP_ADDR": addr,
		"CLOCKD_AUTH_MODE": "tokens", "CLOCKD_HTTP_MAX_CONCURRENT_REQUESTS": "2", "CLOCKD_LOG_LEVEL": "warn"}), client, base)
	t.Cleanup(proxy.Resume) // before the server stops (cleanups run last first)

	proxy.Stall()
	const n = 20
	type answer struct {
		code int
		took time.Duration
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", base+"/ui/", nil)
			// a made-up session id of the form the console makes
			req.AddCookie(&http.Cookie{Name: "clockd_console", Value: fmt.Sprintf("%043d", i)})
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				answers[i] = answer{-1, time.Since(start)}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			answers[i] = answer{resp.StatusCode, time.Since(start)}
			if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				t.Errorf("a 503 without Retry-After")
			}
		})
	}
	wg.Wait()
	quick := 0
	for _, a := range answers {
		if a.code == http.StatusServiceUnavailable && a.took < time.Second {
			quick++
		}
	}
	if quick < n-2 {
		t.Errorf("%d console requests at once with max_concurrent_requests 2 and MySQL stalled: %d answered 503 within 1 s, want at least %d\nanswers: %v",
			n, quick, n-2, answers)
	}
}

// Refused console logins are logged sparingly: anyone can post guesses at
// their request rate, and one line each flooded the log (found by the
// review of the edge). API 401s are not logged at all.
func TestConsoleLoginRefusalsDoNotFloodTheLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := testenv.FreeAddr(t)
	base := "http://" + addr
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Timeout: 10 * time.Second, Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	stderr := serveInProcess(t, e.vars(map[string]string{"CLOCKD_HTTP_ADDR": addr, "CLOCKD_AUTH_MODE": "tokens"}), client, base)

	resp, err := client.Get(base + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the login page:\n%s", page)
	}
	const n = 300
	for i := range n {
		resp, err := client.PostForm(base+"/ui/login", url.Values{"csrf": {string(m[1])}, "token": {fmt.Sprintf("guess-%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("login %d: %d, want 401", i, resp.StatusCode)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if lines := strings.Count(stderr.String(), "console login refused"); lines < 1 || lines > 5 {
		t.Errorf("%d refused console logins wrote %d log lines \"console login refused\"; want one, and a few at most", n, lines)
	}
}
