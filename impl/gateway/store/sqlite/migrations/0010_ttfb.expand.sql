-- Time to first byte of a request event: from arrival to the first byte of
-- the upstream's answer relayed to the client, in milliseconds. NULL when
-- no upstream answer was relayed (a refusal, an unreachable upstream) and
-- on events recorded before this column.
ALTER TABLE request_events ADD COLUMN ttfb_ms INTEGER;
