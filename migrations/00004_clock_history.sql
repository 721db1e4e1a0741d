-- Retention (issue 9): finished clocks leave `clock` for `clock_history`
-- after their retention, moved in small batches by the janitor, one clockd
-- instance at a time (a lease in `clock_lease`).
--
-- On `clock`:
--   idx_clock_status_update (status, update_time): the janitor finds the
--     finished clocks past their retention as an index range (a finished
--     clock's update_time is the time it finished, and nothing changes it
--     again); DBAs find clocks by status and time; clockd_clocks{status} is
--     counted from it.
--   idx_clock_application_status_id (application, status, id): the list
--     endpoint by application and status, newest first, and the live clocks
--     of an application (quotas) without reading its finished ones. It
--     replaces idx_clock_application_id (application, id): a list by
--     application alone reads one range of it per status.
--
-- Online: ALGORITHM=INPLACE, LOCK=NONE. The server builds both indexes while
-- reads and writes go on (it refuses the statement rather than lock the
-- table, should it not manage that), and dropping an index is a metadata
-- change. Measured here (MariaDB 10.11, 2 shared cores, buffer pool 2 GiB):
-- 34 s on a `clock` of 11 M rows (10 M finished, 1 M pending, 100-byte
-- payloads; 2.5 GB of data, 1.4 GB of indexes), with BenchmarkJanitorDrain
-- in internal/janitor. clockd runs migrations on connections without a
-- client read timeout (mysql.MigrateDSN), so a long index build is not cut.
--
-- `clock_history` and `clock_lease` are new tables: nothing is copied.
-- clock_history is partitioned by day of finish_time (RANGE, ms since the
-- epoch). It starts with the catch-all partition pmax only; the janitor
-- splits days off pmax ahead of time (pYYYYMMDD holds the clocks that
-- finished that day, UTC) and drops the days past history.keep whole.
-- A partitioned table's every unique key must hold the partitioning column:
-- the primary key is (id, finish_time), and there is no other unique key
-- (a business id may be re-armed, so history holds several clocks of it).

-- +goose Up
ALTER TABLE clock
  ADD INDEX idx_clock_status_update (status, update_time),
  ADD INDEX idx_clock_application_status_id (application, status, id),
  DROP INDEX idx_clock_application_id,
  ALGORITHM=INPLACE, LOCK=NONE;

CREATE TABLE clock_history (
  id             BIGINT UNSIGNED NOT NULL COMMENT 'clock id, as it was in clock; the AMQP message_id of its rings',
  application    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'owning application; the routing key of its rings',
  business_id    VARCHAR(128) NOT NULL COMMENT 'the application''s own key for the clock; a key re-armed after it finished has several clocks here',
  shard          SMALLINT UNSIGNED NOT NULL COMMENT 'the shard the clock was in',
  status         VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'how it finished: rung | cancelled | expired | dead',
  payload        MEDIUMTEXT NOT NULL COMMENT 'message body published byte for byte',
  content_type   VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'AMQP content_type of the ring',
  target_ring_at BIGINT NOT NULL COMMENT 'requested ring time, ms since epoch',
  latest_ring_at BIGINT NULL COMMENT 'never ring after this, ms since epoch; NULL = no limit',
  max_attempts   INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'dead after this many failed attempts; 0 = no limit',
  attempts       INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'publish attempts made',
  next_try_time  BIGINT NOT NULL COMMENT 'when the last attempt was due, ms since epoch',
  last_error     VARCHAR(1024) NULL COMMENT 'why the last attempt failed; NULL when none failed',
  claim_epoch    BIGINT UNSIGNED NULL COMMENT 'lease epoch of the last claim, as it was in clock',
  claim_token    BIGINT UNSIGNED NULL COMMENT 'token of the last claim batch, as it was in clock',
  rung_at        BIGINT NULL COMMENT 'when the broker confirmed the ring, ms since epoch; NULL when it never rang',
  create_time    BIGINT NOT NULL COMMENT 'creation of the clock, ms since epoch',
  update_time    BIGINT NOT NULL COMMENT 'last change of the clock while in clock, ms since epoch',
  op_token       BIGINT UNSIGNED NULL COMMENT 'random token of the last change made through the API',
  finish_time    BIGINT NOT NULL COMMENT 'when the clock finished (rung, cancelled, expired or dead), ms since epoch; partitions are days of it',
  PRIMARY KEY (id, finish_time),
  KEY idx_clock_history_application_business_id (application, business_id),
  KEY idx_clock_history_status_finish (status, finish_time)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='finished clocks moved out of clock after their retention; one partition per day of finish_time, dropped whole after history.keep'
  PARTITION BY RANGE (finish_time) (PARTITION pmax VALUES LESS THAN MAXVALUE);

CREATE TABLE clock_lease (
  name        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the role: janitor (retention, history partitions, clockd_clocks counts)',
  owner       VARCHAR(128) NULL COMMENT 'instance id holding the lease; NULL when free',
  epoch       BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'incremented at every change of owner',
  lease_until BIGINT NOT NULL DEFAULT 0 COMMENT 'lease expiry, ms since epoch by the database clock',
  update_time BIGINT NOT NULL DEFAULT 0 COMMENT 'last change of the lease, ms since epoch',
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='leases of the roles one clockd instance at a time plays (the janitor)';

INSERT INTO clock_lease (name) VALUES ('janitor');

-- +goose Down
DROP TABLE clock_lease;
DROP TABLE clock_history;
ALTER TABLE clock
  ADD INDEX idx_clock_application_id (application, id),
  DROP INDEX idx_clock_application_status_id,
  DROP INDEX idx_clock_status_update,
  ALGORITHM=INPLACE, LOCK=NONE;
