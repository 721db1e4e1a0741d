-- GET of a clock that left `clock` reads its key's newest row in
-- clock_history that is not an occurrence. By (application, business_id)
-- that read every history row of the key, the occurrences of a recurring
-- clock included, and sorted them: MariaDB does no ordered scan of a
-- partitioned table's secondary index (EXPLAIN: ref, Using filesort). A
-- clock ringing every second, kept 30 days, has 2.6 M of them.
-- (application, business_id, occurrence_of) finds the key's own clocks (one
-- row per time it was armed) with `occurrence_of IS NULL` as part of the
-- index lookup. It replaces the index it extends: the history of one key
-- reads its prefix.
--
-- Online: ALGORITHM=INPLACE, LOCK=NONE: reads and writes of clock_history
-- go on while each partition's index is built (the server refuses the
-- statement rather than lock the table). Measured here (MariaDB 10.11, 2
-- shared cores): 30 s on a clock_history of 10 M rows (2.3 GB of data),
-- while a reader by key and a writer went on (slowest 49 and 55 ms);
-- 2 s on 1 M rows (docs/benchmarks.md).
--
-- No rolling upgrade across it: releases before it read clock_history
-- with FORCE INDEX (idx_clock_history_application_business_id), which
-- fails once the index is dropped (500 to GET of a key not in clock, and
-- to a cancel, reschedule or replay of an archived clock). Stop every
-- instance of an earlier release before the first new one starts; clockd
-- logs a WARN when it applies this while other instances are live.

-- +goose Up
ALTER TABLE clock_history
  ADD INDEX idx_clock_history_key (application, business_id, occurrence_of),
  DROP INDEX idx_clock_history_application_business_id,
  ALGORITHM=INPLACE, LOCK=NONE;

-- +goose Down
ALTER TABLE clock_history
  ADD INDEX idx_clock_history_application_business_id (application, business_id),
  DROP INDEX idx_clock_history_key,
  ALGORITHM=INPLACE, LOCK=NONE;
