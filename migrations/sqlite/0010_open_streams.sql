-- Open inbox streams of every daemon sharing this database, so that the per-user stream limit
-- holds across daemons. Each daemon renews its row in `stream_daemons` while it runs; the
-- streams of a daemon whose row lapsed (it was killed) no longer count, and housekeeping
-- deletes them.
CREATE TABLE stream_daemons (
    id           TEXT PRIMARY KEY,
    alive_until  BIGINT NOT NULL
);

CREATE TABLE open_streams (
    connection_id   TEXT PRIMARY KEY,
    application_id  TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    daemon_id       TEXT NOT NULL,
    opened_at       BIGINT NOT NULL
);
CREATE INDEX open_streams_user ON open_streams (application_id, user_id);
CREATE INDEX open_streams_daemon ON open_streams (daemon_id);
