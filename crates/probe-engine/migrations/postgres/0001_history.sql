-- The daemon's history (see crates/probe-engine/src/history). Times are Unix milliseconds.
-- The same tables as SQLite's, shared by the members of a cluster.

-- Ids are numbered once, so that the big tables repeat a small integer, not a name.
CREATE TABLE targets (
    id BIGSERIAL PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);

-- Every state change of every target and group.
CREATE TABLE transitions (
    target BIGINT NOT NULL REFERENCES targets (id),
    at_ms BIGINT NOT NULL,
    from_state TEXT NOT NULL,
    to_state TEXT NOT NULL,
    cause TEXT NOT NULL,
    reason TEXT,
    detail TEXT
);
CREATE INDEX transitions_by_target ON transitions (target, at_ms);
CREATE INDEX transitions_by_time ON transitions (at_ms);

-- A target's hourly rollups, a day (since the Unix epoch, UTC) per row, packed (codec.rs).
-- Keyed by day first: retention and the size cap drop whole days from the front.
CREATE TABLE rollups (
    day BIGINT NOT NULL,
    target BIGINT NOT NULL REFERENCES targets (id),
    hours BYTEA NOT NULL,
    PRIMARY KEY (day, target)
);

-- Operator actions: maintenance set and ended, circuit commands, ejections cleared.
CREATE TABLE actions (
    target BIGINT NOT NULL REFERENCES targets (id),
    at_ms BIGINT NOT NULL,
    action TEXT NOT NULL,
    who TEXT NOT NULL,
    detail TEXT
);
CREATE INDEX actions_by_target ON actions (target, at_ms);

-- When a daemon was recording: time outside every session is unknown, never uptime or downtime.
CREATE TABLE sessions (
    id BIGSERIAL PRIMARY KEY,
    member TEXT NOT NULL,
    started_ms BIGINT NOT NULL,
    seen_ms BIGINT NOT NULL
);
