package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/lograte"
	"github.com/clockd/clockd/internal/testenv"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func TestDriverLoggerWritesSlog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		args   []any
		detail string
	}{
		{"as the driver logs a bad idle connection", []any{"closing bad idle connection: ", io.EOF}, "closing bad idle connection: EOF"},
		{"an error alone", []any{errors.New("invalid connection")}, "invalid connection"},
		{"with a newline", []any{"could not use requested auth plugin 'x': ", "unknown\n"}, "could not use requested auth plugin 'x': unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			DriverLogger{Log: slog.New(slog.NewJSONHandler(&buf, nil))}.Print(tt.args...)
			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("not one JSON line: %q: %v", buf.String(), err)
			}
			if rec["level"] != "WARN" || rec["msg"] != "mysql driver" || rec["detail"] != tt.detail {
				t.Errorf("got %v, want a WARN with detail %q", rec, tt.detail)
			}
		})
	}
}

// The driver's own line about a connection the server closed while it was
// idle goes through slog, not to stderr with a "[mysql]" prefix.
func TestDriverLogsGoThroughSlog(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	var buf lockedBuffer
	// Not parallel: no other test parses a DSN while the global changes.
	if err := InstallDriverLogger(); err != nil {
		t.Fatal(err)
	}
	SetDriverLogger(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() {
		SetDriverLogger(nil)
		_ = mysql.SetLogger(log.New(os.Stderr, "[mysql] ", log.Ldate|log.Ltime))
	})

	db, err := sql.Open("mysql", dsn) // parses the DSN: takes the logger now set
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var id int64
	if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "KILL CONNECTION ?", id); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(buf.String(), "closing bad idle connection") && ctx.Err() == nil {
		_ = db.PingContext(ctx) // finds the idle connection dead, logs it, dials anew
		time.Sleep(20 * time.Millisecond)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("driver log %q is not a JSON line: %v", line, err)
		}
		detail, _ := rec["detail"].(string)
		found = found || rec["msg"] == "mysql driver" && strings.Contains(detail, "closing bad idle connection")
	}
	if !found {
		t.Errorf("no slog line for the bad idle connection in %q", buf.String())
	}
}

// In an outage every pooled connection logs the same at once: one WARN per
// 10 s, the others at DEBUG and counted in the next WARN.
func TestDriverLoggerLimitsItsWarnings(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Unix(1e9, 0)
	l := DriverLogger{Log: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Rate: lograte.New(10*time.Second, func() time.Time { return now })}
	for range 26 {
		l.Print("packets.go:58 read tcp: i/o timeout")
	}
	now = now.Add(11 * time.Second)
	l.Print("packets.go:58 read tcp: i/o timeout")
	levels := map[string]int{}
	var last map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		levels[rec["level"].(string)]++
		if rec["level"] == "WARN" {
			last = rec
		}
	}
	if levels["WARN"] != 2 || levels["DEBUG"] != 25 || last["like_lines_not_logged"] != float64(25) {
		t.Errorf("levels %v, last WARN %v; want 2 WARN (the second counting 25 held back) and 25 DEBUG", levels, last)
	}
}
