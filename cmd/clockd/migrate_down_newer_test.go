package main

import (
	"context"
	"strings"
	"testing"

	"github.com/clockd/clockd/internal/testenv"
)

// clockd migrate down and down-to on a schema a newer clockd migrated are
// refused, naming the database's version and this binary's newest, as
// clockd migrate and migrate status say it: this binary has not the newer
// migrations' Down statements, and goose, which knows only this binary's
// migrations, announced a rollback of this binary's newest (a version the
// database is not at) and then failed with a bare "version not found".
func TestMigrateDownOnASchemaNewerThanTheBinary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.openDB(t)
	if _, err := gooseProvider(t, db).Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	latest := latestSchemaVersion(t, db)
	future := latest + 1
	mustExec(t, db, "INSERT INTO goose_db_version (version_id, is_applied) VALUES (?, 1)", future)
	env := runEnvOf(map[string]string{"CLOCKD_MYSQL_DSN": e.DSN, "CLOCKD_SHARDS": "4"})
	for _, args := range [][]string{{"down"}, {"down", "-confirm"}, {"down-to", "13", "-confirm"}} {
		var stdout, stderr testenv.SyncBuffer
		err := run(context.Background(), append([]string{"migrate"}, args...), env, &stdout, &stderr)
		out := stdout.String() + stderr.String()
		if err != nil {
			out += err.Error()
		}
		if err == nil {
			t.Errorf("clockd migrate %s on a schema newer than the binary succeeded: %q", strings.Join(args, " "), strings.TrimSpace(out))
		}
		if !mentionsVersion(out, future) {
			t.Errorf("clockd migrate %s on a schema at version %d (this binary's newest: %d) says nothing of version %d: %q",
				strings.Join(args, " "), future, latest, future, strings.TrimSpace(out))
		}
	}
	if v, err := gooseProvider(t, db).GetDBVersion(context.Background()); err != nil || v != future {
		t.Errorf("the refused rollbacks changed the schema: version %d (%v), want %d", v, err, future)
	}
}
