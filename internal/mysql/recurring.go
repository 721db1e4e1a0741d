package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
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
	err := s.inBackgroundTx(ctx, func(tx *sqlx.Conn) error {
		if !s.cfg.NoHistory {
			if err := occurrenceHistory(ctx, tx, held, tokens, now); err != nil {
				return err
			}
		}
		return advanceRows(ctx, tx, held, tokens, s.unclaimedToken(), now)
	})
	if err != nil {
		return fmt.Errorf("advance %d recurring clocks: %w", len(advs), mapErr(err))
	}
	return nil
}

// advanceValues is the derived table v of an Advance: one row per clock,
// in id order (so that the join locks the rows by primary key in one
// order), with what its history row and its clock row become. Joined on
// the primary key, it makes each statement linear in the chunk; one CASE id
// WHEN ... per column made MariaDB compare every row with every WHEN
// (0.8 s for 500 clocks, the recurring tail of issue 13).
//
//	v_id    the clock
//	v_hst   the occurrence's outcome (history status)
//	v_rung  when it rang (NULL: it did not; the clock keeps its rung_at)
//	v_err   its error (NULL when it rang)
//	v_at    when the outcome happened (the history row's update_time)
//	v_occ   occurrences rung so far
//	v_st    the clock's status next: pending, or the outcome when it ends
//	v_tra   its ring time next: the next occurrence, or the last one
//	v_ntt   its next try: the next occurrence's, or the outcome's time
//	v_att   its attempts next: 0, or NULL (kept) when it ends
//	v_upd   its update_time: now, and after the last occurrence's time
//	        when it ends (which keys that occurrence's history row)
func advanceValues(advs []alarm.Advance, now time.Time) (string, []any, error) {
	rows := make([][11]any, len(advs))
	for i, a := range advs {
		var rung, errText any
		if a.Status == alarm.StatusRung {
			rung = ms(a.At)
		} else {
			errText = alarm.TrimError(a.Error)
		}
		st, tra, ntt, att, upd := any(string(alarm.StatusPending)), ms(a.Next), ms(a.NextTryAt), any(0), ms(now)
		if a.Next.IsZero() {
			st, tra, ntt, att, upd = string(a.Status), ms(a.Occurrence), ms(a.At), nil, max(ms(now), ms(a.Occurrence)+1)
		}
		rows[i] = [11]any{a.ID, string(a.Status), rung, errText, ms(a.At), a.Occurrences, st, tra, ntt, att, upd}
	}
	slices.SortFunc(rows, func(a, b [11]any) int { return cmp.Compare(a[0].(int64), b[0].(int64)) })
	doc, err := json.Marshal(rows)
	if err != nil {
		return "", nil, err
	}
	return `JSON_TABLE(?, '$[*]' COLUMNS (v_id BIGINT PATH '$[0]', v_hst VARCHAR(16) PATH '$[1]',
		v_rung BIGINT PATH '$[2]', v_err VARCHAR(1024) PATH '$[3]', v_at BIGINT PATH '$[4]', v_occ BIGINT PATH '$[5]',
		v_st VARCHAR(16) PATH '$[6]', v_tra BIGINT PATH '$[7]', v_ntt BIGINT PATH '$[8]', v_att INT PATH '$[9]',
		v_upd BIGINT PATH '$[10]')) v`, []any{string(doc)}, nil
}

// occurrenceHistory copies each finished occurrence to clock_history as a
// row of its own: the clock as it was while firing on it, with the
// occurrence's outcome; finish_time is the occurrence's scheduled time
// (target_ring_at), so that an occurrence rung again after a crash keeps
// one row (updated), and occurrence_of names the clock. Each occurrence's
// time is strictly after the one before, so the rows never collide;
// the clock's own row, when it is archived at its end, carries its
// update_time, which Advance keeps after its last occurrence's time.
func occurrenceHistory(ctx context.Context, tx *sqlx.Conn, advs []alarm.Advance, tokens []int64, now time.Time) error {
	override := map[string]string{"status": "v.v_hst", "rung_at": "v.v_rung", "last_error": "v.v_err",
		"update_time": "v.v_at", "occurrences": "v.v_occ", "claim_token": "NULL"}
	var cols, sel []string
	for _, c := range strings.Split(strings.ReplaceAll(copyCols, "\n", " "), ",") {
		c = strings.TrimSpace(c)
		cols = append(cols, c)
		if o, ok := override[c]; ok {
			sel = append(sel, o)
		} else {
			sel = append(sel, "c."+c)
		}
	}
	ids := make([]int64, len(advs))
	for i, a := range advs {
		ids[i] = a.ID
	}
	values, args, err := advanceValues(advs, now)
	if err != nil {
		return err
	}
	where, wargs := fence(ids, tokens)
	args = append(args, wargs...)
	q := "INSERT INTO clock_history (" + strings.Join(cols, ", ") + ", finish_time, occurrence_of) SELECT " +
		strings.Join(sel, ", ") + ", c.target_ring_at, c.id FROM clock AS c FORCE INDEX (PRIMARY) JOIN " + values + " ON c.id = v.v_id" + where +
		` ON DUPLICATE KEY UPDATE status = VALUES(status), rung_at = VALUES(rung_at), last_error = VALUES(last_error),
		attempts = VALUES(attempts), update_time = VALUES(update_time), occurrences = VALUES(occurrences)`
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("copy %d occurrences to history: %w", len(advs), err)
	}
	return nil
}

// advanceRows moves each clock to its next occurrence, or finishes it.
// unclaimed is what claim_token becomes (see Store.unclaimedToken).
func advanceRows(ctx context.Context, tx *sqlx.Conn, advs []alarm.Advance, tokens []int64, unclaimed string, now time.Time) error {
	ids := make([]int64, len(advs))
	for i, a := range advs {
		ids[i] = a.ID
	}
	values, args, err := advanceValues(advs, now)
	if err != nil {
		return err
	}
	where, wargs := fence(ids, tokens)
	q := "UPDATE clock AS c FORCE INDEX (PRIMARY) JOIN " + values + " ON c.id = v.v_id SET c.status = v.v_st, c.target_ring_at = v.v_tra, " +
		"c.next_try_time = v.v_ntt, c.attempts = COALESCE(v.v_att, c.attempts), " +
		// a next occurrence is a first publish of its message_id: a replay's attempts no longer count
		"c.replayed_attempts = IF(v.v_att IS NULL, c.replayed_attempts, 0), c.occurrences = v.v_occ, " +
		// and a replayed occurrence's deadline (see Store.Replay) is not the next one's
		"c.latest_ring_at = IF(v.v_att IS NULL, c.latest_ring_at, NULL), " +
		"c.rung_at = COALESCE(v.v_rung, c.rung_at), c.last_error = v.v_err, c.update_time = v.v_upd, c.claim_token = " + unclaimed + where
	if _, err := tx.ExecContext(ctx, q, append(args, wargs...)...); err != nil {
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
