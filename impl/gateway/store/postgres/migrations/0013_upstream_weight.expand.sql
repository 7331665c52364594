-- An upstream's share of new work within its priority class (the built-in
-- router's spreading, docs/routing.md); 0 is standby. Existing upstreams
-- weigh 1: equal shares.
ALTER TABLE upstreams ADD COLUMN weight INTEGER NOT NULL DEFAULT 1;
