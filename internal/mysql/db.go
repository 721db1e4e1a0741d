// Package mysql is the MySQL/MariaDB adapter of clockd: connection set-up,
// goose migrations, the clock store with group-committed creates, and the
// queries of the preloader, the ring loop and the shard leases. All SQL of
// clockd lives here.
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/pressly/goose/v3"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/migrations"
)

// dbNowMS is the database clock in milliseconds; leases use it so that
// instances with skewed clocks agree on expiry.
const dbNowMS = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"

// PrepareDSN adds the parameters clockd needs to a go-sql-driver DSN.
func PrepareDSN(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse mysql dsn: %w", err)
	}
	if cfg.DBName == "" {
		return nil, errors.New("mysql dsn names no database")
	}
	// One round trip per statement instead of prepare/execute/close.
	cfg.InterpolateParams = true
	cfg.MultiStatements = false
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	cfg.Collation = "utf8mb4_bin"
	// goose reads goose_db_version.tstamp (a TIMESTAMP) into a time.Time;
	// clockd's own times are integers and unaffected.
	cfg.ParseTime = true
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	cfg.MaxAllowedPacket = 0 // read the server's max_allowed_packet
	return cfg, nil
}

// Open connects to the database named in dsn, creating it when missing.
func Open(ctx context.Context, dsn string, maxConns int) (*sqlx.DB, error) {
	cfg, err := PrepareDSN(dsn)
	if err != nil {
		return nil, err
	}
	if err := createDatabase(ctx, cfg); err != nil {
		return nil, err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql connector: %w", err)
	}
	db := sqlx.NewDb(sql.OpenDB(connector), "mysql")
	if maxConns <= 0 {
		maxConns = 32
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	db.SetConnMaxLifetime(time.Hour)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("ping mysql %s: %w", cfg.Addr, err)
	}
	return db, nil
}

func createDatabase(ctx context.Context, cfg *mysql.Config) error {
	server := cfg.Clone()
	server.DBName = ""
	db, err := sql.Open("mysql", server.FormatDSN())
	if err != nil {
		return fmt.Errorf("open mysql server: %w", err)
	}
	defer db.Close()
	q := "CREATE DATABASE IF NOT EXISTS " + quoteIdent(cfg.DBName) + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("create database %s at %s: %w", cfg.DBName, cfg.Addr, err)
	}
	return nil
}

func quoteIdent(s string) string {
	out := []byte{'`'}
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			out = append(out, '`')
		}
		out = append(out, s[i])
	}
	return string(append(out, '`'))
}

// Migrate applies all pending migrations.
func Migrate(ctx context.Context, db *sqlx.DB, log *slog.Logger) error {
	p, err := provider(db)
	if err != nil {
		return err
	}
	res, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	for _, r := range res {
		log.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
	}
	return nil
}

// MigrateDown rolls back every migration (used by tests and operators).
func MigrateDown(ctx context.Context, db *sqlx.DB) error {
	p, err := provider(db)
	if err != nil {
		return err
	}
	if _, err := p.DownTo(ctx, 0); err != nil {
		return fmt.Errorf("migrate down: %w", err)
	}
	return nil
}

func provider(db *sqlx.DB) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectMySQL, db.DB, migrations.FS)
	if err != nil {
		return nil, fmt.Errorf("goose provider: %w", err)
	}
	return p, nil
}

// SetupShards records the shard count on first use and makes sure one lease
// row exists per shard. It returns the count in force, which is the recorded
// one when it differs from want.
func SetupShards(ctx context.Context, db *sqlx.DB, want int) (int, error) {
	if _, err := db.ExecContext(ctx,
		"INSERT IGNORE INTO clock_setting (name, value) VALUES ('shard_count', ?)", strconv.Itoa(want)); err != nil {
		return 0, fmt.Errorf("record shard count: %w", err)
	}
	var v string
	if err := db.GetContext(ctx, &v, "SELECT value FROM clock_setting WHERE name = 'shard_count'"); err != nil {
		return 0, fmt.Errorf("read shard count: %w", err)
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
	if _, err := db.ExecContext(ctx, q, args...); err != nil {
		return 0, fmt.Errorf("create shard rows: %w", err)
	}
	return n, nil
}

// mapErr turns driver errors into domain errors.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return err
	}
	// Connection-level failures: the database is unreachable.
	return fmt.Errorf("%w: mysql: %v", alarm.ErrUnavailable, err)
}

// isRetryable: a deadlock victim, a lock wait timeout, or a duplicate key
// (a create that lost a race): the batch can run again.
func isRetryable(err error) bool { return isLockConflict(err) || isDuplicate(err) }

// execRetry runs a statement, again when InnoDB chose it as a deadlock
// victim or its lock wait timed out (it was rolled back; nothing applied).
func (s *Store) execRetry(ctx context.Context, q string, args ...any) error {
	var err error
	for attempt := 0; attempt < 4; attempt++ {
		if _, err = s.db.ExecContext(ctx, q, args...); err == nil || !isLockConflict(err) {
			return err
		}
		time.Sleep(time.Duration(attempt+1) * 2 * time.Millisecond)
	}
	return err
}

func isLockConflict(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

func isDuplicate(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}
