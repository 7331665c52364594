-- An upstream's cap on requests in flight (docs/routing.md): at it the
-- router sends new attempts to the next upstream of the plan, and when
-- every planned upstream is at its cap the request waits in the first's
-- queue. Counted per replica. 0 is no cap.
ALTER TABLE upstreams ADD COLUMN max_in_flight INTEGER NOT NULL DEFAULT 0;
