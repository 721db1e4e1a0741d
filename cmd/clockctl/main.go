// Command clockctl is the command-line client of clockd: it creates, reads,
// cancels, reschedules, replays and lists clocks over the REST API, shows the
// cluster, and binds an application's queue to the ring exchange.
//
// Exit status: 0 on success, 1 when the server or the broker refused or could
// not be reached, 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

const defaultAddr = "http://127.0.0.1:8080"

// defaultTimeout bounds a request, as the client package's per-attempt
// timeout does: more than clockd's longest answer (mysql.request_timeout
// plus mysql.resolve_timeout, 35 s by default), so that a change made
// while MySQL stalls gets clockd's definite answer rather than an unknown
// outcome. Ctrl-C ends a request sooner.
const defaultTimeout = 40 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one clockctl invocation and returns its exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c := &cli{getenv: getenv, stdin: os.Stdin, stdout: stdout, stderr: stderr}
	return c.run(ctx, args)
}

// cli holds what one invocation reads from and writes to.
type cli struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer

	addr    string
	timeout time.Duration
	token   string
	cacert  string
}

// usageError is a mistake on the command line: it is printed with a hint to
// the command's help and exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// runFunc runs a subcommand with its positional arguments, after its flags
// have been parsed.
type runFunc func(ctx context.Context, pos []string) error

// command is one subcommand.
type command struct {
	name    string
	summary string
	// help is shown by -h before the flag list: usage line, description and
	// examples.
	help string
	// setup defines the command's flags on fs and returns the function that
	// runs it.
	setup func(c *cli, fs *flag.FlagSet) runFunc
}

func commands() []command {
	return []command{
		createCommand(),
		getCommand(),
		cancelCommand(),
		rescheduleCommand(),
		replayCommand(),
		pauseCommand(),
		resumeCommand(),
		listCommand(),
		clusterCommand(),
		bindCommand(),
		watchCommand(),
		tokenCommand(),
		quotaCommand(),
	}
}

func findCommand(name string) (command, bool) {
	for _, cmd := range commands() {
		if cmd.name == name {
			return cmd, true
		}
	}
	return command{}, false
}

func (c *cli) mainUsage(w io.Writer) {
	fmt.Fprintf(w, `clockctl is the command-line client of clockd.

Usage:
  clockctl [global flags] <command> [flags] [arguments]

Commands:
`)
	for _, cmd := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintf(w, `  help        show the help of a command

Global flags (before the command):
  -addr URL        clockd base URL (default $CLOCKD_ADDR, else %s)
  -timeout D       timeout of each request (default 40s, more than clockd's longest
                   answer; 0 means none)
  -token T         API token, sent as Authorization: Bearer (default $CLOCKD_TOKEN);
                   needed when clockd runs with auth.mode tokens
  -cacert FILE     trust this CA for an https:// -addr (default $CLOCKD_CACERT)

Examples:
  clockctl create -app order -id o-123 -in 30m -payload '{"order":123}'
  clockctl -addr http://clockd:8080 get order o-123
  clockctl list -app order -status pending -all
  clockctl bind -app order -quorum
  CLOCKD_TOKEN=clk_... clockctl token create -app order -scopes read,write

Run 'clockctl <command> -h' for the flags of a command.
Exit status: 0 success, 1 error from the server or the broker, 2 usage error.
`, defaultAddr)
}

func (c *cli) run(ctx context.Context, args []string) int {
	addrDefault := c.getenv("CLOCKD_ADDR")
	if addrDefault == "" {
		addrDefault = defaultAddr
	}
	fs := flag.NewFlagSet("clockctl", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {}
	fs.StringVar(&c.addr, "addr", addrDefault, "clockd base URL")
	fs.DurationVar(&c.timeout, "timeout", defaultTimeout, "timeout of each request")
	fs.StringVar(&c.token, "token", c.getenv("CLOCKD_TOKEN"), "API token")
	fs.StringVar(&c.cacert, "cacert", c.getenv("CLOCKD_CACERT"), "PEM file of the CA that signed clockd's HTTPS certificate")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.mainUsage(c.stdout)
			return exitOK
		}
		fmt.Fprintln(c.stderr, "Run 'clockctl -h' for usage.")
		return exitUsage
	}
	if c.timeout < 0 {
		fmt.Fprintln(c.stderr, "clockctl: -timeout must not be negative")
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		c.mainUsage(c.stderr)
		return exitUsage
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		return c.help(rest)
	}
	cmd, ok := findCommand(name)
	if !ok {
		fmt.Fprintf(c.stderr, "clockctl: unknown command %q\nRun 'clockctl -h' for usage.\n", name)
		return exitUsage
	}
	cfs := flag.NewFlagSet("clockctl "+cmd.name, flag.ContinueOnError)
	cfs.SetOutput(c.stderr)
	cfs.Usage = func() {}
	runCmd := cmd.setup(c, cfs)
	pos, err := parseInterspersed(cfs, rest)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(c.stdout, cmd, cfs)
			return exitOK
		}
		// The flag package has already printed the error.
		fmt.Fprintf(c.stderr, "Run 'clockctl %s -h' for usage.\n", name)
		return exitUsage
	}
	if err := runCmd(ctx, pos); err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(c.stderr, "clockctl %s: %s\nRun 'clockctl %s -h' for usage.\n", name, ue.msg, name)
			return exitUsage
		}
		fmt.Fprintf(c.stderr, "clockctl: %v\n", err)
		return exitError
	}
	return exitOK
}

func (c *cli) help(args []string) int {
	if len(args) == 0 {
		c.mainUsage(c.stdout)
		return exitOK
	}
	cmd, ok := findCommand(args[0])
	if !ok {
		fmt.Fprintf(c.stderr, "clockctl help: unknown command %q\n", args[0])
		return exitUsage
	}
	fs := flag.NewFlagSet("clockctl "+cmd.name, flag.ContinueOnError)
	cmd.setup(c, fs)
	printHelp(c.stdout, cmd, fs)
	return exitOK
}

// printHelp prints a command's help text and its flags.
func printHelp(w io.Writer, cmd command, fs *flag.FlagSet) {
	fmt.Fprint(w, strings.TrimLeft(cmd.help, "\n"))
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w, "\nFlags:")
		out := fs.Output()
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
}

// parseInterspersed parses flags that may appear before, between and after
// positional arguments ("get order o-1" and "reschedule order o-1 -in 5m"
// both work). After "--" everything is positional, so a business id that
// starts with "-" can be given as "-- -odd-id".
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" &&
			(consumed < 2 || !takesValue(fs, args[consumed-2])) {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// takesValue reports whether arg is a flag of fs written without "=" that
// consumes the next argument as its value.
func takesValue(fs *flag.FlagSet, arg string) bool {
	if !strings.HasPrefix(arg, "-") || arg == "-" || arg == "--" || strings.Contains(arg, "=") {
		return false
	}
	f := fs.Lookup(strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-"))
	if f == nil {
		return false
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return false
	}
	return true
}
