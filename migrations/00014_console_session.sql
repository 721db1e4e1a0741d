-- Console sessions kept on the server. The console's cookie used to hold
-- the admin token itself: a copy of the cookie was the token, valid on /v1
-- until revoked, and logging out only asked the browser to forget it. The
-- cookie now holds a random session id; this table maps its hash to the
-- hash of the token the operator logged in with (neither the id nor the
-- token is stored), so that every instance accepts the session, a logout
-- deletes it for all of them, and a revoked token ends its sessions.
--
-- A new table: the migration copies nothing and locks no clock.

-- +goose Up
CREATE TABLE clock_console_session (
  id_hash    BINARY(32) NOT NULL COMMENT 'SHA-256 of the session id the cookie holds; the id itself is not stored',
  token_hash BINARY(32) NOT NULL COMMENT 'SHA-256 of the admin token the session was opened with (clock_token.secret_hash, or the bootstrap token''s): the session works while that token does',
  created_at BIGINT NOT NULL COMMENT 'login, ms since epoch',
  expires_at BIGINT NOT NULL COMMENT 'end of the session, ms since epoch; expired rows are deleted at later logins',
  PRIMARY KEY (id_hash),
  KEY idx_clock_console_session_expires (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='operator console sessions (auth.mode tokens); deleted at logout';

-- +goose Down
DROP TABLE clock_console_session;
