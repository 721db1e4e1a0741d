-- Issue 15: a claim updates its rows in place. A claim sets claim_token,
-- claim_epoch and claim_time. In a new clock all three were NULL, which
-- takes no room in an InnoDB record, so the claim grew every record by 24
-- bytes, and a record that changes size is not updated in place: InnoDB
-- deletes and reinserts it in its page and reorganizes or splits the page
-- when the page has no room. That was half of the server's work for a
-- claim: 24-26 us of mysqld CPU per clock against 13-16 in place
-- (BenchmarkClaim500, docs/benchmarks.md).
--
-- Now a new clock is written with the room its claim needs:
-- claim_epoch and claim_time default to 0, and clockd writes claim_token 0
-- for a pending clock that is not claimed. A clock is firing while
-- status = 'pending' AND claim_token <> 0 (true of neither 0 nor NULL).
--
-- Earlier versions read only NULL as "not claimed". So clockd writes 0
-- only while every live instance has claim_room = 1 (its heartbeat says it
-- reads 0 as "not claimed"); while an instance of an earlier version runs,
-- new clocks get NULL as before. Rows written before keep their NULLs.
--
-- Online: a column added at the end of clock_instance, and defaults and
-- comments changed on clock, are metadata only on MariaDB 10.6+ and MySQL
-- 8.0.29+ (instant, whatever the size of clock).

-- +goose Up
ALTER TABLE clock
  MODIFY COLUMN claim_token BIGINT UNSIGNED NULL COMMENT 'random token of the claim batch of the ring loop now publishing the clock; set and not 0 = firing; 0 or NULL otherwise (NULL in rows written before migration 00012 or while an earlier version ran)',
  MODIFY COLUMN claim_epoch BIGINT UNSIGNED NULL DEFAULT 0 COMMENT 'lease epoch of the shard owner that last claimed the clock; 0 until claimed (NULL in rows written before migration 00012)',
  MODIFY COLUMN claim_time BIGINT NULL DEFAULT 0 COMMENT 'when the clock was last claimed for a ring, ms since epoch; a claim older than ring.firing_timeout is recovered; 0 until claimed (NULL in rows written before migration 00012)';
ALTER TABLE clock_instance
  ADD COLUMN claim_room TINYINT NOT NULL DEFAULT 0 COMMENT '1: the instance reads claim_token 0 as not claimed (migration 00012); clocks are written with claim_token 0 only while every live instance has 1';

-- +goose Down
UPDATE clock SET claim_token = NULL WHERE claim_token = 0;
ALTER TABLE clock_instance
  DROP COLUMN claim_room;
ALTER TABLE clock
  MODIFY COLUMN claim_token BIGINT UNSIGNED NULL COMMENT 'random token of the claim batch of the ring loop now publishing the clock; set = firing; NULL otherwise',
  MODIFY COLUMN claim_epoch BIGINT UNSIGNED NULL COMMENT 'lease epoch of the shard owner that claimed the clock (status firing)',
  MODIFY COLUMN claim_time BIGINT NULL COMMENT 'when the clock was last claimed for a ring, ms since epoch; a claim older than ring.firing_timeout is recovered';
