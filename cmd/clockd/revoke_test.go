package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/clockd/clockd/client"
	"github.com/clockd/clockd/internal/testenv"
)

// SPEC: revoking a token stops it at once. A token used through instance B
// (so that B has it cached for auth.cache_ttl, 5 s) and revoked through
// instance A is refused by B on the very next request: A tells the others
// over the broker and answers once each live instance has acknowledged
// that it forgot the token. Before, B accepted it for up to 5 s.
func TestRevokedTokenStopsAtOnceOnEveryInstance(t *testing.T) {
	t.Parallel()
	_, b, adminA := tokenPair(t, newEnv(t), "5s")
	ctx := context.Background()
	// both instances' hint connections are up once a revocation is
	// acknowledged (answered well within the 1 s wait for a silent one)
	for start := time.Now(); ; {
		tok, err := adminA.CreateToken(ctx, client.NewToken{Application: "order", Scopes: []string{"read"}, Name: "warm-up"})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		if _, err := adminA.RevokeToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		if time.Since(at) < 500*time.Millisecond {
			break
		}
		if time.Since(start) > 15*time.Second {
			t.Fatal("no revocation acknowledged by the other instance within 15 s")
		}
	}
	for i := range 5 {
		tok, err := adminA.CreateToken(ctx, client.NewToken{Application: "order", Scopes: []string{"read"}, Name: fmt.Sprintf("t%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		viaB, err := client.New(b.URL, client.WithToken(tok.Secret))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := viaB.ListPage(ctx, client.Query{Application: "order"}); err != nil {
			t.Fatalf("token %d through B before its revocation: %v", i, err)
		}
		start := time.Now()
		if _, err := adminA.RevokeToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Errorf("revoke %d took %v: the other instance did not acknowledge it", i, took)
		}
		if _, err := viaB.ListPage(ctx, client.Query{Application: "order"}); !errors.Is(err, client.ErrUnauthenticated) {
			t.Fatalf("token %d through B right after its revocation through A: %v, want 401 at once (SPEC)", i, err)
		}
	}
}

// tokenPair starts two instances with tokens on, whose caches keep a
// token for cacheTTL, and returns them and an admin client of the first.
func tokenPair(t *testing.T, e env, cacheTTL string) (a, b *testenv.Clockd, adminA *client.Client) {
	t.Helper()
	const admin = "token-pair-admin-token-0123456789"
	vars := e.vars(map[string]string{"CLOCKD_AUTH_MODE": "tokens", "CLOCKD_ADMIN_TOKEN": admin, "CLOCKD_AUTH_CACHE_TTL": cacheTTL})
	a = testenv.StartClockd(t, vars)
	b = testenv.StartClockd(t, vars)
	adminA, err := client.New(a.URL, client.WithToken(admin))
	if err != nil {
		t.Fatal(err)
	}
	return a, b, adminA
}
