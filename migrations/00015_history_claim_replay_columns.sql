-- clock_history has the columns of clock plus when the clock finished
-- (SPEC). claim_time (00008) and replayed_attempts (00010) were added to
-- clock only; a DBA reading a replayed clock in history saw only the
-- attempts made after its replay. Rows archived before this migration
-- carry the defaults (0).
--
-- Online: columns added at the end are metadata only (instant) on MariaDB
-- 10.6+ and MySQL 8.0.29+, partitioned tables included, whatever the size
-- of clock_history.

-- +goose Up
ALTER TABLE clock_history
  ADD COLUMN claim_time BIGINT DEFAULT 0 COMMENT 'when the clock was last claimed for a ring, ms since epoch, as it was in clock; 0 in rows archived before migration 00015',
  ADD COLUMN replayed_attempts INT NOT NULL DEFAULT 0 COMMENT 'attempts made before the last replay, as it was in clock; 0 in rows archived before migration 00015';

-- +goose Down
ALTER TABLE clock_history
  DROP COLUMN claim_time,
  DROP COLUMN replayed_attempts;
