// Package auth decides who may do what: API tokens (per application, with
// scopes, or of the admin kind), the principal a request acts as, and the
// per-application quotas. The HTTP layer asks it; it asks its Store (MySQL)
// and caches the answers, so that a request with a known token costs a hash
// and a map lookup, not a round trip.
package auth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/clockd/clockd/internal/alarm"
)

// Errors that callers tell apart with errors.Is.
var (
	// ErrUnauthenticated: no token, or not a valid one (401).
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrPermissionDenied: a valid token that may not do this (403).
	ErrPermissionDenied = errors.New("permission denied")
	// ErrResourceExhausted: over a quota (429); see QuotaError.
	ErrResourceExhausted = errors.New("resource exhausted")
)

// Mode is how requests are authenticated.
type Mode string

// The modes.
const (
	ModeOff    Mode = "off"    // every call works without a token
	ModeTokens Mode = "tokens" // every call under /v1 and /metrics needs a token
)

// Scope is what an application token may do with its application's clocks.
type Scope string

// The scopes.
const (
	ScopeRead  Scope = "read"  // get and list
	ScopeWrite Scope = "write" // create, batch, cancel, reschedule, replay
)

// Valid reports whether s is a known scope.
func (s Scope) Valid() bool { return s == ScopeRead || s == ScopeWrite }

// Token is a stored API token (never its secret).
type Token struct {
	ID          int64
	Application string // empty for the admin kind
	Admin       bool
	Scopes      []Scope
	Name        string
	Prefix      string // first characters of the secret
	CreatedAt   time.Time
	LastUsedAt  time.Time // zero: never used
	RevokedAt   time.Time // zero: works
}

// Has reports whether the token carries scope s.
func (t Token) Has(s Scope) bool { return slices.Contains(t.Scopes, s) }

// NewToken is what a token is created for.
type NewToken struct {
	Application string
	Admin       bool
	Scopes      []Scope
	Name        string
}

// Check validates a token request; errors match alarm.ErrInvalid and name
// the field.
func (n NewToken) Check() error {
	if n.Admin {
		if n.Application != "" {
			return invalid("application", "must not be given with admin: an admin token is for every application")
		}
		if len(n.Scopes) > 0 {
			return invalid("scopes", "must not be given with admin: an admin token may do everything")
		}
	} else {
		if n.Application == "" {
			return invalid("application", "is required (or admin: true for an admin token)")
		}
		if err := alarm.CheckApplication(n.Application); err != nil {
			return err
		}
		if len(n.Scopes) == 0 {
			return invalid("scopes", `is required: ["read"], ["write"] or ["read","write"]`)
		}
		for i, s := range n.Scopes {
			if !s.Valid() {
				return invalid("scopes", "%q is not a scope (read, write)", s)
			}
			if slices.Contains(n.Scopes[:i], s) {
				return invalid("scopes", "%q is given twice", s)
			}
		}
	}
	if len(n.Name) > 255 {
		return invalid("name", "is longer than 255 bytes")
	}
	// a name is shown in terminals (clockctl token list) and the console:
	// no control characters, which could rewrite what they show
	for i, r := range n.Name {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return invalid("name", "has a control character or invalid UTF-8 at byte %d", i)
		}
	}
	return nil
}

func invalid(field, format string, args ...any) error {
	return &alarm.FieldError{Field: field, Message: fmt.Sprintf(format, args...), Kind: alarm.ErrInvalid}
}

// Principal is who a request acts as.
type Principal struct {
	TokenID     int64 // 0 for the bootstrap admin token and with auth off
	Application string
	Admin       bool
	Scopes      []Scope
}

// Anyone is the principal of every request while auth is off.
var Anyone = Principal{Admin: true}

// Allow says whether p may use scope s on application app's clocks: nil or
// an error matching ErrPermissionDenied. The answer does not depend on
// whether any clock exists.
func (p Principal) Allow(app string, s Scope) error {
	if p.Admin {
		return nil
	}
	if app != p.Application {
		return fmt.Errorf("%w: token %d is for application %q, not %q", ErrPermissionDenied, p.TokenID, p.Application, app)
	}
	if !slices.Contains(p.Scopes, s) {
		return fmt.Errorf("%w: token %d lacks the %s scope", ErrPermissionDenied, p.TokenID, s)
	}
	return nil
}

// AllowScope is Allow before the application is known (a body still to be
// read): it refuses a token without scope s early.
func (p Principal) AllowScope(s Scope) error {
	if p.Admin || slices.Contains(p.Scopes, s) {
		return nil
	}
	return fmt.Errorf("%w: token %d lacks the %s scope", ErrPermissionDenied, p.TokenID, s)
}

// RequireAdmin refuses every principal but the admin kind.
func (p Principal) RequireAdmin() error {
	if p.Admin {
		return nil
	}
	return fmt.Errorf("%w: this call needs a token of the admin kind", ErrPermissionDenied)
}

// Quota is an application's limits; 0 means no limit.
type Quota struct {
	Application      string
	MaxLiveClocks    int
	CreatesPerSecond int
	MaxPayloadBytes  int
	UpdatedAt        time.Time // zero: never set
}

// None reports whether q limits nothing.
func (q Quota) None() bool {
	return q.MaxLiveClocks == 0 && q.CreatesPerSecond == 0 && q.MaxPayloadBytes == 0
}

// MaxQuotaValue is the largest value of a quota field (INT UNSIGNED).
const MaxQuotaValue = 1<<32 - 1

// Check validates a quota; errors name the field.
func (q Quota) Check() error {
	if err := alarm.CheckApplication(q.Application); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"max_live_clocks", q.MaxLiveClocks}, {"creates_per_second", q.CreatesPerSecond}, {"max_payload_bytes", q.MaxPayloadBytes}} {
		if f.v < 0 || f.v > MaxQuotaValue {
			return invalid(f.name, "must be between 0 (no limit) and %d, got %d", MaxQuotaValue, f.v)
		}
	}
	return nil
}

// QuotaError is a refusal for a quota. It matches ErrResourceExhausted.
type QuotaError struct {
	Application string
	Quota       string // the quota field
	RetryAfter  time.Duration
	Message     string
}

func (e *QuotaError) Error() string { return e.Message }

// Is makes errors.Is(err, ErrResourceExhausted) work.
func (e *QuotaError) Is(target error) bool { return target == ErrResourceExhausted }

// Store keeps tokens and quotas. Implementations map "no such row" to
// alarm.ErrNotFound and unreachable databases to alarm.ErrUnavailable.
type Store interface {
	// CreateToken stores t with the hash of its secret and returns it with
	// its id.
	CreateToken(ctx context.Context, t Token, hash [32]byte) (Token, error)
	// ListTokens lists tokens, of one application when app is not empty.
	ListTokens(ctx context.Context, app string) ([]Token, error)
	// RevokeToken marks a token revoked (again: unchanged) and returns it.
	RevokeToken(ctx context.Context, id int64, now time.Time) (Token, error)
	// TokenByHash finds the token whose secret has this hash, revoked or not.
	TokenByHash(ctx context.Context, hash [32]byte) (Token, error)
	// TouchToken records that a token was used at the given time.
	TouchToken(ctx context.Context, id int64, at time.Time) error
	// Quota reads an application's quota: the zero Quota when none is set.
	Quota(ctx context.Context, app string) (Quota, error)
	SetQuota(ctx context.Context, q Quota, now time.Time) (Quota, error)
	// LiveClocks counts an application's pending and firing clocks.
	LiveClocks(ctx context.Context, app string) (int, error)
}

// ParseMode reads a mode; "" is not a mode (the caller picks the default).
func ParseMode(s string) (Mode, error) {
	switch Mode(strings.ToLower(strings.TrimSpace(s))) {
	case ModeOff:
		return ModeOff, nil
	case ModeTokens:
		return ModeTokens, nil
	}
	return "", fmt.Errorf("must be off or tokens, got %q", s)
}
