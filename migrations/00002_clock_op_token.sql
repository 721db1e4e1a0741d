-- op_token marks the last change made through the API, so that clockd can tell
-- whether a change whose answer was lost (connection cut during COMMIT) was
-- applied: it re-reads the row and compares the token.
--
-- attempts is now counted when a clock is claimed (a publish is about to
-- start), so that a ring repeated after a takeover carries attempt 2 or more.
--
-- Both changes are metadata-only on MySQL 8.0 and MariaDB 10.6+ (a nullable
-- column added last, and a new comment): the server does them INSTANT or
-- INPLACE without copying the table.

-- +goose Up
ALTER TABLE clock
  ADD COLUMN op_token BIGINT UNSIGNED NULL COMMENT 'random token of the last change made through the API (create, cancel, reschedule, replay); lets clockd find out whether a change whose answer was lost was applied',
  MODIFY COLUMN attempts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'publish attempts so far, counted when a clock is claimed to be published: while firing it includes the attempt in flight';

-- +goose Down
ALTER TABLE clock
  DROP COLUMN op_token,
  MODIFY COLUMN attempts INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'publish attempts so far: the failed ones plus the confirmed one';
