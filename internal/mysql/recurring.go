package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/schedule"
)

// Recurring clocks (migration 00006): the schedule columns, and Advance,
// the outcome write that moves a recurring clock to its next occurrence.

// scheduleCols are the schedule columns, in the order of scheduleRow.args.
const scheduleCols = `schedule_cron, schedule_time_zone, schedule_every_ms, schedule_start, schedule_end,
max_occurrences, occurrences, misfire, catch_up_limit, occurrence_deadline_ms, paused`

const scheduleColCount = 11

var schedulePlaceholders = placeholders(scheduleColCount)

// oneShotScheduleValues are the schedule columns of a one-shot clock.
const oneShotScheduleValues = "NULL,NULL,NULL,NULL,NULL,NULL,0,NULL,NULL,NULL,0"

// scheduleSet assigns every schedule column (an UPDATE's SET), with
// scheduleRow.args.
var scheduleSet = func() string {
	cols := strings.Split(strings.ReplaceAll(scheduleCols, "\n", " "), ",")
	for i, c := range cols {
		cols[i] = strings.TrimSpace(c) + " = ?"
	}
	return strings.Join(cols, ", ")
}()

// scheduleRow is the schedule columns of a row.
type scheduleRow struct {
	Cron         sql.NullString `db:"schedule_cron"`
	TimeZone     sql.NullString `db:"schedule_time_zone"`
	EveryMS      sql.NullInt64  `db:"schedule_every_ms"`
	Start        sql.NullInt64  `db:"schedule_start"`
	End          sql.NullInt64  `db:"schedule_end"`
	MaxOccur     sql.NullInt64  `db:"max_occurrences"`
	Occurrences  int            `db:"occurrences"`
	Misfire      sql.NullString `db:"misfire"`
	CatchUpLimit sql.NullInt64  `db:"catch_up_limit"`
	DeadlineMS   sql.NullInt64  `db:"occurrence_deadline_ms"`
	Paused       int            `db:"paused"`
}

// spec is the row's schedule; nil for a one-shot clock.
func (r scheduleRow) spec() *schedule.Spec {
	if !r.Cron.Valid && !r.EveryMS.Valid {
		return nil
	}
	return &schedule.Spec{
		Cron: r.Cron.String, TimeZone: r.TimeZone.String,
		Every: time.Duration(r.EveryMS.Int64) * time.Millisecond,
		Start: fromNullMS(r.Start), End: fromNullMS(r.End),
		MaxOccurrences: int(r.MaxOccur.Int64), Misfire: schedule.Misfire(r.Misfire.String),
		CatchUpLimit:       int(r.CatchUpLimit.Int64),
		OccurrenceDeadline: time.Duration(r.DeadlineMS.Int64) * time.Millisecond,
	}
}

func nullStr(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func nullInt(v int64, valid bool) sql.NullInt64 { return sql.NullInt64{Int64: v, Valid: valid} }

// scheduleRowOf is the schedule columns of c (all NULL for a one-shot clock).
func scheduleRowOf(c alarm.Clock) scheduleRow {
	r := scheduleRow{Occurrences: c.Occurrences}
	if c.Paused {
		r.Paused = 1
	}
	sp := c.Schedule
	if sp == nil {
		return r
	}
	r.Cron, r.TimeZone = nullStr(sp.Cron), nullStr(sp.TimeZone)
	r.EveryMS = nullInt(sp.Every.Milliseconds(), sp.Every != 0)
	r.Start, r.End = nullMS(sp.Start), nullMS(sp.End)
	r.MaxOccur = nullInt(int64(sp.MaxOccurrences), sp.MaxOccurrences > 0)
	r.Misfire = nullStr(string(sp.Misfire))
	r.CatchUpLimit = nullInt(int64(sp.CatchUpLimit), sp.CatchUpLimit > 0)
	r.DeadlineMS = nullInt(sp.OccurrenceDeadline.Milliseconds(), sp.OccurrenceDeadline > 0)
	return r
}

func (r scheduleRow) args() []any {
	return []any{r.Cron, r.TimeZone, r.EveryMS, r.Start, r.End, r.MaxOccur, r.Occurrences, r.Misfire,
		r.CatchUpLimit, r.DeadlineMS, r.Paused}
}

// recurringSQL is the condition "the clock is recurring".
const recurringSQL = "(schedule_cron IS NOT NULL OR schedule_every_ms IS NOT NULL)"

// Advance records the outcome of the current occurrence of recurring
// clocks claimed with the given tokens and moves each to its next
// occurrence (pending, attempts 0), or finishes it when its schedule is
// over, in one transaction with the occurrence's row in clock_history
// (unless history is off). So a clock never has two occurrences in flight,
// and a crash leaves it either firing on the occurrence (recovered and
// rung again: at least once) or pending on the next one, never between.
//
// Like the other outcome writes both statements are fenced by claim token:
// rows no longer firing under one of the tokens are left alone. The copy
// reads without locking (READ COMMITTED); only a new owner of the shard
// can take a row from under the claim in between (recovering it), and
// then the occurrence rings again and its history row is updated in
// place: the copy is keyed by the occurrence.
func (s *Store) Advance(ctx context.Context, advs []alarm.Advance, tokens []int64, now time.Time) error {
	if len(advs) == 0 {
		return nil
	}
	seen := make(map[int64]bool, len(advs))
	held := make([]alarm.Advance, 0, len(advs))
	for _, a := range advs {
		if !seen[a.ID] { // once per clock
			seen[a.ID] = true
			held = append(held, a)
		}
	}
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if !s.cfg.NoHistory {
			if err := occurrenceHistory(ctx, tx, held, tokens); err != nil {
				return err
			}
		}
		return advanceRows(ctx, tx, held, tokens, now)
	})
	if err != nil {
		return fmt.Errorf("advance %d recurring clocks: %w", len(advs), mapErr(err))
	}
	return nil
}

// caseID builds "CASE id WHEN ? THEN ? ... [ELSE other] END".
func caseID(advs []alarm.Advance, other string, val func(alarm.Advance) any) (string, []any) {
	var b strings.Builder
	args := make([]any, 0, 2*len(advs))
	b.WriteString("CASE id")
	for _, a := range advs {
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, a.ID, val(a))
	}
	if other != "" {
		b.WriteString(" ELSE " + other)
	}
	b.WriteString(" END")
	return b.String(), args
}

// occurrenceHistory copies each finished occurrence to clock_history as a
// row of its own: the clock as it was while firing on it, with the
// occurrence's outcome; finish_time is the occurrence's scheduled time
// (target_ring_at), so that an occurrence rung again after a crash keeps
// one row (updated), and occurrence_of names the clock. Each occurrence's
// time is strictly after the one before, so the rows never collide;
// the clock's own row, when it is archived at its end, carries its
// update_time, which Advance keeps after its last occurrence's time.
func occurrenceHistory(ctx context.Context, tx *sqlx.Tx, advs []alarm.Advance, tokens []int64) error {
	var args []any
	override := map[string]func() string{}
	add := func(col string, other string, val func(alarm.Advance) any) {
		override[col] = func() string {
			q, a := caseID(advs, other, val)
			args = append(args, a...)
			return q
		}
	}
	add("status", "", func(a alarm.Advance) any { return string(a.Status) })
	add("rung_at", "NULL", func(a alarm.Advance) any {
		if a.Status == alarm.StatusRung {
			return ms(a.At)
		}
		return nil
	})
	add("last_error", "", func(a alarm.Advance) any {
		if a.Status == alarm.StatusRung {
			return nil
		}
		return alarm.TrimError(a.Error)
	})
	add("update_time", "", func(a alarm.Advance) any { return ms(a.At) })
	add("occurrences", "", func(a alarm.Advance) any { return a.Occurrences })
	add("claim_token", "", func(alarm.Advance) any { return nil })
	var cols, sel []string
	for _, c := range strings.Split(strings.ReplaceAll(copyCols, "\n", " "), ",") {
		c = strings.TrimSpace(c)
		cols = append(cols, c)
		if f, ok := override[c]; ok {
			sel = append(sel, f())
		} else {
			sel = append(sel, c)
		}
	}
	ids := make([]int64, len(advs))
	for i, a := range advs {
		ids[i] = a.ID
	}
	where, wargs := fence(ids, tokens)
	args = append(args, wargs...)
	q := "INSERT INTO clock_history (" + strings.Join(cols, ", ") + ", finish_time, occurrence_of) SELECT " +
		strings.Join(sel, ", ") + ", target_ring_at, id FROM clock" + where +
		` ON DUPLICATE KEY UPDATE status = VALUES(status), rung_at = VALUES(rung_at), last_error = VALUES(last_error),
		attempts = VALUES(attempts), update_time = VALUES(update_time), occurrences = VALUES(occurrences)`
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("copy %d occurrences to history: %w", len(advs), err)
	}
	return nil
}

// advanceRows moves each clock to its next occurrence, or finishes it.
func advanceRows(ctx context.Context, tx *sqlx.Tx, advs []alarm.Advance, tokens []int64, now time.Time) error {
	var b strings.Builder
	var args []any
	set := func(col, other string, val func(alarm.Advance) any) {
		q, a := caseID(advs, other, val)
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(col + " = " + q)
		args = append(args, a...)
	}
	set("status", "", func(a alarm.Advance) any {
		if a.Next.IsZero() {
			return string(a.Status)
		}
		return string(alarm.StatusPending)
	})
	set("target_ring_at", "target_ring_at", func(a alarm.Advance) any {
		if a.Next.IsZero() {
			return ms(a.Occurrence)
		}
		return ms(a.Next)
	})
	set("next_try_time", "next_try_time", func(a alarm.Advance) any {
		if a.Next.IsZero() {
			return ms(a.At)
		}
		return ms(a.NextTryAt)
	})
	set("attempts", "attempts", func(a alarm.Advance) any {
		if a.Next.IsZero() {
			return nil // kept below
		}
		return 0
	})
	set("occurrences", "", func(a alarm.Advance) any { return a.Occurrences })
	set("rung_at", "rung_at", func(a alarm.Advance) any {
		if a.Status == alarm.StatusRung {
			return ms(a.At)
		}
		return nil // kept below
	})
	set("last_error", "", func(a alarm.Advance) any {
		if a.Status == alarm.StatusRung {
			return nil
		}
		return alarm.TrimError(a.Error)
	})
	// A finished clock's update_time is when it finished; it is kept after
	// its last occurrence's time, which keys that occurrence's history row.
	set("update_time", "", func(a alarm.Advance) any {
		if a.Next.IsZero() {
			return max(ms(now), ms(a.Occurrence)+1)
		}
		return ms(now)
	})
	q := b.String()
	// NULL above means "keep": attempts of a finished clock, rung_at of an
	// occurrence that did not ring
	q = strings.Replace(q, "attempts = CASE id", "attempts = COALESCE(CASE id", 1)
	q = strings.Replace(q, " ELSE attempts END", " ELSE attempts END, attempts)", 1)
	q = strings.Replace(q, "rung_at = CASE id", "rung_at = COALESCE(CASE id", 1)
	q = strings.Replace(q, " ELSE rung_at END", " ELSE rung_at END, rung_at)", 1)
	ids := make([]int64, len(advs))
	for i, a := range advs {
		ids[i] = a.ID
	}
	where, wargs := fence(ids, tokens)
	full := "UPDATE clock SET " + q + ", claim_token = NULL" + where
	if _, err := tx.ExecContext(ctx, full, append(args, wargs...)...); err != nil {
		return fmt.Errorf("move %d recurring clocks on: %w", len(advs), err)
	}
	return nil
}

// recurringCond is the list condition " AND <recurring or not>", or "".
func recurringCond(recurring *bool) string {
	switch {
	case recurring == nil:
		return ""
	case *recurring:
		return " AND " + recurringSQL
	}
	return " AND NOT " + recurringSQL
}
