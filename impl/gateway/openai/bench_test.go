package openai

import (
	"testing"
)

// benchChat is the bench's streaming request: the same bytes are a request
// in either dialect.
var benchChat = []byte(`{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"measure the added latency of the gateway please"}]}`)

// benchStart is a provider's first event, as the bench simulator sends it.
var benchStart = []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_sim_00000001\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"usage\":{\"input_tokens\":9,\"output_tokens\":1,\"cache_creation_input_tokens\":9,\"cache_read_input_tokens\":0,\"cache_creation\":{\"ephemeral_5m_input_tokens\":9,\"ephemeral_1h_input_tokens\":0}}}}\n\n")

// BenchmarkTranslate is the request's translation, before it is relayed.
func BenchmarkTranslate(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Translate(benchChat); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFirstChunk is the first chunk made from message_start: a new
// Stream fed the event.
func BenchmarkFirstChunk(b *testing.B) {
	info := Info{Model: "claude-sonnet-4-5", Stream: true}
	var out []byte
	b.ReportAllocs()
	for b.Loop() {
		s := NewStream(info, 1)
		if out = s.Feed(out[:0], benchStart); len(out) == 0 {
			b.Fatal("no chunk")
		}
	}
}
