package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
)

// A revocation whose UPDATE was answered (autocommit: it is done) is not
// answered 503 because something after it failed: the store's own comment
// says an answer of 5xx means the token was not revoked. RevokeToken read
// the token back through resolveOn even when the UPDATE had succeeded, and
// when MySQL went away for resolve_timeout right after the UPDATE, it
// answered 503 "outcome unknown" for a revocation that was made (found by
// review).
func TestRevokeAnsweredIsNot503(t *testing.T) {
	t.Parallel()
	s, proxy, direct := proxiedStore(t, mysql.StoreConfig{})
	s.DB().SetMaxIdleConns(0) // every statement on a new connection
	st := mysql.NewAuthStore(s.DB()).WithResolveTimeout(2 * time.Second)
	tok, err := mysql.NewAuthStore(direct).CreateToken(context.Background(), auth.Token{Admin: true, Name: "gone"}, [32]byte{9, 8, 7})
	if err != nil {
		t.Fatal(err)
	}
	// MySQL's answers come 30 ms late; the moment the revocation is in the
	// table, before its answer reaches clockd, MySQL becomes unreachable
	// for new connections
	proxy.SetDelay(30 * time.Millisecond)
	dead := testenv.FreeAddr(t)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			var revoked sql.NullInt64
			if err := direct.Get(&revoked, "SELECT revoked_at FROM clock_token WHERE id = ?", tok.ID); err == nil && revoked.Valid {
				proxy.SetTarget(dead)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	start := time.Now()
	_, err = st.RevokeToken(ctx, tok.ID, time.Now())
	cancel()
	close(stop)
	<-watched
	t.Logf("revoke answered %v after %v", err, time.Since(start).Round(time.Millisecond))
	var revoked sql.NullInt64
	if err := direct.Get(&revoked, "SELECT revoked_at FROM clock_token WHERE id = ?", tok.ID); err != nil {
		t.Fatal(err)
	}
	if !revoked.Valid {
		t.Fatalf("the token was not revoked (revoke answered %v)", err)
	}
	if err != nil {
		t.Errorf("revoke answered %v, but the token is revoked (revoked_at %d): the UPDATE had been answered", err, revoked.Int64)
	}
}
