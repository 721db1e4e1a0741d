package console_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// With auth off (the default on loopback) the console has no session
// secret: a page of another origin could open a live tail with a GET (it
// binds a queue to the ring exchange: rings of an application with no
// queue of its own were taken by it and marked rung), and a page on
// another port of the same host (same site) could plant the CSRF cookie,
// compute the token and cancel, move or replay clocks. The console now
// refuses browser requests of other origins, as the API does.
func TestConsoleRefusesOtherOriginsWithAuthOff(t *testing.T) {
	e := startConsoleEnv(t, map[string]string{"CLOCKD_AUTH_MODE": "off", "CLOCKD_ADMIN_TOKEN": ""})

	t.Run("cross-site GET opens a live tail", func(t *testing.T) {
		e.create(t, "unbound", "u-1", map[string]any{"delay": "2s"})
		req, _ := http.NewRequest("GET", e.ui("tail/events?app=unbound"), nil)
		// what a browser sends for <img src=...> on a page of another site
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		req.Header.Set("Sec-Fetch-Mode", "no-cors")
		req.Header.Set("Sec-Fetch-Dest", "image")
		req.Header.Set("Referer", "https://evil.example/")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusForbidden {
			t.Errorf("a cross-site GET of the live tail: %d, want 403", resp.StatusCode)
		}
		if resp.StatusCode == http.StatusOK {
			// read until the queue is bound, keep the stream open
			go func() {
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
				}
			}()
			deadline := time.Now().Add(15 * time.Second)
			st := ""
			for time.Now().Before(deadline) {
				if st, _ = e.status(t, "unbound", "u-1"); st != "pending" {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Fatalf("a cross-site GET (Sec-Fetch-Site: cross-site) opened a live tail: 200; clock unbound/u-1, whose application has no queue, is now %q (nobody received it)", st)
		}
	})

	t.Run("planted CSRF cookie from another port", func(t *testing.T) {
		e.create(t, "shop", "o-1", map[string]any{"delay": "1h"})
		nonce := strings.Repeat("A", 43) // chosen by the attacker
		h := sha256.New()
		h.Write([]byte("clockd console csrf\x00"))
		h.Write([]byte(nonce))
		h.Write([]byte{0})
		csrf := base64.RawURLEncoding.EncodeToString(h.Sum(nil))
		req, _ := http.NewRequest("POST", e.ui("clocks/shop/o-1/cancel"), strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Cookie", "clockd_csrf="+nonce)
		req.Header.Set("Origin", "http://127.0.0.1:3000") // another port: same site, another origin
		req.Header.Set("Sec-Fetch-Site", "same-site")
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if st, _ := e.status(t, "shop", "o-1"); st != "pending" || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("cancel posted from another origin with a cookie it planted: %d, clock is %s; want 403 and pending", resp.StatusCode, st)
		}
	})
}
