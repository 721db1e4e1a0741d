package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/clockd/clockd/client"
)

// api is the clockd client of one invocation: the client package (its
// transport, token, CA, retries and errors) with clockctl's -timeout per
// request and clockctl's hints in its errors.
type api struct {
	cl       *client.Client
	timeout  time.Duration
	hasToken bool
}

// client returns the API client of the global flags: -addr, -timeout,
// -token and -cacert.
func (c *cli) client() (*api, error) {
	if strings.TrimSpace(c.addr) == "" {
		return nil, usagef("-addr is empty")
	}
	token := strings.TrimSpace(c.token)
	opts := []client.Option{client.WithToken(token), client.WithUserAgent("clockctl")}
	if c.cacert != "" {
		pem, err := os.ReadFile(c.cacert)
		if err != nil {
			return nil, usagef("-cacert: %v", err)
		}
		opts = append(opts, client.WithCACert(pem))
	}
	cl, err := client.New(c.addr, opts...)
	if err != nil {
		return nil, usagef("-addr %q or -cacert %q: %v", c.addr, c.cacert, strings.TrimPrefix(err.Error(), "client: "))
	}
	return &api{cl: cl, timeout: c.timeout, hasToken: token != ""}, nil
}

// do sends one request and returns the status and the JSON of a 2xx
// answer as clockd wrote it (clockctl prints it as it is), or an error
// (a *client.Error for an answer of clockd).
func (a *api) do(ctx context.Context, method, path string, query url.Values, body any) (int, []byte, error) {
	if a.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.timeout)
		defer cancel()
	}
	status, data, err := a.cl.Do(ctx, method, path, query, body)
	if err != nil {
		var ce *client.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil && method == http.MethodGet:
			return status, nil, fmt.Errorf("%s %s: no answer within %s (see -timeout)", method, path, a.timeout)
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
			// A change cut after it was sent may have been applied: a bare
			// "no answer" reads as "nothing happened" and invites a blind
			// retry (a second reschedule, a second token).
			return status, nil, fmt.Errorf("%s %s: no answer within %s (see -timeout): outcome unknown, clockd may have applied it; %s before retrying",
				method, path, a.timeout, checkHint(path))
		case errors.As(err, &ce) && ce.Status == http.StatusUnauthorized && !a.hasToken:
			return status, nil, fmt.Errorf("%w (give a token with -token or CLOCKD_TOKEN)", answerError{ce})
		case errors.As(err, &ce):
			return status, nil, answerError{ce}
		}
		return status, nil, err
	}
	return status, data, nil
}

// checkHint says how to learn whether a change to path was applied.
func checkHint(path string) string {
	switch {
	case strings.HasPrefix(path, "/v1/clocks"):
		return "read the clock (clockctl get)"
	case strings.HasPrefix(path, "/v1/tokens"):
		return "list the tokens (clockctl token list)"
	case strings.HasPrefix(path, "/v1/applications/"):
		return "read the quota (clockctl quota)"
	}
	return "check it"
}

// answerError is an error answer of clockd as clockctl prints it: its
// message said once. clockd's messages are chains of wrapped errors that
// can repeat themselves ("unauthenticated: unauthenticated: no token",
// "pause clock a/b: clock a/b: not found"). errors.As and errors.Is still
// find the *client.Error.
type answerError struct{ ce *client.Error }

func (e answerError) Error() string {
	if e.ce.Code == "" { // not clockd's error body (a proxy's page): as it came
		return e.ce.Error()
	}
	c := *e.ce
	c.Message = sayOnce(c.Code, c.Message)
	return c.Error()
}

func (e answerError) Unwrap() error { return e.ce }

// sayOnce drops what a message of code repeats: a leading "code: " (the
// code is printed before it), and a part of the chain that the text before
// it ends with ("pause clock a/b: clock a/b: not found" is "pause clock
// a/b: not found"). Only repeated text goes, so nothing is lost.
func sayOnce(code, msg string) string {
	for _, lead := range []string{code + ": ", strings.ReplaceAll(code, "_", " ") + ": "} {
		if len(msg) > len(lead) && strings.EqualFold(msg[:len(lead)], lead) {
			msg = msg[len(lead):]
			break
		}
	}
	for changed := true; changed; {
		changed = false
		var seps []int // where each ": " is
		for i := 0; ; {
			k := strings.Index(msg[i:], ": ")
			if k < 0 {
				break
			}
			seps = append(seps, i+k)
			i += k + 2
		}
	search:
		for a, i := range seps {
			for _, j := range seps[a+1:] {
				before, part := msg[:i], msg[i+2:j]
				if part != "" && (before == part || strings.HasSuffix(before, " "+part)) {
					msg = before + msg[j:]
					changed = true
					break search
				}
			}
		}
	}
	return msg
}

// clockPath returns the escaped path of one clock.
func clockPath(app, businessID string) string {
	return "/v1/clocks/" + url.PathEscape(app) + "/" + url.PathEscape(businessID)
}
