-- Bedrock and Vertex upstreams (docs/cloud.md): where a cloud upstream
-- sends requests and what it calls each model, as JSON
-- {"region":…,"project":…,"model_map":{client model: upstream id}};
-- empty for the Anthropic kinds.
ALTER TABLE upstreams ADD COLUMN cloud TEXT NOT NULL DEFAULT '';
-- The model id the upstream was asked for, when it differs from the
-- model the client named (an alias mapped by the upstream's model_map).
ALTER TABLE request_events ADD COLUMN upstream_model TEXT NOT NULL DEFAULT '';
