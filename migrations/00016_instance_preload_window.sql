-- Each instance's preload.window, in its heartbeat. An instance that takes
-- a create for a shard another instance owns tells the owner (a hint) when
-- the clock is due within the owner's window: the owner has already loaded
-- that range and would otherwise find the clock only at its next rescan.
-- The creating instance judged "within the window" by its own window, so
-- while instances had different windows (a rolling change of
-- preload.window) clocks rang seconds late (found by review: up to 13.9 s
-- with windows of 10 s and 2 s). It now hints within the largest window of
-- the live instances; an instance of an earlier version leaves 0 here and
-- is judged by the creating instance's own window, as before.
--
-- Online: a column added at the end of clock_instance (one row per
-- instance) is metadata only (instant) on MariaDB 10.6+ and MySQL 8.0.29+.

-- +goose Up
ALTER TABLE clock_instance
  ADD COLUMN preload_window_ms BIGINT NOT NULL DEFAULT 0 COMMENT 'the instance''s preload.window in ms: creates through other instances hint it clocks due within the largest live one; 0 for an instance of a version before migration 00016';

-- +goose Down
ALTER TABLE clock_instance
  DROP COLUMN preload_window_ms;
