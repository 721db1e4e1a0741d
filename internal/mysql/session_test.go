package mysql_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// Console sessions: stored by the hashes of their id and token, read back,
// deleted at logout; a later login deletes expired ones.
func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	db, _ := schemaDB(t, true)
	s := mysql.NewAuthStore(db)
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	a, b, old := sha256.Sum256([]byte("session a")), sha256.Sum256([]byte("session b")), sha256.Sum256([]byte("old"))
	tok := sha256.Sum256([]byte("clk_admin"))
	if err := s.CreateSession(ctx, old, tok, now.Add(-13*time.Hour), now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateSession(ctx, a, tok, now, now.Add(12*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Session(ctx, old); !errors.Is(err, alarm.ErrNotFound) {
		t.Errorf("an expired session is still there after a later login: %v", err)
	}
	got, exp, err := s.Session(ctx, a)
	if err != nil || got != tok || !exp.Equal(now.Add(12*time.Hour)) {
		t.Errorf("session a: %x %v %v", got, exp, err)
	}
	if _, _, err := s.Session(ctx, b); !errors.Is(err, alarm.ErrNotFound) {
		t.Errorf("a session never created: %v", err)
	}
	if err := s.DeleteSession(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Session(ctx, a); !errors.Is(err, alarm.ErrNotFound) {
		t.Errorf("a session after logout: %v", err)
	}
	if err := s.DeleteSession(ctx, a); err != nil {
		t.Errorf("a second logout: %v", err)
	}
	var n int
	if err := db.Get(&n, "SELECT COUNT(*) FROM clock_console_session WHERE id_hash = ? OR token_hash = ?", []byte("session a"), []byte("clk_admin")); err != nil || n != 0 {
		t.Errorf("the session id or token is stored in the clear: %d %v", n, err)
	}
}
