// Package testenv gives integration tests their own MySQL database and
// RabbitMQ names on the servers named by CLOCKD_TEST_MYSQL_DSN and
// CLOCKD_TEST_AMQP_URL. An unreachable server fails the test, with a message
// saying how to start one: it is never skipped, on a laptop as under CI, so
// that a green `make test` means the integration tests ran.
package testenv

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-sql-driver/mysql"
)

// Defaults for the local services.
const (
	DefaultMySQLDSN = "root:@tcp(127.0.0.1:3306)/"
	DefaultAMQPURL  = "amqp://guest:guest@127.0.0.1:5672/"
)

// HowToStart says how to start the services the integration tests need.
const HowToStart = `integration tests need MySQL (or MariaDB) and RabbitMQ; they fail, never skip, when one is missing. Start them:
  MariaDB:  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  RabbitMQ: rabbitmq-server -detached
  or both with Docker:  docker compose up -d --wait mysql rabbitmq
  or install, start and test everything:  bash .ci/run
They are expected at CLOCKD_TEST_MYSQL_DSN (default ` + DefaultMySQLDSN + `) and
CLOCKD_TEST_AMQP_URL (default ` + DefaultAMQPURL + `); rabbitmqctl may be named by CLOCKD_TEST_RABBITMQCTL.`

// unavailable fails the test: what (naming the address) cannot be reached.
func unavailable(t testing.TB, what string, err error) {
	t.Helper()
	t.Fatalf("%s unreachable: %v\n%s", what, err, HowToStart)
}

// Name returns a short random name with the given prefix, safe for a
// database, an exchange or a queue.
func Name(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + hex.EncodeToString(b[:])
}

// ServerDSN is the DSN of the test MySQL server (no database selected).
func ServerDSN() string {
	if v := os.Getenv("CLOCKD_TEST_MYSQL_DSN"); v != "" {
		return v
	}
	return DefaultMySQLDSN
}

// AMQPURL returns the URL of the test RabbitMQ after checking it answers.
func AMQPURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("CLOCKD_TEST_AMQP_URL")
	if url == "" {
		url = DefaultAMQPURL
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		unavailable(t, "RabbitMQ at "+url, err)
	}
	_ = conn.Close()
	return url
}

// MySQLDSN creates a fresh database for the test, drops it when the test
// ends, and returns a go-sql-driver DSN that selects it.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(ServerDSN())
	if err != nil {
		t.Fatalf("CLOCKD_TEST_MYSQL_DSN: %v", err)
	}
	cfg.DBName = ""
	cfg.Timeout = 5 * time.Second
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("open mysql: %v", err)
	}
	defer admin.Close()
	if err := admin.Ping(); err != nil {
		unavailable(t, "MySQL at "+cfg.Addr, err)
	}
	name := Name("clockd_test_")
	if _, err := admin.Exec("CREATE DATABASE `" + name + "`"); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return
		}
		defer db.Close()
		if _, err := db.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// DatabaseName returns the database a DSN selects.
func DatabaseName(t testing.TB, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(cfg.DBName)
}
