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
//
// With payloads the page is read in chunks sized to about listChunkBytes,
// going on below the last id read: a page that fn ends early (the answer is
// full) costs MySQL and the network about what was answered, not Limit
// rows of payload, which the driver would read to the end of the result.
func (s *Store) ListEach(ctx context.Context, q alarm.ListQuery, withPayload bool, fn func(alarm.Clock) bool) error {
	cols := clockCols
	if !withPayload {
		cols = strings.Replace(cols, "payload,", "'' AS payload,", 1)
	}
	apps, err := s.listApps(ctx, q)
	if err != nil {
		return err
	}
	remaining, chunk := q.Limit, q.Limit
	if withPayload {
		chunk = min(chunk, listChunkMin)
	}
	var rowsRead, bytesRead int
	for remaining > 0 {
		c := q
		c.Limit = min(chunk, remaining)
		query, args := listSQL(c, cols, apps, s.statusWhere(time.Now()))
		n, last, more, err := s.listChunk(ctx, query, args, func(cl alarm.Clock) bool {
			rowsRead++
			bytesRead += len(cl.Payload) + len(cl.BusinessID) + listRowBytes
			return fn(cl)
		})
		if err != nil || !more || n < c.Limit {
			return err
		}
		remaining -= n
		q.BeforeID = last
		if withPayload {
			chunk = max(listChunkMin, listChunkBytes/max(1, bytesRead/rowsRead))
		}
	}
	return nil
}

// A list page with payloads is read in chunks of about listChunkBytes: at
// least listChunkMin rows, as many as that many bytes of the rows read so
// far hold (listRowBytes: a row's columns besides payload and business id).
const (
	listChunkBytes = 1 << 20
	listChunkMin   = 16
	listRowBytes   = 256
)

// listChunk runs one query of ListEach: n rows handed to fn, the last id,
// and whether fn wants more.
func (s *Store) listChunk(ctx context.Context, query string, args []any, fn func(alarm.Clock) bool) (n int, last int64, more bool, err error) {
	rows, err := s.db.QueryxContext(ctx, query, args...)
	if err != nil {
		return 0, 0, false, fmt.Errorf("list clocks: %w", mapErr(err))
	}
	defer rows.Close()
	for rows.Next() {
		var r row
		if err := rows.StructScan(&r); err != nil {
			return n, last, false, fmt.Errorf("list clocks: %w", mapErr(err))
		}
		c := r.clock()
		if !fn(c) {
			return n, last, false, nil
		}
		n++
		last = c.ID
	}
	if err := rows.Err(); err != nil {
		return n, last, false, fmt.Errorf("list clocks: %w", mapErr(err))
	}
	return n, last, true, nil
}
