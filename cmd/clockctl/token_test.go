package main

import (
	"bytes"
	"context"
	"encoding/pem"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
)

const testAdmin = "clockctl-test-admin-token"

// realAPI is the real API in tokens mode over HTTPS, on the test's own
// database; it returns its URL and the file of its CA certificate.
func realAPI(t *testing.T) (string, string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(realHandler(t, auth.Config{Mode: auth.ModeTokens, AdminToken: testAdmin}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL, ca
}

// realAPIOff is the real API with auth off over plain HTTP.
func realAPIOff(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(realHandler(t, auth.Config{Mode: auth.ModeOff}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// realHandler is the real API (in process, on the test's own MySQL
// database) with authentication a.
func realHandler(t *testing.T, a auth.Config) http.Handler {
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
	return httpapi.New(httpapi.Options{
		Service: alarm.NewService(store, nil, time.Now, alarm.Limits{MaxPayloadBytes: 1 << 16}, 0), Logger: log,
		Auth:   auth.New(as, a),
		Quotas: auth.NewQuotas(as, auth.QuotaConfig{}),
	})
}

func TestTokenCommands(t *testing.T) {
	t.Parallel()
	url, ca := realAPI(t)
	env := map[string]string{"CLOCKD_ADDR": url, "CLOCKD_CACERT": ca}
	ctl := func(token string, args ...string) (int, string, string) {
		t.Helper()
		e := map[string]string{}
		for k, v := range env {
			e[k] = v
		}
		if token != "" {
			e["CLOCKD_TOKEN"] = token
		}
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, func(k string) string { return e[k] }, &stdout, &stderr)
		return code, strings.TrimSpace(stdout.String()), stderr.String()
	}
	code, secret, errOut := ctl(testAdmin, "token", "create", "-app", "order", "-scopes", "read,write", "-name", "order-service")
	if code != 0 || !strings.HasPrefix(secret, "clk_") || strings.Contains(secret, "\n") || !strings.Contains(errOut, "shown only now") {
		t.Fatalf("token create: %d %q %s", code, secret, errOut)
	}
	// The application token, from CLOCKD_TOKEN and from -token.
	if code, out, errOut := ctl(secret, "create", "-app", "order", "-id", "o-1", "-in", "30m", "-payload", "{}"); code != 0 {
		t.Fatalf("create with the token: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := ctl("", "-token", secret, "get", "order", "o-1"); code != 0 || !strings.Contains(out, "o-1") {
		t.Errorf("get with -token: %d %s %s", code, out, errOut)
	}
	if code, _, errOut := ctl("", "get", "order", "o-1"); code != exitError || !strings.Contains(errOut, "401") ||
		!strings.Contains(errOut, "CLOCKD_TOKEN") {
		t.Errorf("get without a token: %d %s", code, errOut)
	}
	// The server's errors, said once.
	if code, _, errOut := ctl("", "get", "order", "o-1"); code != exitError ||
		errOut != "clockctl: 401 unauthenticated: this call needs an Authorization: Bearer <token> header (give a token with -token or CLOCKD_TOKEN)\n" {
		t.Errorf("get without a token: %d %q", code, errOut)
	}
	if code, _, errOut := ctl(testAdmin, "pause", "cart", "nope"); code != exitError ||
		errOut != "clockctl: 404 not_found: pause clock cart/nope: not found\n" {
		t.Errorf("pause of a missing clock: %d %q", code, errOut)
	}
	if code, _, errOut := ctl(secret, "token", "list"); code != exitError || !strings.Contains(errOut, "403") {
		t.Errorf("token list with an application token: %d %s", code, errOut)
	}
	code, out, errOut := ctl(testAdmin, "token", "list")
	if code != 0 || !strings.Contains(out, "order-service") || strings.Contains(out, secret) {
		t.Fatalf("token list: %d %s %s", code, out, errOut)
	}
	var id string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "order-service") {
			id = strings.Fields(line)[0]
		}
	}
	if code, out, errOut := ctl(testAdmin, "token", "list", "-app", "order", "-json"); code != 0 || !strings.Contains(out, `"prefix"`) {
		t.Errorf("token list -json: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := ctl(testAdmin, "quota", "order", "-rate", "5"); code != 0 || !strings.Contains(out, `"creates_per_second": 5`) {
		t.Errorf("quota set: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := ctl(testAdmin, "token", "revoke", id); code != 0 || !strings.Contains(out, "revoked") {
		t.Fatalf("token revoke %s: %d %s %s", id, code, out, errOut)
	}
	if code, _, errOut := ctl(secret, "get", "order", "o-1"); code != exitError || !strings.Contains(errOut, "unauthenticated") {
		t.Errorf("get with a revoked token: %d %s", code, errOut)
	}
	if code, out, errOut := ctl(testAdmin, "token", "create", "-admin"); code != 0 || !strings.HasPrefix(out, "clk_") {
		t.Errorf("token create -admin: %d %s %s", code, out, errOut)
	}
	for _, args := range [][]string{{"token"}, {"token", "create"}, {"token", "create", "-app", "order"},
		{"token", "create", "-admin", "-app", "order"}, {"token", "revoke", "x"}, {"token", "wipe"}} {
		if code, _, _ := ctl(testAdmin, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
	// Without -cacert the self-signed certificate is refused.
	delete(env, "CLOCKD_CACERT")
	if code, _, errOut := ctl(testAdmin, "token", "list"); code != exitError || !strings.Contains(errOut, "certificate") {
		t.Errorf("HTTPS without the CA: %d %s", code, errOut)
	}
}
