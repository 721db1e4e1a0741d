package mysql_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
)

// TestMigrateConcurrentFirstStart is issue 8: several instances started
// together on an empty database (a Deployment with 3 replicas) all migrate
// at once. Each has its own pool, as separate processes would; every one
// must succeed and the schema must be applied exactly once.
func TestMigrateConcurrentFirstStart(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	schema := testenv.DatabaseName(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const instances = 4
	dbs := make([]*sqlx.DB, instances)
	for i := range dbs {
		db, err := mysql.Open(ctx, dsn, 4)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { db.Close() })
		dbs[i] = db
	}
	log := slog.New(slog.DiscardHandler)
	start := make(chan struct{})
	errs := make([]error, instances)
	shards := make([]int, instances)
	var wg sync.WaitGroup
	for i, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if errs[i] = mysql.Migrate(ctx, db, log); errs[i] != nil {
				return
			}
			shards[i], errs[i] = mysql.SetupShards(ctx, db, 4+i)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("instance %d: %v", i, err)
		}
	}
	if t.Failed() {
		return
	}
	// One shard count won and every instance agrees on it.
	for i, n := range shards {
		if n != shards[0] {
			t.Errorf("instance %d sees %d shards, instance 0 sees %d", i, n, shards[0])
		}
	}
	db := dbs[0]
	if got := ourTables(t, db, schema); strings.Join(got, ",") != strings.Join(schemaTables, ",") {
		t.Errorf("tables %v, want %v", got, schemaTables)
	}
	var versions []struct {
		Version int64 `db:"version_id"`
		N       int   `db:"n"`
	}
	if err := db.Select(&versions, `SELECT version_id, COUNT(*) AS n FROM goose_db_version
		GROUP BY version_id ORDER BY version_id`); err != nil {
		t.Fatal(err)
	}
	if len(versions) < 2 { // version 0 (goose's own) and at least 00001
		t.Errorf("goose_db_version holds %+v", versions)
	}
	for _, v := range versions {
		if v.N != 1 {
			t.Errorf("version %d recorded %d times", v.Version, v.N)
		}
	}
	var rows int
	if err := db.Get(&rows, "SELECT COUNT(*) FROM clock_shard"); err != nil || rows != shards[0] {
		t.Errorf("clock_shard has %d rows (%v), want %d", rows, err, shards[0])
	}
}
