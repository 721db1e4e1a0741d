package mysql_test

import (
	"context"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
)

// Opening a connection is bounded as a whole by the DSN's timeout, also
// under a context without a deadline: database/sql opens the connections
// its waiting callers need in one goroutine under such a context, and one
// whose answers a network fault swallowed (the handshake never answered)
// was bounded only by the read timeout, 30 s by default. Meanwhile every
// other open waited behind it, and a change whose COMMIT answer was lost
// could not learn its outcome: it answered 503 "outcome unknown" though it
// was committed and MySQL answered new connections (found by review).
func TestOpeningAConnectionIsBoundedWithoutADeadline(t *testing.T) {
	t.Parallel()
	c, err := gomysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartProxy(t, c.Addr)
	c.Addr = proxy.Addr
	c.Timeout, c.ReadTimeout = time.Second, 20*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := mysql.Open(ctx, c.FormatDSN(), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// the pool's connection is cut; the next one is taken (TCP) but never
	// answered
	proxy.KillConns()
	proxy.Stall()
	t.Cleanup(proxy.Resume)
	start := time.Now()
	err = db.PingContext(context.Background())
	took := time.Since(start)
	t.Logf("ping with no deadline, MySQL's answers black-holed: %v after %v", err, took.Round(time.Millisecond))
	if err == nil {
		t.Fatal("ping through a stalled proxy succeeded")
	}
	if took > 5*time.Second {
		t.Errorf("opening a connection that is never answered took %v, want about the DSN's timeout (1 s), not the read timeout (20 s)", took.Round(time.Millisecond))
	}
}
