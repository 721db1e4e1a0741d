package httpapi_test

// The concurrency cap covers token checks: a token not in the cache costs
// a MySQL lookup, and anyone can make up well-formed ones; past
// http.max_concurrent_requests checks under way, 503 at once, not a
// request held on a slow MySQL.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/httpapi"
	mysqlstore "github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
)

func TestConcurrencyCapCoversMadeUpTokens(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartProxy(t, cfg.Addr)
	cfg.Addr = proxy.Addr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := mysqlstore.Open(ctx, cfg.FormatDSN(), 32)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	log := slog.New(slog.DiscardHandler)
	if err := mysqlstore.Migrate(ctx, db, log); err != nil {
		t.Fatal(err)
	}
	shards, err := mysqlstore.SetupShards(ctx, db, testShards)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	store := mysqlstore.NewStore(db, mysqlstore.StoreConfig{Shards: shards, Logger: log, Registerer: reg})
	t.Cleanup(store.Close)
	st := mysqlstore.NewAuthStore(db)
	au := auth.New(st, auth.Config{Mode: auth.ModeTokens, AdminToken: bootstrapAdmin})
	const limit = 4
	h := httpapi.New(httpapi.Options{
		Service: alarm.NewService(store, nil, time.Now, alarm.Limits{}, 2*time.Second), Logger: log, Registerer: reg, Gatherer: reg,
		Auth:          au,
		MaxConcurrent: limit, DBTimeout: 2 * time.Second,
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	// a stored admin token, used once: in the cache
	_, known, err := au.CreateToken(ctx, auth.NewToken{Admin: true, Name: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	metrics := func() (int, time.Duration) {
		req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil) // needs no MySQL
		req.Header.Set("Authorization", "Bearer "+known)
		start := time.Now()
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			t.Errorf("GET /metrics: %v", err)
			return 0, 0
		}
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	if code, _ := metrics(); code != 200 {
		t.Fatalf("GET /metrics with a stored admin token: %d", code)
	}

	proxy.Stall() // MySQL slow: every lookup waits

	madeUp := func() string {
		var b [32]byte
		_, _ = rand.Read(b[:])
		return auth.SecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	}
	const n = 40
	var wg sync.WaitGroup
	// While made-up tokens hold every check slot, a known (cached) token
	// is still served at once: they do not crowd it out.
	wg.Go(func() {
		time.Sleep(300 * time.Millisecond)
		if code, took := metrics(); code != 200 || took > time.Second {
			t.Errorf("a cached admin token while made-up ones wait on MySQL: %d after %v, want 200 at once", code, took)
		}
	})
	var mu sync.Mutex
	held := 0
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", srv.URL+"/v1/clocks/order/o-1", nil)
			req.Header.Set("Authorization", "Bearer "+madeUp())
			start := time.Now()
			resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
			if err != nil {
				t.Errorf("GET: %v", err)
				return
			}
			resp.Body.Close()
			if time.Since(start) > time.Second {
				mu.Lock()
				held++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	proxy.Resume()
	if held > limit {
		t.Errorf("%d of %d requests with made-up tokens were held more than 1 s each, waiting on MySQL at once; "+
			"max_concurrent_requests is %d: the rest should have answered 503 at once", held, n, limit)
	}
}

// stallUnknown is a token store whose lookups of any token but one hang
// until release is closed: made-up tokens hold every check slot while
// the known token's own lookup would answer at once.
type stallUnknown struct {
	auth.Store
	known   [32]byte
	release chan struct{}
}

func (s *stallUnknown) TokenByHash(ctx context.Context, hash [32]byte) (auth.Token, error) {
	if hash != s.known {
		select {
		case <-s.release:
		case <-ctx.Done():
			return auth.Token{}, ctx.Err()
		}
	}
	return s.Store.TokenByHash(ctx, hash)
}

// A valid token whose cache entry has expired, while made-up tokens hold
// every check slot, is looked up again (found by review: it answered 503
// once per auth.cache_ttl under a flood of made-up tokens).
func TestMadeUpTokensDoNotCrowdOutKnownTokensPastTheirTTL(t *testing.T) {
	t.Parallel()
	var st *stallUnknown
	const ttl = 300 * time.Millisecond
	const limit = 4
	var au *auth.Authenticator
	e := newAPIDB(t, func(db *sqlx.DB, o *httpapi.Options) {
		st = &stallUnknown{Store: mysqlstore.NewAuthStore(db), release: make(chan struct{})}
		au = auth.New(st, auth.Config{Mode: auth.ModeTokens, AdminToken: bootstrapAdmin, CacheTTL: ttl})
		o.Auth = au
		o.MaxConcurrent = limit
	})
	defer close(st.release)
	tok, known, err := au.CreateToken(context.Background(), auth.NewToken{Admin: true, Name: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	st.known = sha256.Sum256([]byte(known))
	metrics := func() int {
		req, _ := http.NewRequest("GET", e.srv.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+known)
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := metrics(); code != http.StatusOK {
		t.Fatalf("GET /metrics with stored admin token %d: %d", tok.ID, code)
	}
	time.Sleep(2 * ttl) // its entry has expired; the token is as valid as ever

	for range 3 * limit {
		go func() {
			var b [32]byte
			_, _ = rand.Read(b[:])
			req, _ := http.NewRequest("GET", e.srv.URL+"/v1/clocks/order/o-1", nil)
			req.Header.Set("Authorization", "Bearer "+auth.SecretPrefix+base64.RawURLEncoding.EncodeToString(b[:]))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // every check slot holds a made-up token
	if code := metrics(); code != http.StatusOK {
		t.Errorf("a known valid token past its cache TTL, while made-up tokens hold every check slot: %d, want 200", code)
	}
}
