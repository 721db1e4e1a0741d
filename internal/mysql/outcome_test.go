package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
)

// proxiedStore is a migrated store whose connections go through a proxy the
// test can set traps on, and a direct handle to check rows with.
func proxiedStore(t *testing.T, cfg mysql.StoreConfig) (*mysql.Store, *testenv.Proxy, *sqlx.DB) {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct, err := mysql.Open(ctx, dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { direct.Close() })
	if err := mysql.Migrate(ctx, direct, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if _, err := mysql.SetupShards(ctx, direct, 4); err != nil {
		t.Fatal(err)
	}
	c, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartProxy(t, c.Addr)
	c.Addr = proxy.Addr
	db, err := mysql.Open(ctx, c.FormatDSN(), 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg.Shards = 4
	if cfg.ResolveTimeout == 0 {
		cfg.ResolveTimeout = 10 * time.Second
	}
	s := mysql.NewStore(db, cfg)
	t.Cleanup(s.Close)
	return s, proxy, direct
}

type dbRow struct {
	Status       string `db:"status"`
	TargetRingAt int64  `db:"target_ring_at"`
	Attempts     int    `db:"attempts"`
}

func readRow(t *testing.T, db *sqlx.DB, k alarm.Key) (dbRow, bool) {
	t.Helper()
	var r []dbRow
	if err := db.Select(&r, "SELECT status, target_ring_at, attempts FROM clock WHERE application = ? AND business_id = ?", k.Application, k.BusinessID); err != nil {
		t.Fatal(err)
	}
	if len(r) == 0 {
		return dbRow{}, false
	}
	return r[0], true
}

// A change answers what happened to the row, whichever packet of it the
// connection dies after: an error means the row is unchanged, success means
// it changed. The traps: the connection dies right after the change's
// statement reaches MySQL (before its answer), after the COMMIT reaches it
// (the change is committed, its answer lost), or just before the COMMIT
// would reach it (nothing is committed). With the answer of a committed
// COMMIT lost, the change is found out by its op_token and answered as done.
func TestChangeAnswersWhatHappened(t *testing.T) {
	type trap struct {
		pattern string
		after   bool
	}
	type op struct {
		name string
		// prepare makes the clock the op acts on; do runs it; changed
		// tells from the row whether it was applied.
		prepare func(t *testing.T, s *mysql.Store, k alarm.Key, now time.Time)
		do      func(s *mysql.Store, k alarm.Key, now time.Time) (alarm.Clock, error)
		changed func(r dbRow, ok bool) bool
		traps   []trap
	}
	create := func(s *mysql.Store, k alarm.Key, now time.Time) (alarm.Clock, error) {
		r := s.Create(context.Background(), []alarm.NewClock{{Application: k.Application, BusinessID: k.BusinessID,
			Payload: "{}", ContentType: "application/json", RingAt: now.Add(time.Hour)}}, now)
		return r[0].Clock, r[0].Err
	}
	made := func(t *testing.T, s *mysql.Store, k alarm.Key, now time.Time) {
		t.Helper()
		if _, err := create(s, k, now); err != nil {
			t.Fatal(err)
		}
	}
	newTime := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	ops := []op{
		{
			name: "create", prepare: func(*testing.T, *mysql.Store, alarm.Key, time.Time) {},
			do:      create,
			changed: func(_ dbRow, ok bool) bool { return ok },
			traps:   []trap{{"INSERT INTO clock", true}, {"COMMIT", true}, {"COMMIT", false}},
		},
		{
			name: "cancel", prepare: made,
			do: func(s *mysql.Store, k alarm.Key, now time.Time) (alarm.Clock, error) {
				return s.Cancel(context.Background(), k, now)
			},
			changed: func(r dbRow, _ bool) bool { return r.Status == "cancelled" },
			traps:   []trap{{"status = 'cancelled'", true}, {"COMMIT", true}, {"COMMIT", false}},
		},
		{
			name: "reschedule", prepare: made,
			do: func(s *mysql.Store, k alarm.Key, now time.Time) (alarm.Clock, error) {
				return s.Reschedule(context.Background(), k, now, func(c alarm.Clock) (alarm.Clock, error) {
					c.RingAt, c.NextTryAt = newTime, newTime
					return c, nil
				})
			},
			changed: func(r dbRow, _ bool) bool { return r.TargetRingAt == newTime.UnixMilli() },
			traps:   []trap{{"UPDATE clock SET payload", true}, {"COMMIT", true}, {"COMMIT", false}},
		},
		{
			name: "replay",
			prepare: func(t *testing.T, s *mysql.Store, k alarm.Key, now time.Time) {
				made(t, s, k, now)
				if _, err := s.DB().Exec("UPDATE clock SET status = 'dead', attempts = 3 WHERE business_id = ?", k.BusinessID); err != nil {
					t.Fatal(err)
				}
			},
			do: func(s *mysql.Store, k alarm.Key, now time.Time) (alarm.Clock, error) {
				return s.Replay(context.Background(), k, now)
			},
			changed: func(r dbRow, _ bool) bool { return r.Status == "pending" },
			traps:   []trap{{"status = 'pending', next_try_time", true}, {"COMMIT", true}, {"COMMIT", false}},
		},
	}
	s, proxy, direct := proxiedStore(t, mysql.StoreConfig{})
	for _, o := range ops {
		for i, tr := range o.traps {
			name := fmt.Sprintf("%s/%q after=%v", o.name, tr.pattern, tr.after)
			t.Run(name, func(t *testing.T) {
				k := alarm.Key{Application: "app", BusinessID: fmt.Sprintf("%s-%d", o.name, i)}
				now := time.Now()
				o.prepare(t, s, k, now)
				fired := proxy.CutOn(tr.pattern, tr.after)
				c, err := o.do(s, k, now)
				select {
				case <-fired:
				case <-time.After(5 * time.Second):
					t.Fatalf("the trap on %q never went off: the change sent no such packet", tr.pattern)
				}
				r, ok := readRow(t, direct, k)
				changed := o.changed(r, ok)
				switch {
				case err != nil && changed:
					t.Fatalf("answered %v, but the change was committed (row %+v)", err, r)
				case err == nil && !changed:
					t.Fatalf("answered success (%+v), but the row is unchanged: %+v", c, r)
				case err != nil && !errors.Is(err, alarm.ErrUnavailable):
					t.Fatalf("failed with %v, want an unavailable error", err)
				}
				t.Logf("answer: err=%v; row %+v", err, r)
			})
		}
	}
}

// A stalled server (every byte held, like a SIGSTOPped mysqld) makes a
// create fail within its deadline, and the INSERT that was waiting does
// not commit when the server wakes up: the 503 was the truth.
func TestCreateStalledServerCommitsNothing(t *testing.T) {
	s, proxy, direct := proxiedStore(t, mysql.StoreConfig{})
	now := time.Now()
	if _, err := s.Get(context.Background(), alarm.Key{Application: "app", BusinessID: "warm"}); !errors.Is(err, alarm.ErrNotFound) {
		t.Fatal(err) // connections open
	}
	proxy.Stall()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	start := time.Now()
	r := s.Create(ctx, []alarm.NewClock{{Application: "app", BusinessID: "stalled", Payload: "{}", ContentType: "application/json", RingAt: now.Add(time.Hour)}}, now)
	cancel()
	took := time.Since(start)
	if r[0].Err == nil || !errors.Is(r[0].Err, alarm.ErrUnavailable) {
		t.Fatalf("create against a stalled server: %+v, want unavailable", r[0])
	}
	if took > 3*time.Second {
		t.Errorf("create took %v against a stalled server; its deadline was 1.5s", took)
	}
	proxy.Resume()
	time.Sleep(time.Second) // whatever waited in the proxy reaches MySQL now
	if _, ok := readRow(t, direct, alarm.Key{Application: "app", BusinessID: "stalled"}); ok {
		t.Fatal("a create answered 503 was committed once the server woke up")
	}
}

// MySQL 8 (innodb_autoinc_lock_mode=2, the compose image) hands out ids
// that need not be consecutive, so creates read them back with a SELECT.
// That path is forced here (MariaDB's ids are consecutive) and must give
// every clock its own id, in a batch with new and existing keys too.
func TestCreateSelectIDs(t *testing.T) {
	for _, selectIDs := range []bool{false, true} {
		t.Run(fmt.Sprintf("SelectIDs=%v", selectIDs), func(t *testing.T) {
			s, _, direct := proxiedStore(t, mysql.StoreConfig{SelectIDs: selectIDs})
			now := time.Now()
			var in []alarm.NewClock
			for i := range 300 {
				in = append(in, alarm.NewClock{Application: "app", BusinessID: fmt.Sprintf("b-%03d", i), Payload: "{}",
					ContentType: "application/json", RingAt: now.Add(time.Hour).Truncate(time.Millisecond)})
			}
			check := func(res []alarm.CreateResult) {
				t.Helper()
				for i, r := range res {
					if r.Err != nil {
						t.Fatalf("create %d: %v", i, r.Err)
					}
					var id int64
					if err := direct.Get(&id, "SELECT id FROM clock WHERE application = ? AND business_id = ?", "app", in[i].BusinessID); err != nil {
						t.Fatal(err)
					}
					if r.Clock.ID != id {
						t.Fatalf("%s: answered id %d, the row has %d", in[i].BusinessID, r.Clock.ID, id)
					}
				}
			}
			check(s.Create(context.Background(), in[:200], now))
			res := s.Create(context.Background(), in, now) // 200 existing, 100 new
			check(res)
			for i, r := range res {
				if r.Created != (i >= 200) {
					t.Fatalf("create %d: created=%v", i, r.Created)
				}
			}
		})
	}
}

// A change whose COMMIT reaches MySQL late (a segment retransmitted after a
// blip, while fresh connections already get through) is answered for what
// happened, within the request's deadline and mysql.resolve_timeout (found
// by review: the re-read could not know while the old session's
// transaction was still open, the create and the cancel answered 503 and
// were then committed; and a cancel's COMMIT, sent without the request's
// deadline, held it for as long as the COMMIT was held).
func TestChangeWhoseCommitComesLate(t *testing.T) {
	const requestTimeout, resolveTimeout, late = time.Second, 4 * time.Second, 8 * time.Second
	for _, op := range []struct {
		name, arm string
		prepare   bool
		do        func(ctx context.Context, s *mysql.Store, k alarm.Key, now time.Time) error
		changed   func(r dbRow, ok bool) bool
	}{
		{name: "create", arm: "late-create", do: func(ctx context.Context, s *mysql.Store, k alarm.Key, now time.Time) error {
			return s.Create(ctx, []alarm.NewClock{{Application: k.Application, BusinessID: k.BusinessID,
				Payload: "{}", ContentType: "application/json", RingAt: now.Add(time.Hour)}}, now)[0].Err
		}, changed: func(_ dbRow, ok bool) bool { return ok }},
		{name: "cancel", arm: "status = 'cancelled'", prepare: true, do: func(ctx context.Context, s *mysql.Store, k alarm.Key, now time.Time) error {
			_, err := s.Cancel(ctx, k, now)
			return err
		}, changed: func(r dbRow, _ bool) bool { return r.Status == "cancelled" }},
	} {
		t.Run(op.name, func(t *testing.T) {
			t.Parallel()
			s, proxy, direct := proxiedStore(t, mysql.StoreConfig{ResolveTimeout: resolveTimeout})
			k := alarm.Key{Application: "order", BusinessID: "late-" + op.name}
			now := time.Now()
			if op.prepare {
				if r := s.Create(context.Background(), []alarm.NewClock{{Application: k.Application, BusinessID: k.BusinessID,
					Payload: "{}", ContentType: "application/json", RingAt: now.Add(time.Hour)}}, now); r[0].Err != nil {
					t.Fatal(r[0].Err)
				}
			}
			forwarded := proxy.LateOn(op.arm, "COMMIT", late)
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			start := time.Now()
			err := op.do(ctx, s, k, now)
			took := time.Since(start)
			cancel()
			t.Logf("%s answered %v after %v", op.name, err, took.Round(time.Millisecond))
			if limit := requestTimeout + resolveTimeout + time.Second; took > limit {
				t.Errorf("%s answered after %v: more than the request's deadline and resolve_timeout (%v)", op.name, took, limit)
			}
			// the held COMMIT went on (or found its connection ended): the
			// row is final now
			select {
			case <-forwarded:
			case <-time.After(2 * late):
				t.Fatal("the COMMIT was never held: the trap did not go off")
			}
			time.Sleep(500 * time.Millisecond)
			r, ok := readRow(t, direct, k)
			if changed := op.changed(r, ok); changed != (err == nil) {
				t.Errorf("%s answered %v, and the row is %+v (present %v): changed %v", op.name, err, r, ok, changed)
			}
		})
	}
}

// A revocation whose UPDATE reaches MySQL late is answered for what
// happened: revoked (found by review: it answered 503, then the late
// UPDATE revoked the token).
func TestRevokeWhoseUpdateComesLate(t *testing.T) {
	t.Parallel()
	s, proxy, direct := proxiedStore(t, mysql.StoreConfig{})
	st := mysql.NewAuthStore(s.DB())
	tok, err := mysql.NewAuthStore(direct).CreateToken(context.Background(), auth.Token{Admin: true, Name: "late"}, [32]byte{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	const late = 4 * time.Second
	forwarded := proxy.LateOn("SET revoked_at", "SET revoked_at", late)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	start := time.Now()
	_, err = st.RevokeToken(ctx, tok.ID, time.Now())
	took := time.Since(start)
	cancel()
	t.Logf("revoke answered %v after %v", err, took.Round(time.Millisecond))
	select {
	case <-forwarded:
	case <-time.After(2 * late):
		t.Fatal("the UPDATE was never held: the trap did not go off")
	}
	time.Sleep(500 * time.Millisecond)
	var revoked sql.NullInt64
	if err := direct.Get(&revoked, "SELECT revoked_at FROM clock_token WHERE id = ?", tok.ID); err != nil {
		t.Fatal(err)
	}
	if revoked.Valid != (err == nil) {
		t.Errorf("revoke answered %v, and revoked_at is %v", err, revoked)
	}
}
