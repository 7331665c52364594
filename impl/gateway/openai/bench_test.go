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

// benchAnswer is a streamed text answer as the bench simulator sends it:
// message_start, a text block of eight deltas, the stop events.
var benchAnswer = func() []byte {
	b := append([]byte(nil), benchStart...)
	b = append(b, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"...)
	b = append(b, "event: ping\ndata: {\"type\":\"ping\"}\n\n"...)
	for range 8 {
		b = append(b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"measured words \"}}\n\n"...)
	}
	b = append(b, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"...)
	b = append(b, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":16}}\n\n"...)
	return append(b, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
}()

// BenchmarkStream is a whole streamed answer's translation, with usage.
func BenchmarkStream(b *testing.B) {
	info := Info{Model: "claude-sonnet-4-5", Stream: true, IncludeUsage: true}
	var out []byte
	b.SetBytes(int64(len(benchAnswer)))
	b.ReportAllocs()
	for b.Loop() {
		s := NewStream(info, 1)
		if out = s.End(s.Feed(out[:0], benchAnswer)); !s.Done {
			b.Fatal("answer not done")
		}
	}
}
