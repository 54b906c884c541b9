-- The daemon's history (see crates/probe-engine/src/history). Times are Unix milliseconds.

-- Ids are numbered once, so that the big tables repeat a small integer, not a name.
CREATE TABLE targets (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);

-- Every state change of every target and group.
CREATE TABLE transitions (
    target INTEGER NOT NULL REFERENCES targets (id),
    at_ms INTEGER NOT NULL,
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
    day INTEGER NOT NULL,
    target INTEGER NOT NULL REFERENCES targets (id),
    hours BLOB NOT NULL,
    PRIMARY KEY (day, target)
) WITHOUT ROWID;

-- Operator actions: maintenance set and ended, circuit commands, ejections cleared.
CREATE TABLE actions (
    target INTEGER NOT NULL REFERENCES targets (id),
    at_ms INTEGER NOT NULL,
    action TEXT NOT NULL,
    who TEXT NOT NULL,
    detail TEXT
);
CREATE INDEX actions_by_target ON actions (target, at_ms);

-- When a daemon was recording: time outside every session is unknown, never uptime or downtime.
CREATE TABLE sessions (
    id INTEGER PRIMARY KEY,
    member TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    seen_ms INTEGER NOT NULL
);
