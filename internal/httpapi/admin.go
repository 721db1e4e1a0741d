package httpapi

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"

	"github.com/clockd/clockd/internal/auth"
)

// Token is the JSON of an API token. Secret is set only in the answer that
// created it.
type Token struct {
	ID          int64    `json:"id"`
	Secret      string   `json:"token,omitempty"`
	Application *string  `json:"application"` // null for the admin kind
	Admin       bool     `json:"admin"`
	Scopes      []string `json:"scopes"`
	Name        string   `json:"name"`
	Prefix      string   `json:"prefix"`
	CreatedAt   string   `json:"created_at"`
	LastUsedAt  *string  `json:"last_used_at"`
	RevokedAt   *string  `json:"revoked_at"`
}

// TokenJSON converts a token to its JSON form (without its secret).
func TokenJSON(t auth.Token) Token {
	out := Token{ID: t.ID, Application: optString(t.Application), Admin: t.Admin, Scopes: []string{},
		Name: t.Name, Prefix: t.Prefix, CreatedAt: fmtTime(t.CreatedAt), LastUsedAt: optTime(t.LastUsedAt),
		RevokedAt: optTime(t.RevokedAt)}
	for _, s := range t.Scopes {
		out.Scopes = append(out.Scopes, string(s))
	}
	return out
}

// Quota is the JSON of an application's quota; 0 means no limit.
type Quota struct {
	Application      string  `json:"application"`
	MaxLiveClocks    int     `json:"max_live_clocks"`
	CreatesPerSecond int     `json:"creates_per_second"`
	MaxPayloadBytes  int     `json:"max_payload_bytes"`
	UpdatedAt        *string `json:"updated_at"` // null: never set
}

// QuotaJSON converts a quota to its JSON form.
func QuotaJSON(q auth.Quota) Quota {
	return Quota{Application: q.Application, MaxLiveClocks: q.MaxLiveClocks, CreatesPerSecond: q.CreatesPerSecond,
		MaxPayloadBytes: q.MaxPayloadBytes, UpdatedAt: optTime(q.UpdatedAt)}
}

// decodeFields reads a JSON object whose keys must be among fields (exact
// spelling, each once) and unmarshals each value into its destination.
// With whole (what to say when one is missing), every key must be there,
// and not null.
func decodeFields(data []byte, fields map[string]any, whole string) error {
	raw := map[string]*json.RawMessage{}
	for k := range fields {
		raw[k] = new(json.RawMessage)
	}
	if err := decodeObject(data, func(k string) *json.RawMessage { return raw[k] }); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if v := *raw[k]; whole != "" && (v == nil || isNull(v)) {
			return badField(k, "missing; %s", whole)
		}
	}
	for k, dst := range fields {
		v := *raw[k]
		if v == nil || isNull(v) {
			continue
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return badField(k, "has the wrong type: %s", jsonKind(v))
		}
		// json.Unmarshal turns text that is not UTF-8 into U+FFFD
		// silently: refused instead, as in the fields of a clock.
		if err := checkText(k, v); err != nil {
			return err
		}
	}
	return nil
}

// checkText refuses a string, or a string in an array, that is not valid
// UTF-8 text (see jsonString). v is one value of valid JSON.
func checkText(field string, v json.RawMessage) error {
	var items []json.RawMessage
	if json.Unmarshal(v, &items) != nil {
		items = []json.RawMessage{v}
	}
	for _, item := range items {
		if _, ok, valid := jsonString(item); ok && !valid {
			return notUTF8(field)
		}
	}
	return nil
}

func (a *api) createToken(w http.ResponseWriter, r *http.Request) {
	data, err := a.body(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var n auth.NewToken
	var scopes []string
	if err := decodeFields(data, map[string]any{"application": &n.Application, "admin": &n.Admin, "scopes": &scopes, "name": &n.Name}, ""); err != nil {
		a.fail(w, r, err)
		return
	}
	for _, s := range scopes {
		n.Scopes = append(n.Scopes, auth.Scope(s))
	}
	ctx, cancel := a.bounded(r)
	defer cancel()
	t, secret, err := a.auth.CreateToken(ctx, n)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.log.Info("token created", "token", t.ID, "application", t.Application, "admin", t.Admin, "request_id", requestIDOf(r))
	out := TokenJSON(t)
	out.Secret = secret
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, out)
}

func (a *api) listTokens(w http.ResponseWriter, r *http.Request) {
	qs, err := queryParams(r, "application")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ctx, cancel := a.bounded(r)
	defer cancel()
	ts, err := a.auth.ListTokens(ctx, qs["application"])
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := struct {
		Tokens []Token `json:"tokens"`
	}{Tokens: make([]Token, len(ts))}
	for i, t := range ts {
		out.Tokens[i] = TokenJSON(t)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) revokeToken(w http.ResponseWriter, r *http.Request) {
	id, err := parseDecimal(r.PathValue("id"))
	if err != nil || id <= 0 {
		a.fail(w, r, badField("id", "%q is not a token id", r.PathValue("id")))
		return
	}
	ctx, cancel := a.bounded(r)
	defer cancel()
	t, err := a.auth.RevokeToken(ctx, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.log.Info("token revoked", "token", t.ID, "application", t.Application, "request_id", requestIDOf(r))
	writeJSON(w, http.StatusOK, TokenJSON(t))
}

func (a *api) getQuota(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.bounded(r)
	defer cancel()
	q, err := a.quotas.Get(ctx, r.PathValue("application"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, QuotaJSON(q))
}

func (a *api) setQuota(w http.ResponseWriter, r *http.Request) {
	data, err := a.body(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	q := auth.Quota{Application: r.PathValue("application")}
	if err := decodeFields(data, map[string]any{"max_live_clocks": &q.MaxLiveClocks,
		"creates_per_second": &q.CreatesPerSecond, "max_payload_bytes": &q.MaxPayloadBytes},
		// a field left out or null would lift its limit (0) unsaid (found by review)
		"a PUT sets the whole quota, each of max_live_clocks, creates_per_second and max_payload_bytes (0 = no limit); "+
			"GET it first to keep the limits you do not change"); err != nil {
		a.fail(w, r, err)
		return
	}
	ctx, cancel := a.bounded(r)
	defer cancel()
	q, err = a.quotas.Set(ctx, q)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.log.Info("quota set", "application", q.Application, "max_live_clocks", q.MaxLiveClocks,
		"creates_per_second", q.CreatesPerSecond, "max_payload_bytes", q.MaxPayloadBytes, "request_id", requestIDOf(r))
	writeJSON(w, http.StatusOK, QuotaJSON(q))
}
