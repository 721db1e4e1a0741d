package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

func runEnvOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func runTables(t *testing.T, dsn string) []string {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT TABLE_NAME FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'goose_db_version' ORDER BY TABLE_NAME`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	env := runEnvOf(map[string]string{"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_SHARDS": "4", "CLOCKD_LOG_LEVEL": "warn"})
	ctx := context.Background()
	migrate := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := run(ctx, append([]string{"migrate"}, args...), env, &stdout, &stderr); err != nil {
			t.Fatalf("clockd migrate %v: %v\nstderr: %s", args, err, stderr.String())
		}
		return stdout.String()
	}
	if out := migrate("status"); !strings.Contains(out, "00001") || !strings.Contains(out, "pending") {
		t.Errorf("status of a fresh database:\n%s", out)
	}
	if out := migrate(); !strings.Contains(out, "4 shards") {
		t.Errorf("migrate said %q", out)
	}
	want := "clock,clock_console_session,clock_history,clock_instance,clock_lease,clock_quota,clock_setting,clock_shard,clock_token"
	if got := strings.Join(runTables(t, dsn), ","); got != want {
		t.Errorf("tables %s, want %s", got, want)
	}
	if out := migrate("status"); !strings.Contains(out, "00001") || !strings.Contains(out, "applied") ||
		!strings.Contains(out, "00001_clock.sql") {
		t.Errorf("status after migrate:\n%s", out)
	}
	if out := migrate("up"); !strings.Contains(out, "4 shards") { // again: nothing to do
		t.Errorf("second migrate said %q", out)
	}
	if out := migrate("down-to", "0", "-confirm"); !strings.Contains(out, "rolled back") || !strings.Contains(out, "version 0") {
		t.Errorf("migrate down-to 0 -confirm said %q", out)
	}
	if got := runTables(t, dsn); len(got) != 0 {
		t.Errorf("tables after down: %v", got)
	}
	var stderr bytes.Buffer
	if err := run(ctx, []string{"migrate", "sideways"}, env, io.Discard, &stderr); err == nil || !strings.Contains(err.Error(), "sideways") {
		t.Errorf("migrate sideways: %v", err)
	}
}

func TestServeAndGracefulShutdown(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	addr := testenv.FreeAddr(t)
	env := runEnvOf(map[string]string{
		"CLOCKD_MYSQL_DSN":   dsn,
		"CLOCKD_HTTP_ADDR":   addr,
		"CLOCKD_AMQP_URL":    testenv.AMQPURL(t),
		"CLOCKD_INSTANCE_ID": testenv.Name("test-"),
		"CLOCKD_SHARDS":      "4",
		"CLOCKD_LOG_LEVEL":   "warn",
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testenv.SyncBuffer
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"serve"}, env, &stdout, &stderr) }()

	base := "http://" + addr
	client := &http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-errc:
			t.Fatalf("serve returned before it answered: %v\nstderr: %s", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve does not answer at %s\nstderr: %s", addr, stderr.String())
		}
	}

	post := func(body string) (int, map[string]any) {
		resp, err := client.Post(base+"/v1/clocks", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	body := `{"application":"order","business_id":"o-1","payload":"{}","delay":"1h"}`
	code, c := post(body)
	if code != 201 || c["status"] != "pending" {
		t.Fatalf("create: %d %v", code, c)
	}
	if code, again := post(body); code != 200 || again["id"] != c["id"] {
		t.Errorf("identical create: %d %v", code, again)
	}
	// Ready once MySQL and RabbitMQ both answer; the broker connection may
	// still be opening.
	for ready := false; !ready; {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ready = resp.StatusCode == 200
		if !ready && time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %s", resp.StatusCode, data)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, path := range []string{"/v1/clocks/order/o-1", "/metrics"} {
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
	}

	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("serve returned %v after the context ended\nstderr: %s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not stop within 30s of the context ending")
	}
	if _, err := client.Get(base + "/healthz"); err == nil {
		t.Errorf("the server still answers after run returned")
	}
	// The clock is in MySQL.
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM clock WHERE application = 'order' AND business_id = 'o-1'").Scan(&n); err != nil || n != 1 {
		t.Errorf("rows %d, %v", n, err)
	}
}

func TestBadConfigNamesTheKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		env   map[string]string
		args  []string
		wants []string
	}{
		{"bad duration", map[string]string{"CLOCKD_PRELOAD_WINDOW": "soon"}, nil, []string{"CLOCKD_PRELOAD_WINDOW", "preload.window"}},
		{"bad addr", map[string]string{"CLOCKD_HTTP_ADDR": "nowhere"}, nil, []string{"http.addr"}},
		{"dsn without database", map[string]string{"CLOCKD_MYSQL_DSN": "root:@tcp(127.0.0.1:3306)/"}, []string{"migrate"}, []string{"mysql.dsn"}},
		{"bad amqp url", map[string]string{"CLOCKD_AMQP_URL": "localhost:5672"}, nil, []string{"amqp.url"}},
		{"bad exchange", map[string]string{"CLOCKD_EXCHANGE": strings.Repeat("e", 300)}, nil, []string{"amqp.exchange"}},
		{"bad instance id", map[string]string{"CLOCKD_INSTANCE_ID": strings.Repeat("i", 200)}, nil, []string{"cluster.instance_id"}},
		{"bad shards", map[string]string{"CLOCKD_SHARDS": "-3"}, []string{"serve"}, []string{"clock.shards"}},
		// Refused before MySQL is reached (this one is not there): the
		// listen would fail only after the database was created and migrated.
		{"port out of range", map[string]string{"CLOCKD_HTTP_ADDR": "127.0.0.1:99999", "CLOCKD_MYSQL_DSN": "root:@tcp(127.0.0.1:1)/clock"},
			nil, []string{"http.addr", "99999"}},
		{"bad pprof addr", map[string]string{"CLOCKD_PPROF_ADDR": "garbage", "CLOCKD_MYSQL_DSN": "root:@tcp(127.0.0.1:1)/clock"},
			nil, []string{"http.pprof_addr", "garbage"}},
		{"decimal shards", map[string]string{"CLOCKD_SHARDS": "7.5"}, nil, []string{"CLOCKD_SHARDS", "clock.shards", "7.5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tt.args, runEnvOf(tt.env), &stdout, &stderr)
			if err == nil {
				t.Fatal("run accepted the bad value")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}

	t.Run("config file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "clockd.yaml")
		if err := os.WriteFile(path, []byte("preload:\n  window: whenever\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			args []string
			env  map[string]string
		}{
			{[]string{"-config", path, "serve"}, nil},
			{[]string{"serve", "-config", path}, nil},
			{[]string{"migrate"}, map[string]string{"CLOCKD_CONFIG": path}},
		} {
			err := run(context.Background(), c.args, runEnvOf(c.env), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "preload.window") {
				t.Errorf("%v %v: %v", c.args, c.env, err)
			}
		}
		err := run(context.Background(), []string{"-config", filepath.Join(t.TempDir(), "none.yaml")}, runEnvOf(nil), io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "none.yaml") {
			t.Errorf("missing config file: %v", err)
		}
	})
}

func TestOtherCommands(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"env"}, runEnvOf(nil), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"CLOCKD_HTTP_ADDR", "CLOCKD_MYSQL_DSN", "CLOCKD_AMQP_URL", "CLOCKD_EXCHANGE",
		"CLOCKD_PRELOAD_WINDOW", "CLOCKD_INSTANCE_ID"} {
		if !strings.Contains(stdout.String(), v) {
			t.Errorf("clockd env does not list %s", v)
		}
	}
	stdout.Reset()
	if err := run(context.Background(), []string{"help"}, runEnvOf(nil), &stdout, &stderr); err != nil ||
		!strings.Contains(stdout.String(), "migrate") {
		t.Errorf("help: %v %q", err, stdout.String())
	}
	if err := run(context.Background(), []string{"explode"}, runEnvOf(nil), io.Discard, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "explode") {
		t.Errorf("unknown command: %v", err)
	}
	if err := run(context.Background(), []string{"serve", "extra"}, runEnvOf(nil), io.Discard, io.Discard); err == nil {
		t.Errorf("serve with an argument accepted")
	}
	if err := run(context.Background(), []string{"-nosuchflag"}, runEnvOf(nil), io.Discard, io.Discard); err == nil {
		t.Errorf("unknown flag accepted")
	}
}

// Every command refuses arguments it does not take, before it reaches
// MySQL (the DSN here points nowhere); -h and --help print the usage on
// stdout and succeed, as 'clockd help' does; 'clockd env' lists
// CLOCKD_CONFIG too.
func TestArgumentsAndHelp(t *testing.T) {
	t.Parallel()
	env := runEnvOf(map[string]string{"CLOCKD_MYSQL_DSN": "root:@tcp(127.0.0.1:1)/clock"})
	for _, args := range [][]string{
		{"serve", "extra"}, {"extra"}, {"migrate", "status", "extra"}, {"migrate", "up", "extra"}, {"migrate", "down", "extra"},
		{"migrate", "down-to"}, {"migrate", "down-to", "3", "extra"}, {"migrate", "up", "-confirm"}, {"migrate", "-confirm"},
		{"serve", "-confirm"},
		{"migrate", "sideways"}, {"env", "extra"}, {"help", "extra"}, {"migrate", "status", "-config", "x.yaml"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, env, &stdout, &stderr)
		if err == nil || strings.Contains(err.Error(), "127.0.0.1:1") || stdout.Len() != 0 {
			t.Errorf("%v: %v, stdout %q; want refused before MySQL", args, err, stdout.String())
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}, {"-config", "x.yaml", "-h"}, {"serve", "-h"}, {"migrate", "--help"}} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, env, &stdout, &stderr); err != nil || !strings.HasPrefix(stdout.String(), "clockd — ") ||
			stderr.Len() != 0 {
			t.Errorf("%v: %v, stdout %q, stderr %q; want the usage on stdout and success", args, err, stdout.String(), stderr.String())
		}
	}
	for _, args := range [][]string{{"token", "create", "-h"}, {"token", "list", "--help"}, {"token", "help"}} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, env, &stdout, &stderr); err != nil || !strings.Contains(stdout.String(), "clockd token create --admin") {
			t.Errorf("%v: %v, stdout %q, stderr %q; want the token usage on stdout and success", args, err, stdout.String(), stderr.String())
		}
	}
	// A bad flag: the usage on stderr, the error once (main prints it).
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-nosuchflag"}, env, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "nosuchflag") || stdout.Len() != 0 ||
		!strings.HasPrefix(stderr.String(), "clockd — ") || strings.Contains(stderr.String(), "nosuchflag") {
		t.Errorf("-nosuchflag: %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if err := run(context.Background(), []string{"env"}, env, &stdout, io.Discard); err != nil ||
		!strings.Contains(stdout.String(), "CLOCKD_CONFIG\t-config\n") {
		t.Errorf("env: %v\n%s", err, stdout.String())
	}
}

// A migration's duration is logged as a string such as "13ms", as the
// README says every logged duration is, not as integer nanoseconds.
func TestMigrationLogDurations(t *testing.T) {
	t.Parallel()
	env := runEnvOf(map[string]string{"CLOCKD_MYSQL_DSN": testenv.MySQLDSN(t), "CLOCKD_SHARDS": "4", "CLOCKD_LOG_LEVEL": "info"})
	var stderr bytes.Buffer
	if err := run(context.Background(), []string{"migrate"}, env, io.Discard, &stderr); err != nil {
		t.Fatalf("migrate: %v\n%s", err, stderr.String())
	}
	applied := 0
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] != "migration applied" {
			continue
		}
		applied++
		s, ok := rec["duration"].(string)
		if _, err := time.ParseDuration(s); !ok || err != nil {
			t.Errorf("duration %#v in %s, want a string such as \"1.52s\"", rec["duration"], line)
		}
	}
	if applied == 0 {
		t.Fatalf("no \"migration applied\" line in\n%s", stderr.String())
	}
}
