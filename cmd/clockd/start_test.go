package main

import (
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// TestConcurrentFirstStart is issue 8: a Deployment with several replicas
// starts every clockd at the same moment on an empty database. Each one
// migrates at start; all must come up, and the schema is applied once.
func TestConcurrentFirstStart(t *testing.T) {
	e := newEnv(t)
	const instances = 4
	nodes := make([]*testenv.Clockd, instances)
	for i := range nodes {
		nodes[i] = testenv.LaunchClockd(t, e.vars(map[string]string{
			"CLOCKD_INSTANCE_ID": string(rune('a' + i)), "CLOCKD_LOG_LEVEL": "info",
		}))
	}
	for _, n := range nodes {
		n.WaitReady(90 * time.Second)
	}

	db := e.openDB(t)
	rows, err := db.Query("SELECT version_id, COUNT(*) FROM goose_db_version GROUP BY version_id ORDER BY version_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var versions int
	for rows.Next() {
		var v int64
		var n int
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		versions++
		if n != 1 {
			t.Errorf("goose_db_version: version %d recorded %d times", v, n)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if versions < 2 { // goose's version 0 and 00001 at least
		t.Errorf("goose_db_version holds %d versions", versions)
	}
	// Exactly one instance applied each migration; the others found the
	// schema up to date once they had the lock.
	applied := 0
	for _, n := range nodes {
		applied += strings.Count(n.Logs(), `msg="migration applied"`)
	}
	if applied != versions-1 {
		t.Errorf("%d \"migration applied\" log lines over %d instances, want %d", applied, instances, versions-1)
	}
}
