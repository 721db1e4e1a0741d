-- An instance that cannot publish to RabbitMQ (its broker URL is wrong,
-- its node is unreachable, its connection is blocked) gives its shards up
-- to the instances that can, instead of holding them while their clocks
-- wait. Each instance says with its heartbeat whether it can ring; the
-- shards are shared among the live instances that can. Instances of
-- earlier versions do not write the column: they count as able to ring,
-- as before.
-- clock_instance holds one row per instance: the ALTER is instant.

-- +goose Up
ALTER TABLE clock_instance
  ADD COLUMN rings TINYINT NOT NULL DEFAULT 1 COMMENT '1 while the instance can publish to RabbitMQ (only those hold shards); 0 when it has not been able to for cluster.lease_ttl';

-- +goose Down
ALTER TABLE clock_instance
  DROP COLUMN rings;
