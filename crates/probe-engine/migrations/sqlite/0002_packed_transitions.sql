-- Transitions move into packed days (src/history/events.rs): about 8 bytes each, where a row
-- and its two indexes took about 90. The daemon converts the old rows when it opens the database
-- (transitions_v1, then dropped).

-- Every cause, reason and detail, once; `last_day` is the last day a transition used it, so
-- that retention drops a text with the last day that names it.
CREATE TABLE texts (
    id INTEGER PRIMARY KEY,
    text TEXT NOT NULL UNIQUE,
    last_day INTEGER NOT NULL
);
CREATE INDEX texts_by_day ON texts (last_day);

-- Every state change of every target and group: a target's day (since the Unix epoch, UTC)
-- per row, packed. By target first, for a target's history; by day for retention and for
-- the fleet's recent incidents.
CREATE TABLE changes (
    target INTEGER NOT NULL REFERENCES targets (id),
    day INTEGER NOT NULL,
    events BLOB NOT NULL,
    PRIMARY KEY (target, day)
) WITHOUT ROWID;
CREATE INDEX changes_by_day ON changes (day);

DROP INDEX transitions_by_target;
DROP INDEX transitions_by_time;
ALTER TABLE transitions RENAME TO transitions_v1;
