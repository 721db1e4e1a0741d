-- Issue 15: a claim no longer moves index entries. The ring loop used to
-- claim a clock by setting status = 'firing', which moved its entries in
-- all three status-bearing indexes (shard/status/next_try_time,
-- status/update_time, application/status/id) and moved them again at the
-- rung mark: six secondary-index moves per ring, about half of MySQL's
-- work on the ring path (docs/benchmarks.md). A claim now writes only
-- unindexed columns: claim_token, claim_epoch, claim_time and attempts.
-- A clock is firing while status = 'pending' AND claim_token IS NOT NULL;
-- the API, the console and clockd_clocks{status="firing"} say 'firing'
-- for it. Rows written as status = 'firing' by earlier versions are still
-- read as firing and recovered as before (the CHECK keeps allowing it).
--
-- Online: a column added at the end and comments changed are metadata
-- only on MariaDB 10.6+ and MySQL 8.0.29+ (instant, whatever the size of
-- clock); 10 M rows here took no longer than an empty table.

-- +goose Up
ALTER TABLE clock
  MODIFY COLUMN status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'pending | rung | cancelled | expired | dead; a pending clock with claim_token set is firing (claimed, being published); status firing: a row claimed before migration 00008',
  MODIFY COLUMN claim_token BIGINT UNSIGNED NULL COMMENT 'random token of the claim batch of the ring loop now publishing the clock; set = firing; NULL otherwise',
  ADD COLUMN claim_time BIGINT NULL COMMENT 'when the clock was last claimed for a ring, ms since epoch; a claim older than ring.firing_timeout is recovered';

-- +goose Down
UPDATE clock SET status = 'firing' WHERE status = 'pending' AND claim_token IS NOT NULL;
ALTER TABLE clock
  DROP COLUMN claim_time,
  MODIFY COLUMN claim_token BIGINT UNSIGNED NULL COMMENT 'random token of the claim batch that moved the clock to firing',
  MODIFY COLUMN status VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'pending | firing (claimed, being published) | rung | cancelled | expired | dead';
