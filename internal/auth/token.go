package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// SecretPrefix starts every token secret, so that secrets are easy to
// recognise (in a leaked log, by a secret scanner).
const SecretPrefix = "clk_"

// prefixLen is how much of a secret is stored in the clear to tell tokens
// apart: "clk_" and 6 of its 43 random characters.
const prefixLen = len(SecretPrefix) + 6

// DefaultCacheTTL is how long a token lookup is trusted without asking the
// store again: the bound on how long a token revoked through another
// instance keeps working here.
const DefaultCacheTTL = 5 * time.Second

// maxCached bounds the cache; past it the cache starts afresh.
const maxCached = 100_000

// Config configures an Authenticator.
type Config struct {
	Mode Mode
	// AdminToken, when not empty, is accepted as a token of the admin kind.
	AdminToken string
	// CacheTTL: see DefaultCacheTTL.
	CacheTTL time.Duration
	Now      func() time.Time
	Logger   *slog.Logger
	// OnRevoke, when set, is called after a revocation through this
	// instance, before RevokeToken returns, to tell the other instances
	// (clockd: a broadcast over the broker, whose receivers call Forget):
	// the token then stops working everywhere at once, and within CacheTTL
	// where the word did not arrive.
	OnRevoke func(ctx context.Context, id int64)
}

// Authenticator turns a request's bearer token into a Principal and manages
// tokens. Lookups are cached (hits and misses) for CacheTTL; revoking through
// this instance drops the token from its cache at once.
type Authenticator struct {
	store     Store
	mode      Mode
	adminHash []byte
	ttl       time.Duration
	now       func() time.Time
	log       *slog.Logger
	onRevoke  func(ctx context.Context, id int64)

	mu      sync.RWMutex
	cache   map[[32]byte]cached
	revokes uint64 // revocations through this instance (under mu): a lookup begun before one is not cached
	// touching: tokens whose last_used_at is being written (under mu)
	touching map[int64]bool

	flight group
}

// lookupTimeout bounds a token lookup, which runs apart from the request
// that began it: requests with the same token share it, and one client
// going away must not fail the others.
const lookupTimeout = 5 * time.Second

// touchWait is how long a lookup waits for its token's last_used_at to be
// written: the write goes on in the background past it. A bookkeeping
// write must not decide the answer of a request MySQL can serve (found by
// review: with writes held, FLUSH TABLES WITH READ LOCK during a backup,
// every request with a token not in the cache answered 503 or waited).
const touchWait = 100 * time.Millisecond

// secretLen is the length of every secret NewSecret makes.
var secretLen = len(SecretPrefix) + base64.RawURLEncoding.EncodedLen(32)

// wellFormed reports whether s can be a secret NewSecret made: anything
// else is refused without asking the store (a request with a made-up
// token must not cost a query, nor fill the cache).
func wellFormed(s string) bool {
	rest, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok || len(s) != secretLen {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(rest)
	return err == nil
}

// staleGrace is how long past its cache TTL a valid token's entry is
// still taken while MySQL cannot be reached, by a caller that asked
// (StaleOK).
const staleGrace = time.Hour

type cached struct {
	tok     Token
	ok      bool // false: no such token, or revoked
	expires time.Time
}

// New returns an authenticator over store.
func New(store Store, cfg Config) *Authenticator {
	if cfg.Mode == "" {
		cfg.Mode = ModeTokens
	}
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	a := &Authenticator{store: store, mode: cfg.Mode, ttl: cfg.CacheTTL, now: cfg.Now, log: cfg.Logger,
		onRevoke: cfg.OnRevoke, cache: map[[32]byte]cached{}, touching: map[int64]bool{}}
	if cfg.AdminToken != "" {
		h := sha256.Sum256([]byte(cfg.AdminToken))
		a.adminHash = h[:]
	}
	return a
}

// Mode is the mode in force.
func (a *Authenticator) Mode() Mode { return a.mode }

// NewSecret returns a fresh token secret and its hash: 32 random bytes,
// base64url, after SecretPrefix.
func NewSecret() (string, [32]byte) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported systems
	}
	s := SecretPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return s, sha256.Sum256([]byte(s))
}

// bearer extracts the token of an Authorization header.
func bearer(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// Authenticate returns the principal of a request given its Authorization
// header. With auth off everyone is Anyone. Errors match ErrUnauthenticated,
// or alarm.ErrUnavailable when the store could not be asked.
func (a *Authenticator) Authenticate(ctx context.Context, header string) (Principal, error) {
	if a.mode == ModeOff {
		return Anyone, nil
	}
	if header == "" {
		return Principal{}, fmt.Errorf("%w: this call needs an Authorization: Bearer <token> header", ErrUnauthenticated)
	}
	secret, ok := bearer(header)
	if !ok {
		return Principal{}, fmt.Errorf("%w: the Authorization header must be \"Bearer <token>\"", ErrUnauthenticated)
	}
	hash := sha256.Sum256([]byte(secret))
	if a.adminHash != nil && subtle.ConstantTimeCompare(hash[:], a.adminHash) == 1 {
		return Principal{Admin: true}, nil
	}
	if !wellFormed(secret) {
		return Principal{}, fmt.Errorf("%w: the token is not valid (unknown or revoked)", ErrUnauthenticated)
	}
	return a.byHash(ctx, hash)
}

// AuthenticateHash is Authenticate for a token known by its SHA-256 hash
// only (a console session keeps the hash of the token it was opened with,
// never the token): the bootstrap admin token while it is configured, or a
// stored token, not revoked.
func (a *Authenticator) AuthenticateHash(ctx context.Context, hash [32]byte) (Principal, error) {
	if a.mode == ModeOff {
		return Anyone, nil
	}
	if a.adminHash != nil && subtle.ConstantTimeCompare(hash[:], a.adminHash) == 1 {
		return Principal{Admin: true}, nil
	}
	return a.byHash(ctx, hash)
}

// ErrNeedsLookup: the token is not in the cache, and the context (see
// CachedOnly) allows no lookup in the store.
var ErrNeedsLookup = errors.New("the token needs a lookup")

type cachedOnlyKey struct{}

type staleOKKey struct{}

// StaleOK is ctx for an Authenticate that, while the store cannot be
// reached, takes a token found valid within staleGrace though its cache
// entry expired: for reads that must answer in an outage (a scrape of
// /metrics), never for the API, whose revocations made straight on MySQL
// must hold within the cache TTL.
func StaleOK(ctx context.Context) context.Context {
	return context.WithValue(ctx, staleOKKey{}, true)
}

// CachedOnly is ctx for an Authenticate that answers from the cache only:
// a token it would have to look up gives ErrNeedsLookup (the HTTP layer
// uses it when as many lookups as requests are under way, so that made-up
// tokens cannot crowd out the known ones). A token found valid before,
// whose entry has expired, is still looked up again.
func CachedOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, cachedOnlyKey{}, true)
}

func (a *Authenticator) byHash(ctx context.Context, hash [32]byte) (Principal, error) {
	now := a.now()
	a.mu.RLock()
	c, hit := a.cache[hash]
	a.mu.RUnlock()
	if !hit || now.After(c.expires) {
		// a valid token whose entry has expired is looked up again even
		// from the cache only: there are only as many of them as real
		// tokens, and made-up ones must not lock them out past their TTL
		if ctx.Value(cachedOnlyKey{}) != nil && !(hit && c.ok) {
			return Principal{}, ErrNeedsLookup
		}
		fresh, err := a.lookup(ctx, hash, now)
		switch {
		case err == nil:
			c = fresh
		case hit && c.ok && ctx.Value(staleOKKey{}) != nil && now.Before(c.expires.Add(staleGrace)) &&
			(errors.Is(err, alarm.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)):
			// MySQL cannot be reached and the caller takes a stale answer
			// (StaleOK: a scrape of /metrics, which must still see
			// clockd_mysql_up 0; found by review: it answered 503 during a
			// MySQL outage, so ClockdMySQLDown could never fire). Every
			// other call keeps the bound on a revocation made straight on
			// MySQL: auth.cache_ttl.
		default:
			return Principal{}, err
		}
	}
	if !c.ok {
		return Principal{}, fmt.Errorf("%w: the token is not valid (unknown or revoked)", ErrUnauthenticated)
	}
	return Principal{TokenID: c.tok.ID, Application: c.tok.Application, Admin: c.tok.Admin, Scopes: c.tok.Scopes}, nil
}

// lookup asks the store once for every concurrent request with the same
// token, caches the answer and, for a valid token, records its use.
func (a *Authenticator) lookup(ctx context.Context, hash [32]byte, now time.Time) (cached, error) {
	// A request after a revocation (here, or told by another instance:
	// Forget) must not share a lookup begun before it, whose answer may be
	// "valid": the revocations seen so far are part of the lookup's key.
	a.mu.RLock()
	revokes := a.revokes
	a.mu.RUnlock()
	key := string(hash[:]) + strconv.FormatUint(revokes, 10)
	v, err := a.flight.do(ctx, key, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
		defer cancel()
		tok, err := a.store.TokenByHash(ctx, hash)
		// trusted for the TTL from the answer, not from the ask: a slow
		// answer was cached already expired, and asked again at once
		c := cached{expires: a.now().Add(a.ttl)}
		switch {
		case errors.Is(err, alarm.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("look up token: %w", err)
		default:
			c.tok, c.ok = tok, tok.RevokedAt.IsZero()
		}
		if c.ok {
			// last_used_at is written at most once per TTL per token and
			// instance: when the lookup is repeated.
			if done := a.touch(tok.ID, now); done != nil {
				select {
				case <-done:
				case <-time.After(touchWait):
				}
			}
		}
		a.mu.Lock()
		// A revocation since the store was read may have been missed by it
		// (the answer is this request's, but not the cache's): the next
		// request asks again.
		if a.revokes == revokes {
			if len(a.cache) >= maxCached {
				// misses first: made-up tokens must not push valid ones out
				maps.DeleteFunc(a.cache, func(_ [32]byte, c cached) bool { return !c.ok })
				if len(a.cache) >= maxCached {
					clear(a.cache)
				}
			}
			a.cache[hash] = c
		}
		a.mu.Unlock()
		return c, nil
	})
	if err != nil {
		return cached{}, err
	}
	return v.(cached), nil
}

// touch writes token id's last_used_at in the background, one write per
// token at a time (nil: one is already under way); the channel is closed
// when it is done.
func (a *Authenticator) touch(id int64, at time.Time) <-chan struct{} {
	a.mu.Lock()
	if a.touching[id] {
		a.mu.Unlock()
		return nil
	}
	a.touching[id] = true
	a.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
		defer cancel()
		if err := a.store.TouchToken(ctx, id, at); err != nil {
			a.log.Debug("record token use", "token", id, "err", err)
		}
		a.mu.Lock()
		delete(a.touching, id)
		a.mu.Unlock()
	}()
	return done
}

// CreateToken stores a new token and returns it with its secret, which is
// not kept anywhere: it cannot be shown again.
func (a *Authenticator) CreateToken(ctx context.Context, n NewToken) (Token, string, error) {
	if err := n.Check(); err != nil {
		return Token{}, "", err
	}
	secret, hash := NewSecret()
	t := Token{Application: n.Application, Admin: n.Admin, Scopes: n.Scopes, Name: n.Name,
		Prefix: secret[:prefixLen], CreatedAt: a.now().UTC().Truncate(time.Millisecond)}
	t, err := a.store.CreateToken(ctx, t, hash)
	if err != nil {
		return Token{}, "", err
	}
	a.mu.Lock()
	delete(a.cache, hash) // a miss cached before it existed (it cannot be guessed, but still)
	a.mu.Unlock()
	return t, secret, nil
}

// ListTokens lists the tokens (of one application when app is not empty).
func (a *Authenticator) ListTokens(ctx context.Context, app string) ([]Token, error) {
	if app != "" {
		if err := alarm.CheckApplication(app); err != nil {
			return nil, err
		}
	}
	return a.store.ListTokens(ctx, app)
}

// RevokeToken revokes a token: it stops working here at once, on the other
// instances as soon as they hear of it (OnRevoke), and at the latest once
// their cache entry expires (CacheTTL).
func (a *Authenticator) RevokeToken(ctx context.Context, id int64) (Token, error) {
	t, err := a.store.RevokeToken(ctx, id, a.now())
	if err != nil && !errors.Is(err, alarm.ErrUnavailable) {
		return Token{}, err
	}
	// forgotten here and everywhere even when the store did not answer: a
	// valid token forgotten costs one lookup, a revoked one remembered
	// works on for auth.cache_ttl
	a.Forget(id)
	if a.onRevoke != nil {
		a.onRevoke(ctx, id)
	}
	return t, err
}

// Forget drops token id from the cache, so that its next use asks the
// store: it was revoked (here or through another instance). A lookup under
// way is not cached.
func (a *Authenticator) Forget(id int64) {
	a.mu.Lock()
	a.revokes++
	for h, c := range a.cache {
		if c.tok.ID == id {
			delete(a.cache, h)
		}
	}
	a.mu.Unlock()
}

// ForgetAll empties the cache, so that every token's next use asks the
// store: revocations through other instances may have been missed (clockd:
// this instance was not bound to the exchange that tells them).
func (a *Authenticator) ForgetAll() {
	a.mu.Lock()
	a.revokes++
	clear(a.cache)
	a.mu.Unlock()
}

// group runs one call per key at a time; concurrent callers of the same key
// share its result (golang.org/x/sync/singleflight, in a few lines).
type group struct {
	mu    sync.Mutex
	calls map[string]*call
}

type call struct {
	done chan struct{}
	v    any
	err  error
}

// do runs fn once for every concurrent caller of key, in a goroutine of
// its own: a caller whose ctx ends stops waiting (with ctx's error), and
// fn goes on for the others.
func (g *group) do(ctx context.Context, key string, fn func() (any, error)) (any, error) {
	g.mu.Lock()
	if g.calls == nil {
		g.calls = map[string]*call{}
	}
	c, ok := g.calls[key]
	if !ok {
		c = &call{done: make(chan struct{})}
		g.calls[key] = c
		go func() {
			c.v, c.err = fn()
			g.mu.Lock()
			delete(g.calls, key)
			g.mu.Unlock()
			close(c.done)
		}()
	}
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.v, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
