package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/config"
	"github.com/clockd/clockd/internal/mysql"
)

const tokenUsage = `Usage:
  clockd token create --admin [-name TEXT]                      a token of the admin kind
  clockd token create -app APP -scopes read,write [-name TEXT]  a token of one application
  clockd token list [-app APP]
  clockd token revoke ID
  clockd token help                                             this help (also -h)

Works on MySQL directly (mysql.dsn), without the API: this is how the first
admin token is made. create prints the secret alone on stdout, once; it is
stored only hashed and cannot be shown again. Revocation reaches running
instances within auth.cache_ttl.
`

// tokenCommand is "clockd token ...".
func tokenCommand(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, tokenUsage)
		return errors.New("token: give create, list or revoke")
	}
	sub, args := args[0], args[1:]
	if sub == "help" {
		fmt.Fprint(stdout, tokenUsage)
		return nil
	}
	fs := flag.NewFlagSet("clockd token "+sub, flag.ContinueOnError)
	// As in run: -h is the usage on stdout and success; a bad flag's error
	// is printed once, by main.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	admin := fs.Bool("admin", false, "create a token of the admin kind")
	app := fs.String("app", "", "the application of the token")
	scopes := fs.String("scopes", "", "comma-separated scopes: read, write")
	name := fs.String("name", "", "free text to tell the token apart")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, tokenUsage)
			return errHelpShown
		}
		fmt.Fprint(stderr, tokenUsage)
		return fmt.Errorf("token %s: %w", sub, err)
	}
	pos := fs.Args()
	open := func() (*auth.Authenticator, func(), error) {
		// the schema first, as serve does: migrated on connections without
		// a read timeout (an index build on a big table outlasts it) when
		// mysql.migrate_on_start is on, else only checked (found by review:
		// the token commands migrated whatever the setting said)
		if cfg.MySQL.MigrateOnStart {
			if err := mysql.MigrateDSN(ctx, cfg.MySQL.DSN, log); err != nil {
				return nil, nil, err
			}
		}
		db, err := mysql.Open(ctx, cfg.MySQL.DSN, 4)
		if err != nil {
			return nil, nil, err
		}
		if err := checkSchema(ctx, db, log); err != nil {
			db.Close()
			return nil, nil, err
		}
		return auth.New(mysql.NewAuthStore(db), auth.Config{Logger: log}), func() { db.Close() }, nil
	}
	switch sub {
	case "create":
		if len(pos) > 0 {
			return fmt.Errorf("token create: unexpected argument %q", pos[0])
		}
		n := auth.NewToken{Admin: *admin, Application: *app, Name: *name}
		for _, s := range strings.Split(*scopes, ",") {
			if s = strings.TrimSpace(s); s != "" {
				n.Scopes = append(n.Scopes, auth.Scope(s))
			}
		}
		if err := n.Check(); err != nil {
			return fmt.Errorf("token create: %w (see clockd token -h)", err)
		}
		a, done, err := open()
		if err != nil {
			return err
		}
		defer done()
		t, secret, err := a.CreateToken(ctx, n)
		if err != nil {
			return fmt.Errorf("token create: %w", err)
		}
		kind := "admin"
		if !t.Admin {
			kind = fmt.Sprintf("application %s, scopes %s", t.Application, *scopes)
		}
		fmt.Fprintf(stderr, "token %d created (%s); its secret, shown only now:\n", t.ID, kind)
		fmt.Fprintln(stdout, secret)
		return nil
	case "list":
		if len(pos) > 0 {
			return fmt.Errorf("token list: unexpected argument %q", pos[0])
		}
		a, done, err := open()
		if err != nil {
			return err
		}
		defer done()
		ts, err := a.ListTokens(ctx, *app)
		if err != nil {
			return fmt.Errorf("token list: %w", err)
		}
		printTokens(stdout, ts)
		return nil
	case "revoke":
		if len(pos) != 1 {
			return errors.New("token revoke: give one token id")
		}
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id <= 0 {
			return fmt.Errorf("token revoke: %q is not a token id", pos[0])
		}
		a, done, err := open()
		if err != nil {
			return err
		}
		defer done()
		t, err := a.RevokeToken(ctx, id)
		if err != nil {
			return fmt.Errorf("token revoke: %w", err)
		}
		fmt.Fprintf(stdout, "token %d revoked at %s\n", t.ID, t.RevokedAt.Format(time.RFC3339))
		return nil
	}
	fmt.Fprint(stderr, tokenUsage)
	return fmt.Errorf("token: unknown command %q", sub)
}

func printTokens(w io.Writer, ts []auth.Token) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tAPPLICATION\tSCOPES\tPREFIX\tNAME\tCREATED\tLAST USED\tREVOKED")
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	}
	for _, t := range ts {
		kind, app := "app", t.Application
		if t.Admin {
			kind, app = "admin", "*"
		}
		scopes := make([]string, len(t.Scopes))
		for i, s := range t.Scopes {
			scopes[i] = string(s)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, kind, app, strings.Join(scopes, ","), t.Prefix, t.Name,
			at(t.CreatedAt), at(t.LastUsedAt), at(t.RevokedAt))
	}
	tw.Flush()
}
