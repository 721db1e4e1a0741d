-- A CHECK on clock.status: a row changed behind clockd's back (by hand, by
-- a script) cannot hold a status clockd does not know. MariaDB and MySQL
-- 8.0.16+ enforce it (older MySQL parses and ignores it).
--
-- NOT online: neither MySQL 8 nor MariaDB adds a CHECK in place (both must
-- validate every row, so ALGORITHM=COPY): the table is copied while writes
-- to `clock` wait (reads go on). Measured here (MariaDB 10.11, 2 shared
-- cores): 2 min 20 s on a `clock` of 11 M rows (2.5 GB of data); under a
-- second on a table trimmed by the janitor to a day of clocks at a few
-- hundred creates a second.
-- On a large table that was never trimmed, keep the copy out of the
-- upgrade: add the constraint ahead of it online with pt-online-schema-change
-- or gh-ost (the ADD CONSTRAINT below), then mark this version applied:
--   INSERT INTO goose_db_version (version_id, is_applied) VALUES (5, 1);
-- and clockd will not run it.

-- +goose Up
ALTER TABLE clock
  ADD CONSTRAINT ck_clock_status CHECK (status IN ('pending', 'firing', 'rung', 'cancelled', 'expired', 'dead'));

-- +goose Down
ALTER TABLE clock DROP CONSTRAINT ck_clock_status;
