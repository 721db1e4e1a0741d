package main

// What the docs promise an operator, checked by doing it (found by a
// review from the operator's side; each test failed before its fix).

import (
	"bytes"
	"context"
	"database/sql"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/testenv"
)

// freshDSN is a DSN naming a database that does not exist yet; it is
// dropped when the test ends if anything made it.
func freshDSN(t *testing.T) (dsn, name string) {
	t.Helper()
	dsn = testenv.MySQLDSN(t) // made now, dropped when the test ends
	name = testenv.DatabaseName(t, dsn)
	if _, err := serverDB(t).Exec("DROP DATABASE `" + name + "`"); err != nil {
		t.Fatal(err)
	}
	return dsn, name
}

func databaseExists(t *testing.T, name string) bool {
	t.Helper()
	var n int
	if err := serverDB(t).QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// serverDB is a connection to the test MySQL server, no database selected,
// closed when the test ends.
func serverDB(t *testing.T) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = ""
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// README, Configuration: "A bad value stops clockd at start with a message
// naming the key". The TLS files are settings of this process like
// http.addr, which config checks before MySQL is reached precisely so that
// a refusal leaves no trace ("the listen would fail only after the
// database was created and migrated"). A certificate path with a typo (or
// a key that does not match) must be refused the same way: before the
// database is created and migrated. Otherwise a rollout of a new release
// with a bad TLS setting migrates the shared schema forward and then
// refuses to start (README: 00013 allows no rolling upgrade).
func TestBadTLSFilesRefusedBeforeTheDatabaseIsTouched(t *testing.T) {
	t.Parallel()
	certFile, keyFile, _ := selfSigned(t)
	otherCert, _, _ := selfSigned(t)
	for _, tc := range []struct{ name, cert, key string }{
		{"missing certificate file", filepath.Join(t.TempDir(), "no-such-cert.pem"), keyFile},
		{"key of another certificate", otherCert, keyFile},
		{"certificate given as key", certFile, certFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn, name := freshDSN(t)
			env := map[string]string{"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_LOG_LEVEL": "warn", "CLOCKD_SHARDS": "4",
				"CLOCKD_AMQP_URL": testenv.AMQPURL(t), "CLOCKD_EXCHANGE": testenv.Name("clock.ring.test-"),
				"CLOCKD_INSTANCE_ID": testenv.Name("test-"), "CLOCKD_HTTP_ADDR": testenv.FreeAddr(t),
				"CLOCKD_HTTP_TLS_CERT_FILE": tc.cert, "CLOCKD_HTTP_TLS_KEY_FILE": tc.key}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			err := run(ctx, []string{"serve"}, runEnvOf(env), &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), "http.tls_") {
				t.Fatalf("serve with bad TLS files: %v, want a refusal naming http.tls_cert_file / http.tls_key_file", err)
			}
			if databaseExists(t, name) {
				t.Errorf("serve refused its TLS files (%v) only after it had created (and migrated) database %s", err, name)
			}
		})
	}
}

// The shipped alert ClockdMySQLDown (config/prometheus/clockd-alerts.yml)
// reads clockd_mysql_up from /metrics, and the README says to scrape every
// instance "with auth on, with an admin token" (made with `clockd token
// create --admin`, as the README shows). While MySQL is away, such a
// scrape must still answer, with clockd_mysql_up 0: otherwise the alert
// can never fire, and the operator is told "clockd does not answer
// scrapes" (ClockdDown) instead of "cannot reach MySQL".
func TestMetricsScrapedWithAnAdminTokenDuringAMySQLOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"token", "create", "--admin", "-name", "prometheus"},
		runEnvOf(e.vars(map[string]string{"CLOCKD_LOG_LEVEL": "warn"})), &stdout, &bytes.Buffer{}); err != nil {
		t.Fatalf("clockd token create --admin: %v", err)
	}
	token := strings.TrimSpace(stdout.String())
	dsn, proxy := proxiedDSN(t, e)
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_AUTH_MODE": "tokens",
		"CLOCKD_AUTH_CACHE_TTL": "500ms", "CLOCKD_INSTANCE_ID": testenv.Name("test-")}))
	client := &http.Client{Timeout: 10 * time.Second}
	if code, _, body := get(t, client, d.URL+"/metrics", token); code != 200 || !strings.Contains(body, "\nclockd_mysql_up 1") {
		t.Fatalf("scrape with MySQL up: %d, clockd_mysql_up 1 in it: %v", code, strings.Contains(body, "\nclockd_mysql_up 1"))
	}

	proxy.Cut()
	time.Sleep(2 * time.Second) // past auth.cache_ttl
	var code int
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		code, _, body = get(t, client, d.URL+"/metrics", token)
		if code == 200 && strings.Contains(body, "\nclockd_mysql_up 0") {
			return
		}
	}
	if len(body) > 300 {
		body = body[:300]
	}
	t.Errorf("scrape of /metrics with an admin token while MySQL is away: %d %s; want 200 with clockd_mysql_up 0 "+
		"(the ClockdMySQLDown alert reads it)", code, body)
}

// README, Operations/Schema: with mysql.migrate_on_start off the schema is
// changed only by `clockd migrate` (a DBA's account; the service account
// may lack the rights), and `clockd serve` refuses to start on pending
// migrations. `clockd token list` (or create, revoke), run by an operator
// with the deployment's configuration, must not apply migrations behind
// that setting either: it migrated the schema to the binary's newest
// version whatever mysql.migrate_on_start said.
func TestTokenCommandDoesNotMigrateWhenMigrateOnStartIsOff(t *testing.T) {
	t.Parallel()
	dsn, migrate := migrateCommand(t)
	if out, err := migrate("up-to", "4"); err != nil || !strings.Contains(out, "schema now at version 4") {
		t.Fatalf("migrate up-to 4: %v, %q", err, out)
	}
	env := map[string]string{"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_LOG_LEVEL": "warn", "CLOCKD_MYSQL_MIGRATE_ON_START": "false"}
	err := run(context.Background(), []string{"token", "list"}, runEnvOf(env), &bytes.Buffer{}, &bytes.Buffer{})
	db, oerr := sql.Open("mysql", dsn)
	if oerr != nil {
		t.Fatal(oerr)
	}
	defer db.Close()
	var v int64
	if err := db.QueryRow("SELECT MAX(version_id) FROM goose_db_version WHERE is_applied").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 4 {
		t.Errorf("clockd token list with CLOCKD_MYSQL_MIGRATE_ON_START=false (answer: %v) moved the schema from version 4 to %d", err, v)
	}
}

// README, Operations, "Rolling the schema back", shows what `clockd migrate
// down` says and does on an up-to-date schema. Run verbatim, it must say
// that.
func TestREADMEMigrateDownExample(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// the example block: "$ cmd" lines, each followed by what it prints
	_, block, ok := strings.Cut(string(readme), "  $ clockd migrate down\n")
	if !ok {
		t.Fatal("README has no `$ clockd migrate down` example")
	}
	block, _, _ = strings.Cut(block, "  ```")
	dry, confirmed, ok := strings.Cut(block, "  $ clockd migrate down -confirm\n")
	if !ok {
		t.Fatal("README has no `$ clockd migrate down -confirm` example")
	}
	dry = strings.TrimSpace(dry)
	confirmed = strings.Join(strings.Fields(strings.ReplaceAll(confirmed, "\n", " \n ")), " ")

	_, migrate := migrateCommand(t)
	if _, err := migrate(); err != nil {
		t.Fatal(err)
	}
	_, err = migrate("down")
	if got := "clockd: " + errString(err); got != dry {
		t.Errorf("clockd migrate down printed\n  %s\nthe README shows\n  %s", got, dry)
	}
	out, err := migrate("down", "-confirm")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(strings.ReplaceAll(out, "\n", " \n ")), " "); got != confirmed {
		t.Errorf("clockd migrate down -confirm printed\n%s\nthe README shows\n%s", out, strings.TrimSpace(block[strings.Index(block, "-confirm")+len("-confirm"):]))
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// README, "Upgrading a database that never trimmed": `clockd migrate up-to
// 4` brings a large table to version 4 so that 00005 (a table copy while
// writes wait) can be done by other means. A version that is no migration
// of this binary (a typo: up-to 40 for 4) must be refused, as
// migrationVersion's own message says ("is not a migration number"), not
// taken as "everything": that runs the very copy the operator avoids, and
// then says "the migrations after it are pending" when none is.
func TestMigrateUpToAVersionThatIsNoMigrationIsRefused(t *testing.T) {
	t.Parallel()
	dsn, migrate := migrateCommand(t)
	out, err := migrate("up-to", "40")
	db, oerr := sql.Open("mysql", dsn)
	if oerr != nil {
		t.Fatal(oerr)
	}
	defer db.Close()
	var v sql.NullInt64
	_ = db.QueryRow("SELECT MAX(version_id) FROM goose_db_version WHERE is_applied").Scan(&v)
	if err == nil || v.Int64 > 0 {
		t.Errorf("clockd migrate up-to 40: error %v, printed %q; the schema is now at version %d, want a refusal and nothing applied",
			err, out, v.Int64)
	}
}
