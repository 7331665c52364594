-- Change tracking for incremental snapshot rebuilds: every configuration
-- change writes, in its own transaction, one row per resource it touched
-- under the config generation it bumped to. kind is "upstream",
-- "principal" (its keys and chain entries included), "registry", or "*"
-- (a change the log cannot describe: readers rebuild in full). A replica
-- rebuilds from the rows after its snapshot's generation only when every
-- generation in between has a row; a writer that does not know this table
-- (an older version) leaves a gap, and readers fall back to a full load.
CREATE TABLE config_changes (
    generation BIGINT NOT NULL,
    kind TEXT NOT NULL,
    id TEXT NOT NULL
);
CREATE INDEX config_changes_generation ON config_changes (generation);
