package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
)

// AuthStore keeps API tokens (clock_token) and quotas (clock_quota): the
// auth.Store of clockd.
type AuthStore struct {
	db *sqlx.DB
	// resolveTimeout bounds settling a revocation whose answer was lost,
	// and reading the token back (mysql.resolve_timeout)
	resolveTimeout time.Duration
}

var _ auth.Store = (*AuthStore)(nil)

// NewAuthStore returns the token and quota store on db.
func NewAuthStore(db *sqlx.DB) *AuthStore {
	return &AuthStore{db: db, resolveTimeout: 30 * time.Second}
}

// WithResolveTimeout sets how long a revocation whose answer was lost is
// settled for (mysql.resolve_timeout; default 30 s).
func (s *AuthStore) WithResolveTimeout(d time.Duration) *AuthStore {
	if d > 0 {
		s.resolveTimeout = d
	}
	return s
}

const tokenCols = `id, application, admin, scopes, name, secret_prefix, created_at, last_used_at, revoked_at`

type tokenRow struct {
	ID          int64          `db:"id"`
	Application sql.NullString `db:"application"`
	Admin       bool           `db:"admin"`
	Scopes      string         `db:"scopes"`
	Name        string         `db:"name"`
	Prefix      string         `db:"secret_prefix"`
	CreatedAt   int64          `db:"created_at"`
	LastUsedAt  sql.NullInt64  `db:"last_used_at"`
	RevokedAt   sql.NullInt64  `db:"revoked_at"`
}

func (r tokenRow) token() auth.Token {
	t := auth.Token{ID: r.ID, Application: r.Application.String, Admin: r.Admin, Name: r.Name, Prefix: r.Prefix,
		CreatedAt: fromMS(r.CreatedAt), LastUsedAt: fromNullMS(r.LastUsedAt), RevokedAt: fromNullMS(r.RevokedAt)}
	if r.Scopes != "" {
		for _, s := range strings.Split(r.Scopes, ",") {
			t.Scopes = append(t.Scopes, auth.Scope(s))
		}
	}
	return t
}

func joinScopes(ss []auth.Scope) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ",")
}

// CreateToken stores a token with the hash of its secret.
func (s *AuthStore) CreateToken(ctx context.Context, t auth.Token, hash [32]byte) (auth.Token, error) {
	app := sql.NullString{String: t.Application, Valid: t.Application != ""}
	var id int64
	err := retryLocked(ctx, func() error {
		res, err := s.db.ExecContext(ctx, `INSERT INTO clock_token (application, admin, scopes, name, secret_hash, secret_prefix, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, app, t.Admin, joinScopes(t.Scopes), t.Name, hash[:], t.Prefix, ms(t.CreatedAt))
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return auth.Token{}, fmt.Errorf("create token: %w", mapErr(err))
	}
	t.ID = id
	return t, nil
}

// ListTokens lists tokens by id, of one application when app is not empty.
func (s *AuthStore) ListTokens(ctx context.Context, app string) ([]auth.Token, error) {
	q := "SELECT " + tokenCols + " FROM clock_token"
	var args []any
	if app != "" {
		q += " WHERE application = ?"
		args = append(args, app)
	}
	var rows []tokenRow
	if err := s.db.SelectContext(ctx, &rows, q+" ORDER BY id", args...); err != nil {
		return nil, fmt.Errorf("list tokens: %w", mapErr(err))
	}
	out := make([]auth.Token, len(rows))
	for i, r := range rows {
		out[i] = r.token()
	}
	return out, nil
}

func (s *AuthStore) token(ctx context.Context, where string, args ...any) (auth.Token, error) {
	var r tokenRow
	if err := sqlx.GetContext(ctx, s.db, &r, "SELECT "+tokenCols+" FROM clock_token WHERE "+where, args...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return auth.Token{}, alarm.ErrNotFound
		}
		return auth.Token{}, mapErr(err)
	}
	return r.token(), nil
}

// RevokeToken marks a token revoked; a token revoked before keeps its time.
//
// The token is read first (404 before anything changes), then revoked. An
// UPDATE that was answered is done: the token is answered from that read,
// with no read after it that could fail (found by review: a revocation made
// answered 503 when MySQL went away before the read back). When the
// UPDATE's answer is lost, its session is ended and the token revoked
// again (a revocation is idempotent), and the token is read back on fresh
// connections, for up to its resolve timeout: an answer of 5xx means the
// token was not revoked (found by review: a late UPDATE revoked a token
// whose revocation had answered 503).
func (s *AuthStore) RevokeToken(ctx context.Context, id int64, now time.Time) (auth.Token, error) {
	const q = "UPDATE clock_token SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL"
	fail := func(err error) (auth.Token, error) {
		if errors.Is(err, alarm.ErrNotFound) {
			return auth.Token{}, fmt.Errorf("token %d: %w", id, alarm.ErrNotFound)
		}
		return auth.Token{}, fmt.Errorf("revoke token %d: %w", id, err)
	}
	t, err := s.token(ctx, "id = ?", id)
	if err != nil {
		return fail(err)
	}
	readBack := func(ctx context.Context) (err error) {
		t, err = s.token(ctx, "id = ?", id)
		return err
	}
	n, err := s.revokeOnce(ctx, q, id, now)
	var unknown *unknownError
	switch {
	case errors.As(err, &unknown):
		// within one resolve_timeout: revoked again, then read back
		err = resolveOn(ctx, s.db, s.resolveTimeout, slog.New(slog.DiscardHandler), "token", unknown.sess, func(ctx context.Context) error {
			if _, err := s.db.ExecContext(ctx, q, ms(now), id); err != nil {
				return err
			}
			return readBack(ctx)
		})
	case err != nil:
		return auth.Token{}, fmt.Errorf("revoke token %d: %w", id, mapErr(err))
	case n == 1:
		t.RevokedAt = fromMS(ms(now))
		return t, nil
	case !t.RevokedAt.IsZero():
		return t, nil // revoked before: unchanged
	default:
		// revoked (or deleted) by someone else since the read: read again
		err = resolveOn(ctx, s.db, s.resolveTimeout, slog.New(slog.DiscardHandler), "token", session{}, readBack)
	}
	if err != nil {
		return fail(err)
	}
	return t, nil
}

// revokeOnce runs the revoking UPDATE q on a connection whose MySQL
// session is known and returns the rows it changed: an error with its
// answer lost is an *unknownError.
func (s *AuthStore) revokeOnce(ctx context.Context, q string, id int64, now time.Time) (n int64, err error) {
	err = onConn(ctx, s.db, func(c *sqlx.Conn) error {
		err := retryLocked(ctx, func() error {
			res, err := c.ExecContext(ctx, q, ms(now), id)
			if err == nil {
				n, err = res.RowsAffected()
			}
			return err
		})
		if err != nil && !isServerError(err) {
			return &unknownError{err: err}
		}
		return err
	})
	return n, err
}

// TokenByHash finds a token by the hash of its secret.
func (s *AuthStore) TokenByHash(ctx context.Context, hash [32]byte) (auth.Token, error) {
	t, err := s.token(ctx, "secret_hash = ?", hash[:])
	if err != nil && !errors.Is(err, alarm.ErrNotFound) {
		return auth.Token{}, fmt.Errorf("find token: %w", err)
	}
	return t, err
}

// TouchToken records a token's last use.
func (s *AuthStore) TouchToken(ctx context.Context, id int64, at time.Time) error {
	if err := s.execRetry(ctx, "UPDATE clock_token SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)",
		ms(at), id, ms(at)); err != nil {
		return fmt.Errorf("touch token %d: %w", id, mapErr(err))
	}
	return nil
}

// execRetry runs one statement through retryLocked.
func (s *AuthStore) execRetry(ctx context.Context, q string, args ...any) error {
	return retryLocked(ctx, func() error {
		_, err := s.db.ExecContext(ctx, q, args...)
		return err
	})
}

type quotaRow struct {
	Application      string `db:"application"`
	MaxLiveClocks    int    `db:"max_live_clocks"`
	CreatesPerSecond int    `db:"creates_per_second"`
	MaxPayloadBytes  int    `db:"max_payload_bytes"`
	UpdateTime       int64  `db:"update_time"`
}

// Quota reads an application's quota; the zero quota when none is set.
func (s *AuthStore) Quota(ctx context.Context, app string) (auth.Quota, error) {
	var r quotaRow
	err := s.db.GetContext(ctx, &r, `SELECT application, max_live_clocks, creates_per_second, max_payload_bytes, update_time
		FROM clock_quota WHERE application = ?`, app)
	if errors.Is(err, sql.ErrNoRows) {
		return auth.Quota{Application: app}, nil
	}
	if err != nil {
		return auth.Quota{}, fmt.Errorf("read quota of %s: %w", app, mapErr(err))
	}
	return auth.Quota{Application: r.Application, MaxLiveClocks: r.MaxLiveClocks, CreatesPerSecond: r.CreatesPerSecond,
		MaxPayloadBytes: r.MaxPayloadBytes, UpdatedAt: fromMS(r.UpdateTime)}, nil
}

// SetQuota stores an application's quota.
func (s *AuthStore) SetQuota(ctx context.Context, q auth.Quota, now time.Time) (auth.Quota, error) {
	err := s.execRetry(ctx, `INSERT INTO clock_quota (application, max_live_clocks, creates_per_second, max_payload_bytes, update_time)
		VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE max_live_clocks = VALUES(max_live_clocks),
		creates_per_second = VALUES(creates_per_second), max_payload_bytes = VALUES(max_payload_bytes), update_time = VALUES(update_time)`,
		q.Application, q.MaxLiveClocks, q.CreatesPerSecond, q.MaxPayloadBytes, ms(now))
	if err != nil {
		return auth.Quota{}, fmt.Errorf("set quota of %s: %w", q.Application, mapErr(err))
	}
	q.UpdatedAt = fromMS(ms(now))
	return q, nil
}

// LiveClocks counts an application's pending and firing clocks (a range of
// the (application, id) index).
func (s *AuthStore) LiveClocks(ctx context.Context, app string) (int, error) {
	var n int
	if err := s.db.GetContext(ctx, &n, "SELECT COUNT(*) FROM clock WHERE application = ? AND status IN ('pending', 'firing')", app); err != nil {
		return 0, fmt.Errorf("count live clocks of %s: %w", app, mapErr(err))
	}
	return n, nil
}

// Console sessions (clock_console_session): the console.SessionStore of
// clockd, shared by every instance.

// CreateSession stores a session by the hashes of its id and of its token,
// and deletes up to 100 expired ones (sessions are deleted at logout, and
// an abandoned one at a later login).
func (s *AuthStore) CreateSession(ctx context.Context, id, token [32]byte, created, expires time.Time) error {
	if _, err := s.db.ExecContext(ctx, "DELETE FROM clock_console_session WHERE expires_at < ? LIMIT 100", ms(created)); err != nil {
		return fmt.Errorf("delete expired sessions: %w", mapErr(err))
	}
	if _, err := s.db.ExecContext(ctx, "INSERT INTO clock_console_session (id_hash, token_hash, created_at, expires_at) VALUES (?, ?, ?, ?)",
		id[:], token[:], ms(created), ms(expires)); err != nil {
		return fmt.Errorf("create session: %w", mapErr(err))
	}
	return nil
}

// Session returns the token hash and expiry of a session; alarm.ErrNotFound
// when there is none (logged out, or never).
func (s *AuthStore) Session(ctx context.Context, id [32]byte) ([32]byte, time.Time, error) {
	var row struct {
		Token   []byte `db:"token_hash"`
		Expires int64  `db:"expires_at"`
	}
	var token [32]byte
	err := s.db.GetContext(ctx, &row, "SELECT token_hash, expires_at FROM clock_console_session WHERE id_hash = ?", id[:])
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return token, time.Time{}, alarm.ErrNotFound
	case err != nil:
		return token, time.Time{}, fmt.Errorf("read session: %w", mapErr(err))
	case len(row.Token) != len(token):
		return token, time.Time{}, fmt.Errorf("read session: token hash of %d bytes", len(row.Token))
	}
	copy(token[:], row.Token)
	return token, fromMS(row.Expires), nil
}

// DeleteSession ends a session (logout); one that does not exist is no
// error.
func (s *AuthStore) DeleteSession(ctx context.Context, id [32]byte) error {
	if _, err := s.db.ExecContext(ctx, "DELETE FROM clock_console_session WHERE id_hash = ?", id[:]); err != nil {
		return fmt.Errorf("delete session: %w", mapErr(err))
	}
	return nil
}
