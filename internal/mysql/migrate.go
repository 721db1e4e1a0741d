package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jmoiron/sqlx"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/migrations"
)

// schemaLockWait bounds how long an instance waits for another instance's
// migrations before it gives up (and, under Kubernetes, is restarted).
const schemaLockWait = 60 * time.Second

// Migrate applies all pending migrations. Instances that start together on
// one database take turns: the first applies the schema, the others wait for
// it and then find nothing pending (see schemaLock).
func Migrate(ctx context.Context, db *sqlx.DB, log *slog.Logger) error {
	return migrate(ctx, db, log, schemaLockWait)
}

// MigrateDSN is Migrate on a pool of its own whose connections have no
// read or write timeout: adding an index to a table of millions of rows
// takes minutes, during which the server answers nothing, and a client
// that gave up after mysql's usual read timeout (30 s) would cut the
// connection and so abort the migration halfway.
func MigrateDSN(ctx context.Context, dsn string, log *slog.Logger) error {
	return MigrateDSNUpTo(ctx, dsn, log, 0)
}

// MigrateDSNUpTo is MigrateDSN up to version only (0: every migration): the
// first step of an upgrade that runs a migration by other means (a large
// table's CHECK added with gh-ost, and its version marked applied).
func MigrateDSNUpTo(ctx context.Context, dsn string, log *slog.Logger, version int64) error {
	cfg, err := PrepareDSN(dsn)
	if err != nil {
		return err
	}
	cfg.ReadTimeout, cfg.WriteTimeout = 0, 0
	db, err := openConnector(ctx, cfg, 2, log)
	if err != nil {
		return err
	}
	defer db.Close()
	return migrateUpTo(ctx, db, log, schemaLockWait, version)
}

func migrate(ctx context.Context, db *sqlx.DB, log *slog.Logger, wait time.Duration) error {
	return migrateUpTo(ctx, db, log, wait, 0)
}

func migrateUpTo(ctx context.Context, db *sqlx.DB, log *slog.Logger, wait time.Duration, version int64) error {
	p, err := provider(db, log, wait)
	if err != nil {
		return err
	}
	up := func(ctx context.Context) ([]*goose.MigrationResult, error) {
		if version > 0 {
			return p.UpTo(ctx, version)
		}
		return p.Up(ctx)
	}
	// An empty goose_db_version, seen under the lock, means another
	// instance is still creating it (seen once in CI with four instances
	// started at once: the table visible, its version-0 row not yet):
	// look again shortly rather than fail the start.
	// Migrations run on connections without a read timeout (an index
	// build on a big table takes minutes): said every 30 s while they run,
	// so that a start waiting on a MySQL that answers nothing is not
	// silent (found by review: not one line in 150 s).
	stop := make(chan struct{})
	defer close(stop)
	go func(began time.Time) {
		t := time.NewTicker(migrationNotice)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				log.Warn("migrations still running: an index build on a large table takes minutes; a MySQL that answers nothing is waited for",
					"after", time.Since(began).Round(time.Second).String())
			}
		}
	}(time.Now())
	var res []*goose.MigrationResult
	for attempt := 1; ; attempt++ {
		res, err = up(ctx)
		if err == nil || attempt == 10 || !strings.Contains(err.Error(), "missing zero version") {
			break
		}
		log.Info("goose_db_version is being created by another instance; trying again", "attempt", attempt)
		select {
		case <-ctx.Done():
			return fmt.Errorf("migrate up: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
		if p, err = provider(db, log, wait); err != nil {
			return err
		}
	}
	if err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	for _, r := range res {
		// A string such as "1.52s", like every duration clockd logs: slog's
		// JSON handler writes a time.Duration as integer nanoseconds.
		log.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration.Round(time.Millisecond).String())
		if r.Source.Version == historyKeyMigration {
			warnOldInstances(ctx, db, log)
		}
	}
	return nil
}

// migrationNotice is how often running migrations are said to be running.
const migrationNotice = 30 * time.Second

// historyKeyMigration (00013) drops the clock_history index that releases
// before it name in FORCE INDEX: on the migrated schema they answer 500 to
// every read of a clock from history (README, upgrading past 00013).
const historyKeyMigration = 13

// warnOldInstances says, once, which instances were live when 00013 was
// applied: every one runs a release before it (a newer one does not start
// on a schema it has not migrated) and fails those reads until stopped.
func warnOldInstances(ctx context.Context, db *sqlx.DB, log *slog.Logger) {
	live, err := LiveInstances(ctx, db)
	if err != nil || len(live) == 0 {
		return
	}
	log.Warn("migration 00013 applied while instances of an earlier release are live: they answer 500 to reads of "+
		"clocks in history (GET of a key not in clock, and its cancel, reschedule or replay) until they are stopped",
		"instances", live)
}

// MigrateDown rolls back every migration, dropping every table (tests).
func MigrateDown(ctx context.Context, db *sqlx.DB) error {
	_, err := MigrateDownTo(ctx, db, 0)
	return err
}

// MigrateDownTo rolls the schema back to version (0: every migration, which
// drops every table) and returns the migrations rolled back, newest first.
func MigrateDownTo(ctx context.Context, db *sqlx.DB, version int64) ([]*goose.MigrationResult, error) {
	p, err := provider(db, slog.New(slog.DiscardHandler), schemaLockWait)
	if err != nil {
		return nil, err
	}
	res, err := p.DownTo(ctx, version)
	if err != nil {
		return nil, fmt.Errorf("migrate down: %w", err)
	}
	return res, nil
}

// AppliedVersions lists the migrations applied to the database, oldest
// first. It reads without the schema lock.
func AppliedVersions(ctx context.Context, db *sqlx.DB) ([]int64, error) {
	st, err := MigrationStatus(ctx, db)
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, s := range st {
		if s.State == goose.StateApplied {
			out = append(out, s.Source.Version)
		}
	}
	return out, nil
}

// LiveInstances lists, sorted, the clockd instances whose heartbeat in
// clock_instance has not expired (none when the table does not exist).
func LiveInstances(ctx context.Context, db *sqlx.DB) ([]string, error) {
	var ids []string
	err := db.SelectContext(ctx, &ids, "SELECT instance_id FROM clock_instance WHERE expires_at > "+dbNowMS+" ORDER BY instance_id")
	if err != nil && !isNoSuchTable(err) {
		return nil, fmt.Errorf("live instances: %w", mapErr(err))
	}
	return ids, nil
}

// SchemaVersions returns the database's schema version (the highest
// migration applied to it) and the newest migration this binary has.
// have < want: migrations are pending; have > want: the database was
// migrated by a newer clockd (a binary rolled back after an upgrade).
func SchemaVersions(ctx context.Context, db *sqlx.DB) (have, want int64, err error) {
	p, err := provider(db, slog.New(slog.DiscardHandler), schemaLockWait)
	if err != nil {
		return 0, 0, err
	}
	if have, err = p.GetDBVersion(ctx); err != nil {
		return 0, 0, fmt.Errorf("schema version: %w", err)
	}
	for _, s := range p.ListSources() {
		want = max(want, s.Version)
	}
	return have, want, nil
}

// MigrationStatus lists every migration and whether it is applied. It
// reads without the schema lock.
func MigrationStatus(ctx context.Context, db *sqlx.DB) ([]*goose.MigrationStatus, error) {
	p, err := provider(db, slog.New(slog.DiscardHandler), schemaLockWait)
	if err != nil {
		return nil, err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	return st, nil
}

// provider runs goose under the schema lock: goose takes one connection of
// its own, locks it, reads the applied versions and runs the migrations on
// it, and unlocks it at the end.
//
// goose ships no session locker for MySQL (only Postgres advisory locks),
// and its MySQL table locker is a lease in an extra table, renewed by a
// heartbeat and polled every few seconds; a named lock dies with its
// connection, so a killed instance never leaves the schema locked.
// MigrationVersions lists, ascending, the versions of the migrations this
// binary holds.
func MigrationVersions() []int64 {
	entries, _ := fs.ReadDir(migrations.FS, ".")
	var vs []int64
	for _, e := range entries {
		if v, err := goose.NumericComponent(e.Name()); err == nil {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs
}

func provider(db *sqlx.DB, log *slog.Logger, wait time.Duration) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectMySQL, db.DB, migrations.FS,
		goose.WithSessionLocker(&schemaLock{log: log, wait: wait}))
	if err != nil {
		return nil, fmt.Errorf("goose provider: %w", err)
	}
	return p, nil
}

// SetupShards records the shard count on first use and makes sure one lease
// row exists per shard. It returns the count in force, which is the recorded
// one when it differs from want. It runs under the schema lock, so that it
// waits for migrations another instance is applying.
func SetupShards(ctx context.Context, db *sqlx.DB, want int) (int, error) {
	var n int
	err := withSchemaLock(ctx, db, slog.New(slog.DiscardHandler), schemaLockWait, func(conn *sql.Conn) error {
		var err error
		n, err = setupShards(ctx, conn, want)
		return err
	})
	return n, err
}

func setupShards(ctx context.Context, conn *sql.Conn, want int) (int, error) {
	v, err := recordSetting(ctx, conn, "shard_count", strconv.Itoa(want))
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("clock_setting shard_count %q is not a positive number", v)
	}
	q := "INSERT IGNORE INTO clock_shard (shard, update_time) VALUES "
	args := make([]any, 0, n)
	for i := 0; i < n; i++ {
		if i > 0 {
			q += ","
		}
		q += "(?, 0)"
		args = append(args, i)
	}
	if _, err := conn.ExecContext(ctx, q, args...); err != nil {
		return 0, fmt.Errorf("create shard rows: %w", err)
	}
	return n, nil
}

// ExchangeSetting is the row of clock_setting that names the exchange
// the database's clocks ring to.
const ExchangeSetting = "ring_exchange"

// SetupExchange records the exchange the instances of this database ring
// to (on first use), and returns the one recorded before when it differs
// from exchange and no other instance has been live for 5 minutes: the
// whole cluster was stopped and started with a new exchange, which is then
// recorded. With another
// instance live under another exchange it answers alarm.ErrExchangeChanged:
// an instance given another exchange took its share of the shards and
// rang their clocks where no application listened (found by review: 19
// of 48 clocks never reached their queue). self is this instance's id (a
// heartbeat of its own, left by a crash, does not count).
func SetupExchange(ctx context.Context, db *sqlx.DB, exchange, self string) (previous string, err error) {
	err = withSchemaLock(ctx, db, slog.New(slog.DiscardHandler), schemaLockWait, func(conn *sql.Conn) error {
		recorded, err := recordSetting(ctx, conn, ExchangeSetting, exchange)
		if err != nil {
			return err
		}
		if recorded == exchange {
			return nil
		}
		var live int
		// a heartbeat expired within the last 5 minutes counts: an instance
		// cut off from MySQL for longer than its lease TTL lives on
		if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM clock_instance WHERE expires_at > "+dbNowMS+" - 300000 AND instance_id <> ?", self).Scan(&live); err != nil {
			return fmt.Errorf("count live instances: %w", err)
		}
		if live > 0 {
			return fmt.Errorf("%w: the %d live instance(s) of this database ring to exchange %q, this one was given %q (CLOCKD_EXCHANGE): "+
				"give every instance the same exchange; to move to another, stop every instance and start them with the new one",
				alarm.ErrExchangeChanged, live, recorded, exchange)
		}
		if _, err := conn.ExecContext(ctx, "UPDATE clock_setting SET value = ? WHERE name = ?", exchange, ExchangeSetting); err != nil {
			return fmt.Errorf("record ring exchange: %w", err)
		}
		previous = recorded
		return nil
	})
	return previous, err
}

// recordSetting records value as setting name of clock_setting unless one
// is recorded already, and returns the one in force.
func recordSetting(ctx context.Context, conn *sql.Conn, name, value string) (string, error) {
	if _, err := conn.ExecContext(ctx, "INSERT IGNORE INTO clock_setting (name, value) VALUES (?, ?)", name, value); err != nil {
		return "", fmt.Errorf("record setting %s: %w", name, err)
	}
	var v string
	if err := conn.QueryRowContext(ctx, "SELECT value FROM clock_setting WHERE name = ?", name).Scan(&v); err != nil {
		return "", fmt.Errorf("read setting %s: %w", name, err)
	}
	return v, nil
}

// withSchemaLock runs fn on one connection holding the schema lock.
func withSchemaLock(ctx context.Context, db *sqlx.DB, log *slog.Logger, wait time.Duration, fn func(*sql.Conn) error) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("schema lock: connect: %w", err)
	}
	defer conn.Close()
	l := &schemaLock{log: log, wait: wait}
	if err := l.SessionLock(ctx, conn); err != nil {
		return err
	}
	defer func() {
		if uerr := l.SessionUnlock(context.WithoutCancel(ctx), conn); uerr != nil && err == nil {
			err = uerr
		}
	}()
	return fn(conn)
}

// schemaLock serializes schema changes across processes with a MySQL named
// lock (GET_LOCK), named after the database so that clusters on different
// databases of one server do not wait for each other. The lock belongs to
// the connection that took it: the server drops it when that connection
// ends, whether the instance released it, exited or was killed. It
// implements goose's lock.SessionLocker.
type schemaLock struct {
	log  *slog.Logger
	wait time.Duration // give up after this long
	name string        // set by SessionLock
}

var _ lock.SessionLocker = (*schemaLock)(nil)

// schemaLockStep is how long one GET_LOCK waits on the server: the wait is
// a loop of short ones so that ctx cancels it.
const schemaLockStep = time.Second

// SessionLock takes the lock on conn, waiting at most l.wait.
func (l *schemaLock) SessionLock(ctx context.Context, conn *sql.Conn) error {
	name, err := schemaLockName(ctx, conn)
	if err != nil {
		return err
	}
	l.name = name
	start := time.Now()
	nextLog := start
	for {
		step := min(schemaLockStep, l.wait-time.Since(start))
		secs := max(int(step/time.Second), 0) // GET_LOCK counts whole seconds; 0 = try once
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, secs).Scan(&got); err != nil {
			return fmt.Errorf("schema lock %q: %w", name, err)
		}
		if !got.Valid {
			return fmt.Errorf("schema lock %q: GET_LOCK failed", name)
		}
		if got.Int64 == 1 {
			if waited := time.Since(start); waited > schemaLockStep {
				l.log.Info("schema lock taken", "lock", name, "waited", waited.Round(time.Millisecond).String())
			}
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("schema lock %q: %w", name, err)
		}
		if time.Since(start) >= l.wait {
			return fmt.Errorf("schema lock %q still held after %s by %s", name, l.wait, lockHolder(ctx, conn, name))
		}
		if secs == 0 { // a wait shorter than a second: do not spin
			select {
			case <-ctx.Done():
				return fmt.Errorf("schema lock %q: %w", name, ctx.Err())
			case <-time.After(step):
			}
		}
		if now := time.Now(); !now.Before(nextLog) {
			l.log.Info("waiting for the schema lock (another instance is migrating)",
				"lock", name, "holder", lockHolder(ctx, conn, name), "waited", now.Sub(start).Round(time.Second).String())
			nextLog = now.Add(10 * time.Second)
		}
	}
}

// SessionUnlock releases the lock taken on conn.
func (l *schemaLock) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", l.name).Scan(&got); err != nil {
		return fmt.Errorf("release schema lock %q: %w", l.name, err)
	}
	if !got.Valid || got.Int64 != 1 {
		// 0: another connection holds it; NULL: nobody does. Either way
		// this connection lost it while it thought it held it.
		return fmt.Errorf("release schema lock %q: it was not held by this connection", l.name)
	}
	return nil
}

// schemaLockName is "clockd.migrate.<database>"; a lock name has at most
// 64 characters, so a long database name is replaced by its hash.
func schemaLockName(ctx context.Context, conn *sql.Conn) (string, error) {
	var db sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&db); err != nil {
		return "", fmt.Errorf("schema lock: read database name: %w", err)
	}
	if !db.Valid || db.String == "" {
		return "", errors.New("schema lock: the connection selects no database")
	}
	const prefix = "clockd.migrate."
	name := prefix + db.String
	if utf8.RuneCountInString(name) > 64 {
		sum := sha256.Sum256([]byte(db.String))
		name = prefix + hex.EncodeToString(sum[:])[:64-len(prefix)]
	}
	return name, nil
}

// lockHolder describes the connection that holds the named lock, for
// messages: its id (what `KILL` takes) and, when this user may see it, who
// it is and what it does.
func lockHolder(ctx context.Context, conn *sql.Conn, name string) string {
	var id sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", name).Scan(&id); err != nil {
		return fmt.Sprintf("an unknown connection (IS_USED_LOCK: %v)", err)
	}
	if !id.Valid {
		return "nobody now (released meanwhile)"
	}
	var (
		user, host, command string
		secs                sql.NullInt64
		state, info         sql.NullString
	)
	err := conn.QueryRowContext(ctx, `SELECT USER, HOST, COMMAND, TIME, STATE, INFO
		FROM information_schema.PROCESSLIST WHERE ID = ?`, id.Int64).Scan(&user, &host, &command, &secs, &state, &info)
	if err != nil { // not visible without the PROCESS privilege
		return fmt.Sprintf("connection %d", id.Int64)
	}
	what := command
	if info.Valid && info.String != "" {
		q := strings.Join(strings.Fields(info.String), " ")
		if len(q) > 120 {
			q = q[:120] + "…"
		}
		what += ": " + q
	} else if state.String != "" {
		what += " (" + state.String + ")"
	}
	return fmt.Sprintf("connection %d (%s@%s, %s for %ds)", id.Int64, user, host, what, secs.Int64)
}
