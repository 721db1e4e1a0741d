-- A clock created or moved through an instance that does not own its
-- shard, due within the preload window, reaches the owner's memory by a
-- hint on RabbitMQ: the owner's loader has already read that part of the
-- shard and would find it only at its next full rescan (30 s). When the
-- hint cannot go (the instance has no broker, its hint queue overflowed,
-- the send failed), the instance stamps the shard's row instead, and the
-- owner rescans the shard at its next lease round (cluster.lease_ttl / 4).
-- clock_shard holds one row per shard: the ALTER is instant.

-- +goose Up
ALTER TABLE clock_shard
  ADD COLUMN rescan_at BIGINT NOT NULL DEFAULT 0 COMMENT 'by the database clock, ms since epoch: another instance asked the owner to rescan the shard (a hint it could not send); 0 = never';

-- +goose Down
ALTER TABLE clock_shard
  DROP COLUMN rescan_at;
