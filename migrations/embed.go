// Package migrations holds clockd's goose SQL migrations, embedded in the
// binary so that `clockd migrate` and `clockd serve` can apply them.
package migrations

import "embed"

// FS holds the *.sql migrations.
//
//go:embed *.sql
var FS embed.FS
