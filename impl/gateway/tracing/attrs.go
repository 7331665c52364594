package tracing

import "go.opentelemetry.io/otel/attribute"

// Attribute keys of the proxy's spans: OpenTelemetry's HTTP and GenAI
// semantic conventions where one fits, pillar.* for the rest. None carries
// a credential, a prompt or a body (docs/tracing.md lists them).
const (
	HTTPMethod       = attribute.Key("http.request.method")
	HTTPStatus       = attribute.Key("http.response.status_code")
	HTTPRoute        = attribute.Key("http.route")
	URLPath          = attribute.Key("url.path")
	ServerAddress    = attribute.Key("server.address")
	ErrorType        = attribute.Key("error.type")
	GenAISystem      = attribute.Key("gen_ai.system")
	GenAIOperation   = attribute.Key("gen_ai.operation.name")
	GenAIModel       = attribute.Key("gen_ai.request.model")
	GenAIInputTokens = attribute.Key("gen_ai.usage.input_tokens")
	GenAIOutput      = attribute.Key("gen_ai.usage.output_tokens")

	CacheReadTokens     = attribute.Key("pillar.usage.cache_read_input_tokens")
	CacheCreationTokens = attribute.Key("pillar.usage.cache_creation_input_tokens")
	CostUSD             = attribute.Key("pillar.cost_usd")
	PrincipalID         = attribute.Key("pillar.principal.id")
	UpstreamID          = attribute.Key("pillar.upstream.id")
	UpstreamName        = attribute.Key("pillar.upstream.name")
	UpstreamKind        = attribute.Key("pillar.upstream.kind")
	Attempt             = attribute.Key("pillar.attempt")
	FailoverReason      = attribute.Key("pillar.failover.reason")
	CooldownUntil       = attribute.Key("pillar.cooldown.until")
	FirstByteMillis     = attribute.Key("pillar.time_to_first_byte_ms")
	LimitKind           = attribute.Key("pillar.limit.kind")
	SkipReason          = attribute.Key("pillar.skip.reason")
	JobKind             = attribute.Key("pillar.job.kind")
	JobAttempt          = attribute.Key("pillar.job.attempt")
	Outcome             = attribute.Key("pillar.outcome")
)

// Span and event names.
const (
	EventUpstreamSkipped = "upstream skipped"
	EventStreamCut       = "stream cut"
)
