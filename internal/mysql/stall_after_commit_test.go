package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// A change whose COMMIT was answered must not then wait on MySQL without a
// deadline (found by review). commit() sent COMMIT under the request's
// context and then called tx.Rollback() to close database/sql's
// transaction: that ROLLBACK was a statement of its own, sent with no
// context, so a server that stalls
// right after answering the COMMIT (or right after a refused change, whose
// transaction is rolled back the same way) holds the request for as long
// as the ROLLBACK's answer takes, up to the driver's readTimeout (30 s):
// past mysql.request_timeout, which the README promises bounds a request's
// time on MySQL, "its COMMIT included". Here the ROLLBACK reaches MySQL 8 s
// late (a stall starting just after the COMMIT's answer); the request's
// deadline is 1 s.
func TestChangeNotHeldByRollbackAfterCommit(t *testing.T) {
	const requestTimeout, resolveTimeout, late = time.Second, 2 * time.Second, 8 * time.Second
	for _, tc := range []struct {
		name      string
		cancelled bool // the clock is cancelled already: the cancel is refused (409)
	}{
		{name: "committed"},
		{name: "refused", cancelled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, proxy, direct := proxiedStore(t, mysql.StoreConfig{ResolveTimeout: resolveTimeout})
			k := alarm.Key{Application: "order", BusinessID: "rb-" + tc.name}
			now := time.Now()
			if r := s.Create(context.Background(), []alarm.NewClock{{Application: k.Application, BusinessID: k.BusinessID,
				Payload: "{}", ContentType: "application/json", RingAt: now.Add(time.Hour)}}, now); r[0].Err != nil {
				t.Fatal(r[0].Err)
			}
			if tc.cancelled {
				if _, err := s.Cancel(context.Background(), k, now); err != nil {
					t.Fatal(err)
				}
			}
			forwarded := proxy.LateOn("status = 'cancelled'", "ROLLBACK", late)
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			start := time.Now()
			_, err := s.Cancel(ctx, k, now)
			took := time.Since(start)
			cancel()
			t.Logf("cancel answered %v after %v", err, took.Round(time.Millisecond))
			// (a change that sends no ROLLBACK after its COMMIT leaves the
			// trap unsprung: nothing to wait for)
			select {
			case <-forwarded:
			case <-time.After(time.Second):
			}
			if limit := requestTimeout + resolveTimeout + time.Second; took > limit {
				t.Errorf("cancel answered after %v, held by the ROLLBACK sent after it; want within the request's deadline (+ resolve_timeout): %v",
					took.Round(time.Millisecond), limit)
			}
			r, _ := readRow(t, direct, k)
			if tc.cancelled {
				var ce *alarm.ConflictError
				if !errors.As(err, &ce) && !errors.Is(err, alarm.ErrUnavailable) {
					t.Errorf("cancel of a cancelled clock answered %v", err)
				}
			} else if (err == nil) != (r.Status == "cancelled") {
				t.Errorf("cancel answered %v, row is %+v", err, r)
			}
		})
	}
}
