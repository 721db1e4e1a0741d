package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Token is an API token as clockd lists it. Secret is set only in the
// answer of CreateToken: clockd keeps only its hash.
type Token struct {
	ID          int64
	Secret      string
	Application string // empty for the admin kind
	Admin       bool
	Scopes      []string // "read", "write"
	Name        string
	Prefix      string // the first characters of the secret, to recognise it
	CreatedAt   time.Time
	LastUsedAt  time.Time // zero: never used
	RevokedAt   time.Time // zero: not revoked
}

// NewToken is what CreateToken makes: a token of the admin kind, or of
// one application with scopes.
type NewToken struct {
	Admin       bool
	Application string
	Scopes      []string
	Name        string
}

type wireToken struct {
	ID          int64    `json:"id"`
	Secret      string   `json:"token,omitempty"`
	Application *string  `json:"application"`
	Admin       bool     `json:"admin"`
	Scopes      []string `json:"scopes"`
	Name        string   `json:"name"`
	Prefix      string   `json:"prefix"`
	CreatedAt   *string  `json:"created_at"`
	LastUsedAt  *string  `json:"last_used_at"`
	RevokedAt   *string  `json:"revoked_at"`
}

// UnmarshalJSON reads a token in the API's JSON form.
func (t *Token) UnmarshalJSON(data []byte) error {
	var w wireToken
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	out := Token{ID: w.ID, Secret: w.Secret, Admin: w.Admin, Scopes: w.Scopes, Name: w.Name, Prefix: w.Prefix}
	if w.Application != nil {
		out.Application = *w.Application
	}
	var err error
	for _, f := range []struct {
		dst *time.Time
		src *string
	}{{&out.CreatedAt, w.CreatedAt}, {&out.LastUsedAt, w.LastUsedAt}, {&out.RevokedAt, w.RevokedAt}} {
		if *f.dst, err = parseOpt(f.src); err != nil {
			return err
		}
	}
	*t = out
	return nil
}

// MarshalJSON writes a token in the API's JSON form.
func (t Token) MarshalJSON() ([]byte, error) {
	w := wireToken{ID: t.ID, Secret: t.Secret, Admin: t.Admin, Scopes: t.Scopes, Name: t.Name, Prefix: t.Prefix,
		CreatedAt: optTime(t.CreatedAt), LastUsedAt: optTime(t.LastUsedAt), RevokedAt: optTime(t.RevokedAt)}
	if w.Scopes == nil {
		w.Scopes = []string{}
	}
	if !t.Admin {
		w.Application = &t.Application
	}
	return json.Marshal(w)
}

// CreateToken makes an API token (admin token needed); the answer carries
// its Secret, shown only this once. Not retried: a repeat would make a
// second token.
func (c *Client) CreateToken(ctx context.Context, n NewToken) (Token, error) {
	body := map[string]any{}
	if n.Admin {
		body["admin"] = true
	} else {
		body["application"], body["scopes"] = n.Application, n.Scopes
	}
	if n.Name != "" {
		body["name"] = n.Name
	}
	var t Token
	_, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/tokens", body: body}, &t)
	return t, err
}

// Tokens lists the API tokens, of one application when it is not empty
// (admin token needed; never the secrets). Retried.
func (c *Client) Tokens(ctx context.Context, application string) ([]Token, error) {
	q := url.Values{}
	if application != "" {
		q.Set("application", application)
	}
	var ans struct {
		Tokens []Token `json:"tokens"`
	}
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/tokens", query: q, retry: true}, &ans)
	return ans.Tokens, err
}

// RevokeToken stops a token at once, on every instance the broker reaches
// (within auth.cache_ttl on one it does not). Not retried.
func (c *Client) RevokeToken(ctx context.Context, id int64) (Token, error) {
	var t Token
	_, err := c.do(ctx, call{method: http.MethodDelete, path: "/v1/tokens/" + strconv.FormatInt(id, 10)}, &t)
	return t, err
}

// Quota is an application's quota; 0 means no limit.
type Quota struct {
	Application      string  `json:"application"`
	MaxLiveClocks    int     `json:"max_live_clocks"`
	CreatesPerSecond int     `json:"creates_per_second"`
	MaxPayloadBytes  int     `json:"max_payload_bytes"`
	UpdatedAt        *string `json:"updated_at,omitempty"` // null: never set
}

// Quota reads an application's quota (admin token needed). Retried.
func (c *Client) Quota(ctx context.Context, application string) (Quota, error) {
	var q Quota
	_, err := c.do(ctx, call{method: http.MethodGet, path: quotaPath(application), retry: true}, &q)
	return q, err
}

// SetQuota replaces an application's quota (admin token needed). Retried:
// setting the same quota twice is setting it once.
func (c *Client) SetQuota(ctx context.Context, q Quota) (Quota, error) {
	body := map[string]int{"max_live_clocks": q.MaxLiveClocks, "creates_per_second": q.CreatesPerSecond,
		"max_payload_bytes": q.MaxPayloadBytes}
	var out Quota
	_, err := c.do(ctx, call{method: http.MethodPut, path: quotaPath(q.Application), body: body, retry: true}, &out)
	return out, err
}

func quotaPath(app string) string { return "/v1/applications/" + url.PathEscape(app) + "/quota" }

// Cluster returns the answer of GET /v1/cluster (instances, their shards
// and leases) as raw JSON (admin token needed). Retried.
func (c *Client) Cluster(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	_, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/cluster", retry: true}, &raw)
	return raw, err
}
