package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// authedDo sends a JSON request with a bearer token and returns the status
// code, the body and how long the answer took.
func authedDo(t *testing.T, d *testenv.Clockd, method, path, token string, body any) (int, string, time.Duration) {
	t.Helper()
	start := time.Now()
	code, _, data := request(t, &http.Client{Timeout: time.Minute}, method, d.URL+path, token, body)
	return code, data, time.Since(start)
}

// MySQL takes reads but holds writes: a backup's FLUSH TABLES WITH READ
// LOCK (mysqldump --lock-all-tables, a snapshot), a disk full, or a
// semi-synchronous primary whose replica is gone (README's HA set-up asks
// for a timeout "long enough that the primary never falls back to
// asynchronous": every COMMIT waits). A GET only reads, and with auth off
// it answers 200 at once. With tokens, the token lookup (a read) is
// followed, inside the same lookup, by the best-effort write of the token's
// last_used_at; that UPDATE waits for the lock, the lookup takes the whole
// lookup timeout, and the request answers 503 after mysql.request_timeout,
// every time: the entry is cached with an expiry counted from the lookup's
// start, so it has expired when it is stored. Every read of every
// application fails for as long as writes are held, though MySQL serves
// reads. (README: last_used_at "is written at most once per
// auth.cache_ttl"; a bookkeeping write should not decide the answer to a
// read.)
//
// Found by review; now the last_used_at write goes on in the background
// past touchWait, and the cache entry is trusted from the answer.
func TestTokenReadsWorkWhileWritesAreHeld(t *testing.T) {
	t.Parallel()
	m := testenv.StartMariaDB(t) // private: FLUSH TABLES WITH READ LOCK is global
	e := env{DSN: m.DSNFor("review_ftwrl"), AMQP: testenv.AMQPURL(t), Exchange: testenv.Name("clock.ring.review-ftwrl.")}
	testenv.DeleteExchangeOnCleanup(t, e.AMQP, e.Exchange)
	const admin = "review-bootstrap-admin-token-0123456789"
	d := testenv.StartClockd(t, e.vars(map[string]string{
		"CLOCKD_AUTH_MODE": "tokens", "CLOCKD_ADMIN_TOKEN": admin,
		"CLOCKD_AUTH_CACHE_TTL": "1s", "CLOCKD_MYSQL_REQUEST_TIMEOUT": "3s",
	}))
	code, body, _ := authedDo(t, d, "POST", "/v1/tokens", admin, map[string]any{"application": "ft", "scopes": []string{"read", "write"}})
	if code != http.StatusCreated {
		t.Fatalf("create token: %d %s", code, body)
	}
	var tok struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal([]byte(body), &tok); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := authedDo(t, d, "POST", "/v1/clocks", tok.Token, map[string]any{
		"application": "ft", "business_id": "b1", "payload": "{}", "delay": "1h"}); code != http.StatusCreated {
		t.Fatalf("create clock: %d %s", code, body)
	}

	db, err := sql.Open("mysql", m.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lock, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(context.Background(), "FLUSH TABLES WITH READ LOCK"); err != nil {
		t.Fatal(err)
	}
	defer lock.ExecContext(context.Background(), "UNLOCK TABLES")
	time.Sleep(1500 * time.Millisecond) // the token's cache entry (1 s) has expired

	// reads work: the bootstrap admin token needs no lookup
	code, body, took := authedDo(t, d, "GET", clockPath("ft", "b1"), admin, nil)
	t.Logf("GET with the bootstrap admin token while writes are held: %d after %v", code, took.Round(time.Millisecond))
	if code != http.StatusOK {
		t.Fatalf("GET with the bootstrap admin token while writes are held: %d %s (reads should work)", code, body)
	}
	// and so should they with the application's own token
	bad := 0
	for i := range 4 {
		code, body, took := authedDo(t, d, "GET", clockPath("ft", "b1"), tok.Token, nil)
		t.Logf("GET %d with the application's token while writes are held: %d after %v %s", i, code, took.Round(time.Millisecond), body)
		if code != http.StatusOK || took > time.Second {
			bad++
		}
		time.Sleep(300 * time.Millisecond)
	}
	if bad > 0 {
		t.Errorf("%d of 4 GETs with a stored token answered other than 200 within 1 s while MySQL held writes only "+
			"(the same GET with the bootstrap token answered 200): the token lookup waits for its last_used_at write", bad)
	}
}
