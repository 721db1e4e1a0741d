-- Applications own their clocks: API tokens and per-application quotas.
--
-- A token's secret is never stored: only its SHA-256 (the secret is 32
-- random bytes, so a plain hash is enough) and a short prefix that lets
-- people tell their tokens apart. Revoked tokens stay, with revoked_at, for
-- the record.
--
-- Both are new tables: the migration copies nothing and locks no clock.

-- +goose Up
CREATE TABLE clock_token (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'token id, as the API and clockctl name it',
  application   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL COMMENT 'the application whose clocks the token may use; NULL for the admin kind',
  admin         TINYINT(1) NOT NULL DEFAULT 0 COMMENT '1: admin kind, may do everything (tokens, quotas, any application, /metrics, /v1/cluster)',
  scopes        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '' COMMENT 'comma-separated scopes of an application token: read (get, list), write (create, batch, cancel, reschedule, replay)',
  name          VARCHAR(255) NOT NULL DEFAULT '' COMMENT 'free text to tell tokens apart (who or what uses it)',
  secret_hash   BINARY(32) NOT NULL COMMENT 'SHA-256 of the secret; the secret itself is shown once, at creation, and never stored',
  secret_prefix VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'first characters of the secret, to recognise it (not enough to use it)',
  created_at    BIGINT NOT NULL COMMENT 'creation, ms since epoch',
  last_used_at  BIGINT NULL COMMENT 'last time a request carried it, ms since epoch (written at most every auth.cache_ttl); NULL = never',
  revoked_at    BIGINT NULL COMMENT 'revocation, ms since epoch; NULL while the token works',
  PRIMARY KEY (id),
  UNIQUE KEY uk_clock_token_secret_hash (secret_hash),
  KEY idx_clock_token_application (application)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='API tokens: per-application with scopes, or of the admin kind; stored hashed';

CREATE TABLE clock_quota (
  application        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL COMMENT 'the application the quota applies to',
  max_live_clocks    INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'most clocks pending or firing at once; 0 = no limit',
  creates_per_second INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'most creates per second per clockd instance (token bucket, burst of one second); 0 = no limit',
  max_payload_bytes  INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'largest payload of one clock, bytes; 0 = only clock.max_payload_bytes applies',
  update_time        BIGINT NOT NULL COMMENT 'last change, ms since epoch',
  PRIMARY KEY (application)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='per-application quotas, set through PUT /v1/applications/{application}/quota';

-- +goose Down
DROP TABLE clock_quota;
DROP TABLE clock_token;
