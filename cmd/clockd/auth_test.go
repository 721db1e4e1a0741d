package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// serveInProcess runs `clockd serve` with env in this process until the test
// ends, waits until client gets 200 from base+/healthz, and returns the
// process's stderr.
func serveInProcess(t *testing.T, env map[string]string, client *http.Client, base string) *testenv.SyncBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testenv.SyncBuffer
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, []string{"serve"}, runEnvOf(env), &stdout, &stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-errc:
		case <-time.After(30 * time.Second):
			t.Errorf("serve did not stop")
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return &stderr
			}
		}
		select {
		case err := <-errc:
			t.Fatalf("serve returned before it answered: %v\nstderr: %s", err, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve does not answer at %s\nstderr: %s", base, stderr.String())
		}
	}
}

func get(t *testing.T, client *http.Client, url, token string) (int, http.Header, string) {
	t.Helper()
	return request(t, client, "GET", url, token, nil)
}

// request sends body (nil: none; else as JSON) with token (if any) and
// returns the answer's status, headers and body.
func request(t *testing.T, client *http.Client, method, url, token string, body any) (int, http.Header, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(data)
}

// TestAuthOffAskedOnPublicAddress: on an address that is not loopback the
// default is tokens, and CLOCKD_AUTH_MODE=off, asked for by name, starts
// (SPEC: "off on a non-loopback address must be asked for explicitly"; a
// second variable was required to confirm it, found by review), with a
// warning at start unless CLOCKD_AUTH_ALLOW_OFF_ON_PUBLIC acknowledges it.
func TestAuthOffAskedOnPublicAddress(t *testing.T) {
	t.Parallel()
	for _, allow := range []string{"", "true"} {
		e := newEnv(t)
		_, port, err := net.SplitHostPort(testenv.FreeAddr(t))
		if err != nil {
			t.Fatal(err)
		}
		vars := e.vars(map[string]string{"CLOCKD_HTTP_ADDR": "0.0.0.0:" + port, "CLOCKD_AUTH_MODE": "off"})
		if allow != "" {
			vars["CLOCKD_AUTH_ALLOW_OFF_ON_PUBLIC"] = allow
		}
		d := testenv.LaunchClockd(t, vars)
		base := "http://127.0.0.1:" + port
		deadline := time.Now().Add(30 * time.Second)
		for {
			if resp, err := http.Get(base + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("clockd with CLOCKD_AUTH_MODE=off on 0.0.0.0:%s is not ready:\n%s", port, d.Logs())
			}
			time.Sleep(100 * time.Millisecond)
		}
		resp, err := http.Post(base+"/v1/clocks", "application/json",
			strings.NewReader(`{"application":"order","business_id":"o-1","payload":"p","delay":"1h"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Errorf("create without a token, auth off: %d, want 201", resp.StatusCode)
		}
		warned := strings.Contains(d.Logs(), "auth is off on an address that is not loopback")
		if warned != (allow == "") {
			t.Errorf("allow_off_on_public %q: warned %v, want %v:\n%s", allow, warned, allow == "", d.Logs())
		}
	}
}

// TestTokensOnPublicAddress: on an address that is not loopback clockd runs
// with tokens by default; the first admin token comes from `clockd token
// create --admin`; a token revoked behind the server's back (another
// instance, the CLI) stops working within auth.cache_ttl.
func TestTokensOnPublicAddress(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	env := map[string]string{"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_LOG_LEVEL": "warn", "CLOCKD_SHARDS": "4",
		"CLOCKD_AMQP_URL": testenv.AMQPURL(t), "CLOCKD_EXCHANGE": testenv.Name("clock.ring.test-"),
		"CLOCKD_INSTANCE_ID": testenv.Name("test-"), "CLOCKD_AUTH_CACHE_TTL": "500ms"}
	testenv.DeleteExchangeOnCleanup(t, env["CLOCKD_AMQP_URL"], env["CLOCKD_EXCHANGE"])
	cli := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, runEnvOf(env), &stdout, &stderr); err != nil {
			t.Fatalf("clockd %v: %v\n%s", args, err, stderr.String())
		}
		return strings.TrimSpace(stdout.String())
	}
	admin := cli("token", "create", "--admin", "-name", "bootstrap")
	if !strings.HasPrefix(admin, "clk_") || strings.Contains(admin, "\n") {
		t.Fatalf("token create printed %q, want the secret alone", admin)
	}
	app := cli("token", "create", "-app", "order", "-scopes", "read,write")
	if list := cli("token", "list"); !strings.Contains(list, "admin") || !strings.Contains(list, "order") ||
		strings.Contains(list, admin) || strings.Contains(list, app) {
		t.Errorf("token list:\n%s", list)
	}

	port := strings.TrimPrefix(testenv.FreeAddr(t), "127.0.0.1:")
	env["CLOCKD_HTTP_ADDR"] = "0.0.0.0:" + port
	base := "http://127.0.0.1:" + port
	client := &http.Client{Timeout: 10 * time.Second}
	serveInProcess(t, env, client, base)

	for _, path := range []string{"/v1/clocks", "/metrics", "/v1/cluster", "/v1/tokens"} {
		code, h, body := get(t, client, base+path, "")
		if code != 401 || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") || !strings.Contains(body, "unauthenticated") {
			t.Errorf("GET %s without a token: %d %q %s", path, code, h.Get("WWW-Authenticate"), body)
		}
		if code, _, body := get(t, client, base+path, admin); code != 200 {
			t.Errorf("GET %s as admin: %d %s", path, code, body)
		}
	}
	for _, path := range []string{"/metrics", "/v1/cluster", "/v1/tokens"} {
		if code, _, body := get(t, client, base+path, app); code != 403 {
			t.Errorf("GET %s with an application token: %d %s, want 403", path, code, body)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _, _ := get(t, client, base+path, ""); code != 200 && !(path == "/readyz" && code == 503) {
			t.Errorf("GET %s without a token: %d", path, code)
		}
	}
	if code, _, body := get(t, client, base+"/v1/clocks?application=order", app); code != 200 {
		t.Fatalf("own application: %d %s", code, body)
	}
	// Revoked through the CLI (not this server): refused within the TTL.
	var id string
	for _, line := range strings.Split(cli("token", "list", "-app", "order"), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] != "ID" {
			id = f[0]
		}
	}
	cli("token", "revoke", id)
	deadline := time.Now().Add(3 * time.Second)
	for {
		code, _, _ := get(t, client, base+"/v1/clocks?application=order", app)
		if code == 401 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("revoked token still answered %d after 3s (auth.cache_ttl 500ms)", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "clockd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestHTTPS: with a certificate and key configured the API is served over
// HTTPS only.
func TestHTTPS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := selfSigned(t)
	addr := testenv.FreeAddr(t)
	env := map[string]string{"CLOCKD_MYSQL_DSN": testenv.MySQLDSN(t), "CLOCKD_LOG_LEVEL": "warn", "CLOCKD_SHARDS": "4",
		"CLOCKD_AMQP_URL": testenv.AMQPURL(t), "CLOCKD_EXCHANGE": testenv.Name("clock.ring.test-"),
		"CLOCKD_INSTANCE_ID": testenv.Name("test-"), "CLOCKD_HTTP_ADDR": addr,
		"CLOCKD_HTTP_TLS_CERT_FILE": certFile, "CLOCKD_HTTP_TLS_KEY_FILE": keyFile}
	testenv.DeleteExchangeOnCleanup(t, env["CLOCKD_AMQP_URL"], env["CLOCKD_EXCHANGE"])
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	serveInProcess(t, env, client, "https://"+addr)
	resp, err := client.Post("https://"+addr+"/v1/clocks", "application/json",
		strings.NewReader(`{"application":"order","business_id":"tls-1","payload":"{}","delay":"1h"}`))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || resp.TLS == nil {
		t.Errorf("create over HTTPS: %d %s", resp.StatusCode, data)
	}
	if code, _, _ := get(t, &http.Client{Timeout: 5 * time.Second}, "http://"+addr+"/healthz", ""); code == 200 {
		t.Errorf("plain HTTP answered 200 on the HTTPS port")
	}

	// A certificate that cannot be loaded is refused at start, naming the key.
	bad := map[string]string{}
	for k, v := range env {
		bad[k] = v
	}
	bad["CLOCKD_HTTP_ADDR"] = testenv.FreeAddr(t)
	bad["CLOCKD_HTTP_TLS_KEY_FILE"] = certFile // not a key
	err = run(context.Background(), []string{"serve"}, runEnvOf(bad), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "http.tls_") {
		t.Errorf("bad key file: %v, want an error naming http.tls_cert_file / http.tls_key_file", err)
	}
}
