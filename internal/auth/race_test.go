package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/auth"
)

// ctxStore is fakeStore whose lookups wait for a signal or for their ctx.
type ctxStore struct {
	*fakeStore
	started chan struct{}
	release chan struct{}
}

func (s *ctxStore) TokenByHash(ctx context.Context, h [32]byte) (auth.Token, error) {
	s.started <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
		return auth.Token{}, ctx.Err()
	}
	return s.fakeStore.TokenByHash(ctx, h)
}

// Concurrent requests with the same token share one store lookup. It ran
// with the context of the request that began it: when that client went
// away, every request waiting on the lookup failed too (a valid token
// answered 500 because another connection closed).
func TestSharedLookupOutlivesTheFirstCaller(t *testing.T) {
	st := &ctxStore{fakeStore: newFake(), started: make(chan struct{}, 10), release: make(chan struct{})}
	a := auth.New(st, auth.Config{Mode: auth.ModeTokens})
	_, secret, err := a.CreateToken(context.Background(), auth.NewToken{Application: "order", Scopes: []auth.Scope{auth.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	firstCtx, cancelFirst := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := a.Authenticate(firstCtx, "Bearer "+secret)
		first <- err
	}()
	<-st.started // the first request's lookup is in flight
	second := make(chan error, 1)
	go func() {
		_, err := a.Authenticate(context.Background(), "Bearer "+secret)
		second <- err
	}()
	time.Sleep(50 * time.Millisecond) // the second request joins the lookup
	cancelFirst()                     // the first client goes away
	<-first
	select {
	case <-st.started: // the second did a lookup of its own: fine
		close(st.release)
	case <-time.After(time.Second):
		close(st.release)
	}
	if err := <-second; err != nil {
		t.Fatalf("a request with a valid token and a live context failed because another request's client went away: %v", err)
	}
}

// slowLookupStore is fakeStore whose next TokenByHash reads the token, then
// waits (a MySQL round trip in flight) before it answers.
type slowLookupStore struct {
	*fakeStore
	read    chan struct{} // closed once the lookup has read the row
	release chan struct{} // the lookup answers once this is closed
	armed   bool
}

func (s *slowLookupStore) TokenByHash(ctx context.Context, h [32]byte) (auth.Token, error) {
	t, err := s.fakeStore.TokenByHash(ctx, h)
	if s.armed {
		s.armed = false
		close(s.read)
		<-s.release
	}
	return t, err
}

// A token revoked through an instance stops working there at once
// (README). A lookup of it already in flight when the revoke ran (it read
// the row before the UPDATE) stored its stale "valid" answer in the cache
// after the revoke cleared it: the token worked for a whole CacheTTL more.
func TestRevokeDuringALookupStopsTheTokenAtOnce(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	st := &slowLookupStore{fakeStore: newFake(), read: make(chan struct{}), release: make(chan struct{})}
	a := auth.New(st, auth.Config{Mode: auth.ModeTokens, CacheTTL: time.Minute, Now: func() time.Time { return now }})
	tok, secret, err := a.CreateToken(context.Background(), auth.NewToken{Application: "order", Scopes: []auth.Scope{auth.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	st.armed = true
	done := make(chan error, 1)
	go func() { // a request with the token, its lookup in flight
		_, err := a.Authenticate(context.Background(), "Bearer "+secret)
		done <- err
	}()
	<-st.read
	// The admin revokes it through this same instance meanwhile.
	if _, err := a.RevokeToken(context.Background(), tok.ID); err != nil {
		t.Fatal(err)
	}
	close(st.release)
	<-done // that request began before the revoke: either answer is fine for it
	// Every request that starts after the revoke answered must be refused.
	p, err := a.Authenticate(context.Background(), "Bearer "+secret)
	if err == nil {
		t.Fatalf("token %d revoked through this instance still authenticates as %+v after the revoke answered (until the cache TTL ends)", tok.ID, p)
	}
}
