-- Operator console (issue 11): each instance writes, with its heartbeat, the
-- size of its in-memory heap of clocks and of its Go heap, so that any
-- instance can show every instance's (metrics are per process).
-- clock_instance holds one row per instance: the ALTER is instant.

-- +goose Up
ALTER TABLE clock_instance
  ADD COLUMN heap_clocks BIGINT NOT NULL DEFAULT 0 COMMENT 'clocks in the instance''s in-memory heap at its last heartbeat',
  ADD COLUMN heap_bytes  BIGINT NOT NULL DEFAULT 0 COMMENT 'bytes of live Go heap objects of the instance at its last heartbeat',
  ADD COLUMN stats_at    BIGINT NOT NULL DEFAULT 0 COMMENT 'when heap_clocks and heap_bytes were written, ms since epoch; 0 = never';

-- +goose Down
ALTER TABLE clock_instance
  DROP COLUMN stats_at,
  DROP COLUMN heap_bytes,
  DROP COLUMN heap_clocks;
