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
	// SIGHUP too (a closed terminal, a habit of "reload"): clockd has nothing
	// to reload, and Go's default for it is to die without a word, leaving
	// leases held and claimed clocks firing
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "clockd:", err)
		os.Exit(1)
	}
}

const usage = `clockd — durable one-shot clocks rung through RabbitMQ

Usage:
  clockd [-config PATH] [serve]          run the server (applies pending migrations first
                                         unless mysql.migrate_on_start is false)
  clockd [-config PATH] migrate [up]     apply the schema and exit
  clockd [-config PATH] migrate up-to VERSION
                                         apply the pending migrations up to VERSION only
  clockd [-config PATH] migrate status   show applied migrations
  clockd [-config PATH] migrate down [-confirm]
                                         roll back the newest migration
  clockd [-config PATH] migrate down-to VERSION [-confirm]
                                         roll back to VERSION (0 drops every table, with
                                         every clock); both say what they would roll back
                                         and change nothing without -confirm, and both
                                         refuse while clockd instances are live
  clockd [-config PATH] token create --admin
                                         make an admin token on MySQL, without the API
                                         (also: token create -app APP -scopes read,write,
                                         token list, token revoke ID)
  clockd env                             list the environment variables and their keys
  clockd help                            show this help (also -h)

The configuration is config/clockd.yaml's keys with their defaults, the file named by
-config or CLOCKD_CONFIG, then environment variables (see 'clockd env').
`

// errHelpShown says -h or --help printed a usage (run's or tokenCommand's):
// run then stops with success.
var errHelpShown = errors.New("help shown")

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("clockd", flag.ContinueOnError)
	// -h and --help print the usage on stdout and succeed, like 'clockd
	// help'; after a bad flag it goes to stderr, and the error is printed
	// once, by main (the flag package would print it too).
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	configPath := fs.String("config", getenv("CLOCKD_CONFIG"), "YAML configuration file")
	confirm := fs.Bool("confirm", false, "do the rollback that migrate down or down-to describes")
	parse := func(args []string) error {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			fmt.Fprint(stdout, usage)
			return errHelpShown
		case err != nil:
			fmt.Fprint(stderr, usage)
		}
		return err
	}
	if err := parse(args); err != nil {
		return noHelpError(err)
	}
	rest := fs.Args()
	cmd := "serve"
	if len(rest) > 0 {
		cmd, rest = rest[0], rest[1:]
		// flags may also follow the command, and but for token (which
		// parses its own after its subcommand) its arguments too
		// (clockd migrate down -confirm)
		var positional []string
		for {
			if err := parse(rest); err != nil {
				return noHelpError(err)
			}
			if rest = fs.Args(); len(rest) == 0 || cmd == "token" {
				break
			}
			positional, rest = append(positional, rest[0]), rest[1:]
		}
		rest = append(positional, rest...)
	}
	// Arguments are checked before the configuration is loaded and the
	// database is reached, the same way for every command.
	maxArgs := 0
	switch cmd {
	case "serve", "env", "help":
	case "migrate":
		maxArgs = 1
		if len(rest) > 0 && !slices.Contains(migrateCommands, rest[0]) {
			return fmt.Errorf("unknown migrate command %q (%s)", rest[0], strings.Join(migrateCommands, ", "))
		}
		if len(rest) > 0 && (rest[0] == "down-to" || rest[0] == "up-to") {
			if len(rest) < 2 {
				return fmt.Errorf("migrate %s: which version? (clockd migrate status lists them)", rest[0])
			}
			maxArgs = 2
		}
	case "token":
		maxArgs = len(rest) // tokenCommand checks its own
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
	if len(rest) > maxArgs {
		return fmt.Errorf("%s: unexpected argument %q (see clockd help)", cmd, rest[maxArgs])
	}
	if *confirm && (cmd != "migrate" || len(rest) == 0 || !strings.HasPrefix(rest[0], "down")) {
		return errors.New("-confirm is for clockd migrate down and down-to only")
	}
	switch cmd {
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	case "env":
		names := config.EnvNames()
		// Not a key of the file: the file itself (-config).
		names["CLOCKD_CONFIG"] = "-config"
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
	for _, name := range config.UnknownEnv(environ()) {
		log.Warn("environment variable not understood, ignored (clockd env lists the ones it reads)", "name", name)
	}
	// The MySQL driver's own lines ("closing bad idle connection") go
	// through this logger too (installed in main), not raw to stderr.
	mysql.SetDriverLogger(log)
	switch cmd {
	case "migrate":
		if len(rest) == 0 {
			rest = []string{"up"}
		}
		return migrate(ctx, cfg, log, rest, *confirm, stdout)
	case "token":
		return noHelpError(tokenCommand(ctx, cfg, log, rest, stdout, stderr))
	}
	if err := serve(ctx, cfg, log); err != nil {
		// in the log too, where a pipeline that reads JSON lines sees why
		// the server did not start or stopped (main prints it plainly)
		log.Error("clockd stopped", "err", err)
		return err
	}
	return nil
}

// noHelpError turns the end of a -h into success.
func noHelpError(err error) error {
	if errors.Is(err, errHelpShown) {
		return nil
	}
	return err
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationString}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// durationString writes a time.Duration as "1.5s" (README: durations are
// strings), not as JSON's integer nanoseconds: a log line that passes one
// without .String() still reads right (found by review: "for":11000000000).
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
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

// environ is the process's environment: a test replaces it (run itself
// reads settings through getenv).
var environ = os.Environ
