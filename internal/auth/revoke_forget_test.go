package auth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/auth"
)

// A request that reaches instance B after the revocation through A was
// answered (so after B's Forget) must not join a lookup of the same token
// that B began before the revocation (requests share lookups): its answer
// read the token as valid. Before, it did, and the token worked on B
// although Forget had run (found by the review of this change).
func TestRequestAfterForgetDoesNotJoinALookupBeganBefore(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	st := &slowLookupStore{fakeStore: newFake(), read: make(chan struct{}), release: make(chan struct{})}
	clk := func() time.Time { return now }
	var b *auth.Authenticator
	a := auth.New(st, auth.Config{Mode: auth.ModeTokens, CacheTTL: time.Minute, Now: clk,
		OnRevoke: func(_ context.Context, id int64) { b.Forget(id) }})
	b = auth.New(st, auth.Config{Mode: auth.ModeTokens, CacheTTL: time.Minute, Now: clk})
	tok, secret, err := a.CreateToken(context.Background(), auth.NewToken{Application: "order", Scopes: []auth.Scope{auth.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	st.armed = true
	first := make(chan error, 1)
	go func() { // a request on B: its lookup has read the row (valid) and is in flight
		_, err := b.Authenticate(context.Background(), "Bearer "+secret)
		first <- err
	}()
	<-st.read
	if _, err := a.RevokeToken(context.Background(), tok.ID); err != nil { // told to B: B forgot it
		t.Fatal(err)
	}
	// the revocation has been answered: a request sent to B now must fail
	second := make(chan error, 1)
	go func() {
		_, err := b.Authenticate(context.Background(), "Bearer "+secret)
		second <- err
	}()
	time.Sleep(50 * time.Millisecond) // it joins the lookup in flight
	close(st.release)
	<-first // began before the revocation: either answer is fine
	if err := <-second; !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("request to B begun after the revocation of token %d was answered (and after B's Forget): err %v, want unauthenticated", tok.ID, err)
	}
}

// A revocation this instance was not told of (it missed the word: its
// queue was unbound from the tokens exchange) stops the token at its next
// use once ForgetAll ran, not when the cache entry expires.
func TestForgetAllAsksAgainForEveryToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, clk := newFake(), &clock{t: time.Unix(1e9, 0)}
	a := auth.New(st, auth.Config{Mode: auth.ModeTokens, CacheTTL: time.Minute, Now: clk.now})
	tok, secret, err := a.CreateToken(ctx, auth.NewToken{Application: "order", Scopes: []auth.Scope{auth.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+secret); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RevokeToken(ctx, tok.ID, clk.now()); err != nil { // elsewhere, untold
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+secret); err != nil {
		t.Fatalf("cached, before ForgetAll: %v, want it still accepted (the cache is trusted)", err)
	}
	a.ForgetAll()
	if _, err := a.Authenticate(ctx, "Bearer "+secret); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("after ForgetAll: %v, want unauthenticated", err)
	}
}
