package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
)

// realAPIOff is the real API (in process, on the test's own MySQL
// database) with auth off over plain HTTP.
func realAPIOff(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := mysql.Open(ctx, testenv.MySQLDSN(t), 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	log := slog.New(slog.DiscardHandler)
	if err := mysql.Migrate(ctx, db, log); err != nil {
		t.Fatal(err)
	}
	shards, err := mysql.SetupShards(ctx, db, 4)
	if err != nil {
		t.Fatal(err)
	}
	store := mysql.NewStore(db, mysql.StoreConfig{Shards: shards, Logger: log})
	t.Cleanup(store.Close)
	as := mysql.NewAuthStore(db)
	srv := httptest.NewServer(httpapi.New(httpapi.Options{
		Service: alarm.NewService(store, nil, time.Now, alarm.Limits{MaxPayloadBytes: 1 << 16}, 0), Logger: log,
		Auth:   auth.New(as, auth.Config{Mode: auth.ModeOff}),
		Quotas: auth.NewQuotas(as, auth.QuotaConfig{}),
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// ctl runs clockctl against addr.
func ctl(addr string, args ...string) result {
	var stdout, stderr bytes.Buffer
	c := &cli{getenv: env(), stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}
	code := c.run(context.Background(), append([]string{"-addr", addr}, args...))
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// TestClockctlTimeFormats: clockctl takes the RFC 3339 times clockd takes
// (README, "The API": "T and Z in either case"; RFC 3339 §5.6 allows t and
// z), for -at, -latest and a reschedule's -at: clockd accepts them
// (checked first here through the API), so clockctl must not refuse them
// as a usage error.
func TestClockctlTimeFormats(t *testing.T) {
	t.Parallel()
	addr := realAPIOff(t)
	// clockd itself takes the lower-case form.
	body := `{"application":"tf","business_id":"api","payload":"{}","ring_at":"2030-01-01t10:30:00.5z"}`
	resp, err := http.Post(addr+"/v1/clocks", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("clockd refused a lower-case RFC 3339 time: %d", resp.StatusCode)
	}
	for i, at := range []string{"2030-01-01t10:30:00Z", "2030-01-01T10:30:00z", "2030-01-01t10:30:00.250+02:00"} {
		r := ctl(addr, "create", "-app", "tf", "-id", "c"+string(rune('0'+i)), "-at", at, "-latest", strings.Replace(at, "2030-01-01", "2030-01-02", 1))
		if r.code != 0 {
			t.Errorf("clockctl create -at %s:\n%v", at, r)
		}
	}
	r := ctl(addr, "create", "-app", "tf", "-id", "r1", "-in", "1h")
	mustOK(t, r)
	if r := ctl(addr, "reschedule", "tf", "r1", "-at", "2031-05-05t05:05:05z"); r.code != 0 {
		t.Errorf("clockctl reschedule -at with lower case t/z:\n%v", r)
	}
}
