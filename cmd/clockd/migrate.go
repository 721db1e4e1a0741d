package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/config"
	"github.com/clockd/clockd/internal/mysql"
)

// migrateCommands are the subcommands of clockd migrate.
var migrateCommands = []string{"up", "up-to", "status", "down", "down-to"}

func migrate(ctx context.Context, cfg config.Config, log *slog.Logger, args []string, confirm bool, stdout io.Writer) error {
	sub := args[0]
	db, err := mysql.Open(ctx, cfg.MySQL.DSN, 4)
	if err != nil {
		return err
	}
	defer db.Close()
	switch sub {
	case "up":
		if err := mysql.MigrateDSN(ctx, cfg.MySQL.DSN, log); err != nil {
			return err
		}
		n, err := mysql.SetupShards(ctx, db, cfg.Clock.Shards)
		if err != nil {
			return err
		}
		have, want, err := mysql.SchemaVersions(ctx, db)
		if err != nil {
			return err
		}
		if have > want {
			fmt.Fprintf(stdout, "schema at version %d, newer than this clockd's newest migration %d: nothing applied, "+
				"and this clockd may not work with it; %d shards\n", have, want, n)
			return nil
		}
		fmt.Fprintf(stdout, "schema up to date (version %d); %d shards\n", have, n)
	case "up-to":
		v, err := migrationVersion("up-to", args[1])
		if err != nil {
			return err
		}
		if err := mysql.MigrateDSNUpTo(ctx, cfg.MySQL.DSN, log, v); err != nil {
			return err
		}
		have, want, err := mysql.SchemaVersions(ctx, db)
		if err != nil {
			return err
		}
		if have > v {
			fmt.Fprintf(stdout, "schema at version %d, past %d: nothing applied\n", have, v)
			return nil
		}
		if have >= want {
			fmt.Fprintf(stdout, "schema now at version %d, up to date\n", have)
			return nil
		}
		fmt.Fprintf(stdout, "schema now at version %d; the migrations after it are pending (clockd migrate applies them)\n", have)
	case "down", "down-to":
		return migrateDown(ctx, db, args, confirm, stdout)
	case "status":
		st, err := mysql.MigrationStatus(ctx, db)
		if err != nil {
			return err
		}
		for _, s := range st {
			fmt.Fprintf(stdout, "%05d %-8s %s\n", s.Source.Version, s.State, s.Source.Path)
		}
		// goose lists only the migrations this binary has
		if have, want, err := mysql.SchemaVersions(ctx, db); err == nil && have > want {
			fmt.Fprintf(stdout, "schema at version %d, newer than this clockd's newest migration %d (a newer clockd applied it)\n", have, want)
		}
	default:
		return fmt.Errorf("unknown migrate command %q (%s)", sub, strings.Join(migrateCommands, ", "))
	}
	return nil
}

// migrateDown rolls the schema back: one migration (down) or to a version
// (down-to VERSION). A rollback drops what its migrations added, with the
// data in it, and a clockd running on a schema rolled back under it fails;
// so it is refused while instances are live, and without -confirm it only
// says what it would do.
func migrateDown(ctx context.Context, db *sqlx.DB, args []string, confirm bool, stdout io.Writer) error {
	applied, err := mysql.AppliedVersions(ctx, db)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(stdout, "no migration is applied: nothing to roll back")
		return nil
	}
	// goose knows only this binary's migrations: on a schema a newer clockd
	// migrated it would name this binary's newest as the database's and
	// then fail with a bare "version not found". The newer migrations'
	// Down statements are in the newer binary only.
	have, want, err := mysql.SchemaVersions(ctx, db)
	if err != nil {
		return err
	}
	if have > want {
		return fmt.Errorf("migrate %s refused: the schema is at version %d, newer than this clockd's newest migration %d; "+
			"roll the newer migrations back with the clockd that applied them (its clockd migrate down-to %d) first; nothing was changed",
			args[0], have, want, want)
	}
	current := applied[len(applied)-1]
	var target int64
	if args[0] == "down" {
		if len(applied) > 1 {
			target = applied[len(applied)-2]
		}
	} else {
		v, err := migrationVersion("down-to", args[1])
		if err != nil {
			return err
		}
		if v >= current {
			fmt.Fprintf(stdout, "schema at version %d: nothing to roll back to version %d\n", current, v)
			return nil
		}
		target = v
	}
	var undone []string
	for _, v := range slices.Backward(applied) {
		if v > target {
			undone = append(undone, fmt.Sprintf("%05d", v))
		}
	}
	live, err := mysql.LiveInstances(ctx, db)
	if err != nil {
		return err
	}
	if len(live) > 0 {
		return fmt.Errorf("migrate %s refused: %d clockd instance(s) are live on this database (%s); stop them first "+
			"(a clockd whose schema is rolled back under it fails); nothing was changed", args[0], len(live), strings.Join(live, ", "))
	}
	what := fmt.Sprintf("roll back %s (schema version %d -> %d)", strings.Join(undone, ", "), current, target)
	if target == 0 {
		what += ", dropping every table of clockd: every clock, its history and every token"
	} else {
		what += ", dropping what those migrations added, with the data in it"
	}
	if !confirm {
		return fmt.Errorf("migrate %s would %s; nothing was changed: run it again with -confirm to do it", args[0], what)
	}
	res, err := mysql.MigrateDownTo(ctx, db, target)
	for _, r := range res {
		fmt.Fprintf(stdout, "rolled back %s\n", r.Source.Path)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema now at version %d\n", target)
	return nil
}

// migrationVersion parses the VERSION of migrate up-to and down-to.
func migrationVersion(sub, arg string) (int64, error) {
	v, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || v < 0 || arg != strconv.FormatInt(v, 10) || sub == "up-to" && v == 0 {
		return 0, fmt.Errorf("migrate %s: version %q is not a migration number such as 13 (clockd migrate status lists them)", sub, arg)
	}
	// up-to a version this binary has no migration of (a typo: up-to 40
	// for 4) is refused, not taken for "all of them" (found by review: it
	// ran the table copy of 00005 that up-to 4 is there to avoid); down-to
	// a version past the schema's rolls nothing back, and says so
	vs := mysql.MigrationVersions()
	if sub == "up-to" && !slices.Contains(vs, v) {
		return 0, fmt.Errorf("migrate %s: this clockd has no migration %d (it has %d to %d; clockd migrate status lists them)",
			sub, v, vs[0], vs[len(vs)-1])
	}
	return v, nil
}
