package mysql

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// ListEach hands the clocks of a list query to fn one row at a time, newest
// first, until fn returns false: a page is never held in memory as a whole.
// Without payload the payload column is not read at all (payload is empty).
func (s *Store) ListEach(ctx context.Context, q alarm.ListQuery, withPayload bool, fn func(alarm.Clock) bool) error {
	cols := clockCols
	if !withPayload {
		cols = strings.Replace(cols, "payload,", "'' AS payload,", 1)
	}
	apps, err := s.listApps(ctx, q)
	if err != nil {
		return err
	}
	query, args := listSQL(q, cols, apps, s.statusWhere(time.Now()))
	rows, err := s.db.QueryxContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("list clocks: %w", mapErr(err))
	}
	defer rows.Close()
	for rows.Next() {
		var r row
		if err := rows.StructScan(&r); err != nil {
			return fmt.Errorf("list clocks: %w", mapErr(err))
		}
		if !fn(r.clock()) {
			return nil
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list clocks: %w", mapErr(err))
	}
	return nil
}
