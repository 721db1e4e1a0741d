package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/clockd/clockd/client"
)

// TestAttemptTimeoutIsNotTheContextsDeadline: an attempt cut by
// Retry.Timeout is a network error (ErrUnavailable, outcome unknown for a
// change), and a call whose own context never ended does not match
// context.DeadlineExceeded: the package doc reserves the context's error
// for a context that ended, and a caller that stops its work when its
// deadline passed would otherwise stop for a slow server. It holds for a
// read (Get) and a change (Cancel).
func TestAttemptTimeoutIsNotTheContextsDeadline(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, client.WithRetry(client.Retry{Attempts: 1, Timeout: 100 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = c.Get(ctx, "order", "o-1")
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Get cut by Retry.Timeout: %v, want ErrUnavailable", err)
	}
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get cut by Retry.Timeout (its context never ended) matches context.DeadlineExceeded: %v", err)
	}
	_, err = c.Cancel(ctx, "order", "o-1")
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Cancel cut by Retry.Timeout: %v, want ErrUnavailable", err)
	}
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Cancel cut by Retry.Timeout (its context never ended) matches context.DeadlineExceeded: %v", err)
	}
}

// TestHTTPClientTimeoutIsNotTheContextsDeadline: the same holds for an
// attempt cut by the Timeout of the http.Client given with WithHTTPClient,
// whose error net/http makes match context.DeadlineExceeded.
func TestHTTPClientTimeoutIsNotTheContextsDeadline(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, client.WithRetry(client.Retry{Attempts: 1}),
		client.WithHTTPClient(&http.Client{Timeout: 100 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(context.Background(), "order", "o-1")
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Get cut by http.Client.Timeout: %v, want ErrUnavailable", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get cut by http.Client.Timeout (its context never ended) matches context.DeadlineExceeded: %v", err)
	}
}
