// Command clockd is the alarm-clock server: REST API, preloader and ring
// loop. `clockd` or `clockd serve` runs it; `clockd migrate` applies the
// schema and exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"

	"github.com/clockd/clockd/internal/config"
	"github.com/clockd/clockd/internal/mysql"
)

func main() {
	tuneGC(os.Getenv)
	// The driver's logger is a global it reads without synchronisation: set
	// it here, before any goroutine runs; run names the slog logger it uses.
	if err := mysql.InstallDriverLogger(); err != nil {
		fmt.Fprintln(os.Stderr, "clockd:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "clockd:", err)
		}
		os.Exit(1)
	}
}

const usage = `clockd — durable one-shot clocks rung through RabbitMQ

Usage:
  clockd [-config PATH] [serve]          run the server (applies pending migrations first
                                         unless mysql.migrate_on_start is false)
  clockd [-config PATH] migrate [up]     apply the schema and exit
  clockd [-config PATH] migrate status   show applied migrations
  clockd [-config PATH] migrate down     roll back every migration (drops the tables!)
  clockd [-config PATH] token create --admin
                                         make an admin token on MySQL, without the API
                                         (also: token create -app APP -scopes read,write,
                                         token list, token revoke ID)
  clockd env                             list the environment variables and their keys

The configuration is config/clockd.yaml's keys with their defaults, the file named by
-config or CLOCKD_CONFIG, then environment variables (see 'clockd env').
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("clockd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	configPath := fs.String("config", getenv("CLOCKD_CONFIG"), "YAML configuration file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	cmd := "serve"
	if len(rest) > 0 {
		cmd, rest = rest[0], rest[1:]
		// flags may also follow the command
		if err := fs.Parse(rest); err != nil {
			return err
		}
		rest = fs.Args()
	}
	if cmd == "env" {
		names := config.EnvNames()
		for _, name := range slices.Sorted(maps.Keys(names)) {
			fmt.Fprintf(stdout, "%s\t%s\n", name, names[name])
		}
		return nil
	}
	cfg, err := config.Load(*configPath, getenv)
	if err != nil {
		return err
	}
	log := newLogger(cfg.Log, stderr)
	// The MySQL driver's own lines ("closing bad idle connection") go
	// through this logger too (installed in main), not raw to stderr.
	mysql.SetDriverLogger(log)
	switch cmd {
	case "serve":
		if len(rest) > 0 {
			return fmt.Errorf("serve takes no arguments, got %q", strings.Join(rest, " "))
		}
		return serve(ctx, cfg, log)
	case "migrate":
		sub := "up"
		if len(rest) > 0 {
			sub = rest[0]
		}
		return migrate(ctx, cfg, log, sub, stdout)
	case "token":
		return tokenCommand(ctx, cfg, log, rest, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// tuneGC trades a little memory for CPU unless the operator set GOGC or
// GOMEMLIMIT: clockd's live heap is small and bounded (the preload cap), and
// at high request rates the default GOGC=100 spends a tenth of the CPU on
// collection. The soft limit keeps the process well inside 300 MiB.
func tuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(200 << 20)
	}
}
