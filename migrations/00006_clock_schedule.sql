-- Recurring clocks (issue 13): a clock may carry a schedule instead of one
-- ring time. It stays one row of `clock` that moves from occurrence to
-- occurrence: target_ring_at is the scheduled time of its current
-- occurrence (the one pending or firing), next_try_time when that is tried,
-- attempts that occurrence's attempts; status stays pending between
-- occurrences and becomes rung after the last one. When an occurrence has
-- rung (or was given up), the row moves on to the next occurrence in the
-- same transaction as the outcome, and the occurrence leaves a row in
-- clock_history (status rung, expired or dead; finish_time = when).
-- A DBA reads a schedule plainly, e.g.
--   SELECT id, schedule_cron, schedule_time_zone, schedule_every_ms,
--          FROM_UNIXTIME(target_ring_at/1000) AS occurrence, occurrences, paused
--   FROM clock WHERE schedule_cron IS NOT NULL OR schedule_every_ms IS NOT NULL;
--
-- Online: new nullable (or defaulted) columns at the end of the table, which
-- MariaDB (10.3+) and MySQL (8.0.12+) add instantly, without copying rows;
-- changing a column's COMMENT is a metadata change in both. clock_history
-- gets the same columns, so that a recurring clock keeps its schedule when
-- it is archived.

-- +goose Up
ALTER TABLE clock
  MODIFY target_ring_at BIGINT NOT NULL COMMENT 'requested ring time, ms since epoch; never rung before it. Recurring clock: the scheduled time of its current occurrence',
  ADD COLUMN schedule_cron VARCHAR(255) NULL COMMENT 'recurring clock: cron expression (minute hour day-of-month month day-of-week, optional leading seconds field, or @daily-style); NULL for one-shot clocks and intervals',
  ADD COLUMN schedule_time_zone VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'IANA time zone schedule_cron is read in, e.g. Europe/Berlin',
  ADD COLUMN schedule_every_ms BIGINT NULL COMMENT 'recurring clock: fixed interval in ms; occurrences at schedule_start + k * interval; NULL for cron and one-shot clocks',
  ADD COLUMN schedule_start BIGINT NULL COMMENT 'recurring clock: no occurrence before this, ms since epoch (an interval''s anchor)',
  ADD COLUMN schedule_end BIGINT NULL COMMENT 'recurring clock: no occurrence after this, ms since epoch; NULL = no end',
  ADD COLUMN max_occurrences INT UNSIGNED NULL COMMENT 'recurring clock: it finishes after this many occurrences rang; NULL or 0 = no limit',
  ADD COLUMN occurrences INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'recurring clock: occurrences rung so far',
  ADD COLUMN misfire VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'recurring clock, missed occurrences: skip (ring once, then the next future one) | catch_up (ring each, at most catch_up_limit)',
  ADD COLUMN catch_up_limit INT UNSIGNED NULL COMMENT 'recurring clock with misfire catch_up: the most missed occurrences rung',
  ADD COLUMN occurrence_deadline_ms BIGINT NULL COMMENT 'recurring clock: an occurrence not rung within this many ms after its time is skipped; NULL = none',
  ADD COLUMN paused TINYINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '1: a paused recurring clock (next_try_time parked at year 9999); 0 otherwise';

ALTER TABLE clock_history
  ADD COLUMN schedule_cron VARCHAR(255) NULL COMMENT 'recurring clock: cron expression, as it was in clock',
  ADD COLUMN schedule_time_zone VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'IANA time zone of schedule_cron',
  ADD COLUMN schedule_every_ms BIGINT NULL COMMENT 'recurring clock: fixed interval in ms',
  ADD COLUMN schedule_start BIGINT NULL COMMENT 'recurring clock: no occurrence before this, ms since epoch',
  ADD COLUMN schedule_end BIGINT NULL COMMENT 'recurring clock: no occurrence after this, ms since epoch',
  ADD COLUMN max_occurrences INT UNSIGNED NULL COMMENT 'recurring clock: the most occurrences rung',
  ADD COLUMN occurrences INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'recurring clock: occurrences rung (in an occurrence''s own row: the count with it)',
  ADD COLUMN misfire VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'recurring clock: skip | catch_up',
  ADD COLUMN catch_up_limit INT UNSIGNED NULL COMMENT 'recurring clock: the most missed occurrences rung',
  ADD COLUMN occurrence_deadline_ms BIGINT NULL COMMENT 'recurring clock: occurrence deadline in ms',
  ADD COLUMN paused TINYINT UNSIGNED NOT NULL DEFAULT 0 COMMENT '1: the clock was paused when it left clock',
  ADD COLUMN occurrence_of BIGINT NULL COMMENT 'set on the row of one occurrence of a recurring clock (target_ring_at is its time): the clock id again; NULL on the row of a whole clock';

-- +goose Down
ALTER TABLE clock_history
  DROP COLUMN occurrence_of, DROP COLUMN paused, DROP COLUMN occurrence_deadline_ms, DROP COLUMN catch_up_limit,
  DROP COLUMN misfire, DROP COLUMN occurrences, DROP COLUMN max_occurrences, DROP COLUMN schedule_end,
  DROP COLUMN schedule_start, DROP COLUMN schedule_every_ms, DROP COLUMN schedule_time_zone, DROP COLUMN schedule_cron;
ALTER TABLE clock
  DROP COLUMN paused, DROP COLUMN occurrence_deadline_ms, DROP COLUMN catch_up_limit, DROP COLUMN misfire,
  DROP COLUMN occurrences, DROP COLUMN max_occurrences, DROP COLUMN schedule_end, DROP COLUMN schedule_start,
  DROP COLUMN schedule_every_ms, DROP COLUMN schedule_time_zone, DROP COLUMN schedule_cron,
  MODIFY target_ring_at BIGINT NOT NULL COMMENT 'requested ring time, ms since epoch; never rung before it';
