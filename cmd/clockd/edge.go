package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/config"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/mysql"
)

// newAuth wires the authenticator and the quotas on the database; a token
// revoked through this instance is told to the others by onRevoke.
func newAuth(cfg config.Config, db *sqlx.DB, log *slog.Logger, onRevoke func(ctx context.Context, id int64)) (*auth.Authenticator, *auth.Quotas) {
	store := mysql.NewAuthStore(db).WithResolveTimeout(cfg.MySQL.ResolveTimeout)
	mode := auth.Mode(cfg.AuthMode())
	if mode == auth.ModeOff && !config.IsLoopback(cfg.HTTP.Addr) && !cfg.Auth.AllowOffOnPublic {
		log.Warn("auth is off on an address that is not loopback: anyone who reaches it may use every application's clocks (auth.allow_off_on_public: true says something in front of clockd authenticates, and silences this)",
			"addr", cfg.HTTP.Addr)
	}
	a := auth.New(store, auth.Config{Mode: mode, AdminToken: cfg.Auth.AdminToken, CacheTTL: cfg.Auth.CacheTTL, Logger: log,
		OnRevoke: onRevoke})
	q := auth.NewQuotas(store, auth.QuotaConfig{CacheTTL: cfg.Auth.CacheTTL})
	return a, q
}

// newServer is the HTTP server of the API with the edge limits of the
// configuration, and HTTPS when a certificate is configured.
func newServer(cfg config.Config, h http.Handler, log *slog.Logger) (*http.Server, error) {
	sc := httpapi.ServerConfig{
		ReadTimeout: cfg.HTTP.ReadTimeout, ReadHeaderTimeout: cfg.HTTP.ReadHeaderTimeout,
		WriteTimeout: cfg.HTTP.WriteTimeout, IdleTimeout: cfg.HTTP.IdleTimeout, MaxHeaderBytes: cfg.HTTP.MaxHeaderBytes,
	}
	if cfg.HTTP.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.HTTP.TLSCertFile, cfg.HTTP.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("config: http.tls_cert_file / http.tls_key_file: %w", err)
		}
		sc.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	return httpapi.NewServer(h, sc, log), nil
}

// serveOn serves srv on ln, with TLS when it has a TLS configuration.
func serveOn(srv *http.Server, ln net.Listener) error {
	if srv.TLSConfig != nil {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}
