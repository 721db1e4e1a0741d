package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/clockd/clockd/internal/config"
	"github.com/clockd/clockd/internal/mysql"
)

func migrate(ctx context.Context, cfg config.Config, log *slog.Logger, sub string, stdout io.Writer) error {
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
	case "down":
		if err := mysql.MigrateDown(ctx, db); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "all migrations rolled back")
	case "status":
		st, err := mysql.MigrationStatus(ctx, db)
		if err != nil {
			return err
		}
		for _, s := range st {
			fmt.Fprintf(stdout, "%05d %-8s %s\n", s.Source.Version, s.State, s.Source.Path)
		}
	default:
		return fmt.Errorf("unknown migrate command %q (up, status, down)", sub)
	}
	return nil
}
