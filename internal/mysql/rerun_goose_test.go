package mysql

import (
	"testing"

	"github.com/go-sql-driver/mysql"
)

// goose's version table is goose's to create: when another instance
// created it at the same moment, goose sees the error and looks again. Taken
// for a statement of a cut migration that was applied already, the
// creation went on and inserted a second version-0 row (a CI run of four
// instances started at once). A table of a migration still may be.
func TestGooseVersionTableIsNoCutMigration(t *testing.T) {
	exists := &mysql.MySQLError{Number: 1050, Message: "Table 'goose_db_version' already exists"}
	if mayBeApplied("CREATE TABLE goose_db_version (\n\tid bigint(20) unsigned NOT NULL AUTO_INCREMENT,", exists) {
		t.Error("goose's version table taken for a cut migration's table")
	}
	if !mayBeApplied("CREATE TABLE clock_setting (\n\tname VARCHAR(64) NOT NULL,", exists) {
		t.Error("a migration's CREATE TABLE no longer taken as possibly applied")
	}
}
