-- A replay gives a dead clock a fresh count of attempts (attempts = 0, so
-- max_attempts applies anew), but its publishes before the replay happened:
-- the ring header x-clock-attempt must not say 1 again (SPEC: 1 only for
-- the first publish of a clock). replayed_attempts keeps the attempts made
-- before the last replay; the header counts them too.
--
-- Online: a column added at the end is metadata only on MariaDB 10.6+ and
-- MySQL 8.0.29+ (instant, whatever the size of clock). clock_history does
-- not get it: a clock in history is never rung again.

-- +goose Up
ALTER TABLE clock
  ADD COLUMN replayed_attempts INT NOT NULL DEFAULT 0 COMMENT 'attempts made before the last replay (replay puts attempts back to 0); the ring header x-clock-attempt is attempts + this';

-- +goose Down
ALTER TABLE clock
  DROP COLUMN replayed_attempts;
