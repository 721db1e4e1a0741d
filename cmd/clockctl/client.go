package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// maxResponse bounds what clockctl reads of one answer.
const maxResponse = 64 << 20

// client calls the clockd REST API.
type client struct {
	base    string // scheme://host[:port][/prefix], no trailing slash
	timeout time.Duration
	http    *http.Client
	token   string // sent as Authorization: Bearer when not empty
}

// client returns the API client of the global flags: -addr, -timeout,
// -token and -cacert.
func (c *cli) client() (*client, error) {
	cl, err := newClient(c.addr, c.timeout)
	if err != nil {
		return nil, err
	}
	cl.token = strings.TrimSpace(c.token)
	if c.cacert != "" {
		pem, err := os.ReadFile(c.cacert)
		if err != nil {
			return nil, usagef("-cacert: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("-cacert %s: no PEM certificate in it", c.cacert)
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		cl.http = &http.Client{Transport: tr}
	}
	return cl, nil
}

func newClient(addr string, timeout time.Duration) (*client, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return nil, usagef("-addr is empty")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, usagef("-addr %q: %v", addr, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usagef("-addr %q: want http://host:port or https://host:port", addr)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, usagef("-addr %q: must not have a query or a fragment", addr)
	}
	return &client{
		base:    strings.TrimRight(u.String(), "/"),
		timeout: timeout,
		http:    &http.Client{},
	}, nil
}

// apiError is a non-2xx answer of clockd.
type apiError struct {
	Status  int
	Code    string // from the error body; empty when the body was not a SPEC error
	Message string
}

func (e *apiError) Error() string {
	if e.Code == "" {
		text := http.StatusText(e.Status)
		if e.Message == "" {
			return fmt.Sprintf("%d %s", e.Status, text)
		}
		return fmt.Sprintf("%d %s: %s", e.Status, text, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// clockPath returns the escaped path of one clock.
func clockPath(app, businessID string) string {
	return "/v1/clocks/" + url.PathEscape(app) + "/" + url.PathEscape(businessID)
}

// do sends one request (body marshalled as JSON when not nil) and returns the
// status and body of a 2xx answer, or an *apiError.
func (cl *client) do(ctx context.Context, method, path string, query url.Values, body any) (int, []byte, error) {
	if cl.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cl.timeout)
		defer cancel()
	}
	target := cl.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, target, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "clockctl")
	if cl.token != "" {
		req.Header.Set("Authorization", "Bearer "+cl.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, nil, fmt.Errorf("%s %s: no answer within %s (see -timeout)", method, target, cl.timeout)
		}
		return 0, nil, fmt.Errorf("%s %s: %w", method, target, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: read answer: %w", method, target, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ae := decodeError(resp.StatusCode, data)
		if resp.StatusCode == http.StatusUnauthorized && cl.token == "" {
			ae.Message += " (give a token with -token or CLOCKD_TOKEN)"
		}
		return resp.StatusCode, nil, ae
	}
	return resp.StatusCode, data, nil
}

// decodeError turns an error answer into an *apiError, using the SPEC error
// body when there is one and the (shortened) text of the body otherwise.
func decodeError(status int, data []byte) *apiError {
	var body struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &body) == nil && body.Error != nil && body.Error.Code != "" {
		return &apiError{Status: status, Code: body.Error.Code, Message: body.Error.Message}
	}
	msg := strings.Join(strings.Fields(string(data)), " ")
	if r := []rune(msg); len(r) > 300 {
		msg = string(r[:300]) + "..."
	}
	return &apiError{Status: status, Message: msg}
}
