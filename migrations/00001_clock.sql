-- Schema of clockd. Times are BIGINT milliseconds since the Unix epoch (UTC)
-- so that DBAs can query and compare them plainly, e.g.
--   SELECT id, FROM_UNIXTIME(next_try_time/1000) FROM clock WHERE status='pending' ORDER BY next_try_time LIMIT 10;

-- +goose Up
CREATE TABLE clock_setting (
  name  VARCHAR(64)  NOT NULL COMMENT 'setting name, e.g. shard_count',
  value VARCHAR(255) NOT NULL COMMENT 'setting value; fixed when the schema is first set up',
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='clockd settings recorded at schema creation (shard_count)';

CREATE TABLE clock (
  id             BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'clock id; the AMQP message_id of every ring of this clock',
  application    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'owning application; the routing key of its rings',
  business_id    VARCHAR(128) NOT NULL COMMENT 'the application''s own key for the clock; unique per application',
  shard          SMALLINT UNSIGNED NOT NULL COMMENT 'crc32(application, 0x00, business_id) mod shard_count: the preloader that owns the clock',
  status         VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'pending | firing (claimed, being published) | rung | cancelled | expired | dead',
  payload        MEDIUMTEXT NOT NULL COMMENT 'message body published byte for byte',
  content_type   VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'AMQP content_type of the ring',
  target_ring_at BIGINT NOT NULL COMMENT 'requested ring time, ms since epoch; never rung before it',
  latest_ring_at BIGINT NULL COMMENT 'never ring after this, ms since epoch; NULL = no limit',
  max_attempts   INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'dead after this many failed attempts; 0 = no limit',
  attempts       INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'publish attempts so far: the failed ones plus the confirmed one',
  next_try_time  BIGINT NOT NULL COMMENT 'when the next attempt is due, ms since epoch (target_ring_at, or later after a failure)',
  last_error     VARCHAR(1024) NULL COMMENT 'why the last attempt failed; NULL when none failed',
  claim_epoch    BIGINT UNSIGNED NULL COMMENT 'lease epoch of the shard owner that claimed the clock (status firing)',
  claim_token    BIGINT UNSIGNED NULL COMMENT 'random token of the claim batch that moved the clock to firing',
  rung_at        BIGINT NULL COMMENT 'when the broker confirmed the ring, ms since epoch; NULL until rung',
  create_time    BIGINT NOT NULL COMMENT 'row creation, ms since epoch',
  update_time    BIGINT NOT NULL COMMENT 'last change of the row, ms since epoch',
  PRIMARY KEY (id),
  UNIQUE KEY uk_clock_application_business_id (application, business_id),
  KEY idx_clock_shard_status_next_try (shard, status, next_try_time),
  KEY idx_clock_application_id (application, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='one row per clock; the preloader scans (shard, status, next_try_time)';

CREATE TABLE clock_shard (
  shard       SMALLINT UNSIGNED NOT NULL COMMENT 'shard number, 0 .. shard_count-1',
  owner       VARCHAR(128) NULL COMMENT 'instance id holding the lease; NULL when free',
  epoch       BIGINT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'fencing token, incremented at every acquisition; claims check it',
  lease_until BIGINT NOT NULL DEFAULT 0 COMMENT 'lease expiry, ms since epoch by the database clock',
  update_time BIGINT NOT NULL DEFAULT 0 COMMENT 'last change of the lease, ms since epoch',
  PRIMARY KEY (shard)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='shard leases: which clockd instance preloads and rings each shard';

CREATE TABLE clock_instance (
  instance_id VARCHAR(128) NOT NULL COMMENT 'CLOCKD_INSTANCE_ID of a running clockd',
  http_addr   VARCHAR(255) NOT NULL DEFAULT '' COMMENT 'its REST address',
  started_at  BIGINT NOT NULL COMMENT 'process start, ms since epoch',
  expires_at  BIGINT NOT NULL COMMENT 'heartbeat expiry, ms since epoch by the database clock; past = gone',
  PRIMARY KEY (instance_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='live clockd instances (heartbeats); shards are shared fairly among them';

-- +goose Down
DROP TABLE clock_instance;
DROP TABLE clock_shard;
DROP TABLE clock;
DROP TABLE clock_setting;
