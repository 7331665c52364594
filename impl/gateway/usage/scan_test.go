package usage

import (
	"bytes"
	"encoding/json"
	"testing"
)

// extractByDecoding is the oracle the scanner must agree with.
// Extract keeps at most the cache writes as 1-hour writes; so does it.
func extractByDecoding(body []byte, sse [][]byte) tokenUsage {
	u := decodeUsage(body, sse)
	u.CacheCreation.Ephemeral1h = min(u.CacheCreation.Ephemeral1h, u.CacheCreationInputTokens)
	return u
}

func scanned(body []byte, sse [][]byte) tokenUsage {
	p := Pending{Body: body, SSE: sse}
	Extract(&p)
	return tokenUsage{p.Event.InputTokens, p.Event.OutputTokens, p.Event.CacheCreationInputTokens, p.Event.CacheReadInputTokens,
		cacheCreation{p.Event.CacheCreation1hInputTokens}}
}

var usageBodies = []string{
	`{"id":"msg_1","type":"message","content":[{"type":"text","text":"a \"usage\": {\"input_tokens\": 99} b"}],"usage":{"input_tokens":8,"output_tokens":9}}`,
	`{"usage" : { "input_tokens" : 1 , "output_tokens":2,"cache_creation_input_tokens":3,"cache_read_input_tokens":4, "cache_creation":{"ephemeral_5m_input_tokens":3},"service_tier":"standard"} }`,
	`{"content":[{"type":"tool_use","input":{"usage":{"input_tokens":500}}}],"usage":{"output_tokens":7}}`,
	`{"usage":{"input_tokens":1}, "usage2":{"input_tokens":5}}`,
	`{"usage":null}`,
	`{"usage":{"cache_creation_input_tokens":30,"cache_creation":{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":20}}}`,
	`{"usage":{"cache_creation_input_tokens":5,"cache_creation":{"ephemeral_1h_input_tokens":20}}}`,
	`{"usage":{"input_tokens":2,"cache_creation":null}}`,
	`{"usage":{"input_tokens":2,"cache_creation":"x"}}`,
	`{"usage":{"input_tokens":2,"cache_creation":{"ephemeral_1h_input_tokens":1.5}}}`,
	`{"usage":{"input_tokens":null,"output_tokens":4}}`,
	`{"usage":{"input_tokens":1.5,"output_tokens":4}}`,
	`{"usage":{"input_tokens":"3","output_tokens":4}}`,
	`{"usage":{"input_tokens":-3,"output_tokens":4}}`,
	`{"usage":[1,2]}`,
	`{"usage":{"input_tokens":3`, // truncated capture
	`not json`,
	`[]`,
	`{"type":"error","error":{"type":"overloaded_error","message":"x"}}`,
	// Keys fold as encoding/json folds them, Unicode folds of another
	// length included (ſ is s, K is K).
	`{"USAGE":{"Input_Tokens":5,"output_tokenſ":2,"cache_read_input_toKens":1}}`,
}

var usageLines = []string{
	`data: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":10,"output_tokens":1,"cache_read_input_tokens":2}}}`,
	`data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}`,
	`data: {"type":"message_delta","usage":{"input_tokens":12,"output_tokens":20,"cache_creation_input_tokens":4}}`,
	`data: {"type":"message_start","message":{"usage":{"input_tokens":1,"cache_creation_input_tokens":7,"cache_creation":{"ephemeral_1h_input_tokens":7}}}}`,
	`data: {"type":"message_delta","usage":{"output_tokens":3,"cache_creation_input_tokens":9,"cache_creation":{"ephemeral_1h_input_tokens":9}}}`,
	`data: {"message":{"usage":{"input_tokens":77}},"type":"message_start"}`,
	`data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`data: {"type":"message_delta","usage":null}`,
	`data: {"type":"message_start","message":{"usage":{"input_tokens":"x"}}}`,
	`data: {"type":"message_delta","usage":{"output_tokens":3`,
	`data:{"type":"message_delta","usage":{"output_tokens":30}}`,
}

// The scanner reads exactly what decoding read, on messages, streams and
// malformed or truncated captures.
func TestExtractAgreesWithDecoding(t *testing.T) {
	t.Parallel()
	for _, b := range usageBodies {
		if !json.Valid([]byte(b)) {
			continue
		}
		if got, want := scanned([]byte(b), nil), extractByDecoding([]byte(b), nil); got != want {
			t.Errorf("body %s: scanned %+v, decoded %+v", b, got, want)
		}
	}
	for i := range usageLines {
		for j := range usageLines {
			if !json.Valid([]byte(usageLines[i][5:])) || !json.Valid([]byte(usageLines[j][5:])) {
				continue
			}
			sse := [][]byte{[]byte(usageLines[i]), []byte(usageLines[j])}
			if got, want := scanned(nil, sse), extractByDecoding(nil, sse); got != want {
				t.Errorf("lines %d,%d: scanned %+v, decoded %+v", i, j, got, want)
			}
		}
	}
}

func FuzzExtractAgreesWithDecoding(f *testing.F) {
	for _, b := range usageBodies {
		f.Add([]byte(b))
	}
	for _, l := range usageLines {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(bytes.TrimPrefix(b, []byte("data:"))) {
			// The scanner does not validate (see scanUsage); cut-off
			// captures are TestExtractIgnoresCutCaptures'.
			t.Skip()
		}
		if got, want := scanned(b, nil), extractByDecoding(b, nil); got != want {
			t.Errorf("body %q: scanned %+v, decoded %+v", b, got, want)
		}
		sse := [][]byte{b}
		if got, want := scanned(nil, sse), extractByDecoding(nil, sse); got != want {
			t.Errorf("line %q: scanned %+v, decoded %+v", b, got, want)
		}
	})
}

// Reading usage allocates nothing, and the scanner decides the usual
// answers itself (no fallback to decoding).
func TestExtractDoesNotAllocate(t *testing.T) {
	for _, b := range usageBodies {
		if _, exact := scanUsage([]byte(b), nil); !exact {
			t.Errorf("body %s: the scanner fell back to decoding", b)
		}
	}
	if raceEnabled {
		return
	}
	body := []byte(usageBodies[0])
	sse := [][]byte{[]byte(usageLines[0]), []byte(usageLines[1])}
	if n := testing.AllocsPerRun(100, func() {
		p := Pending{Body: body, SSE: sse}
		Extract(&p)
	}); n != 0 {
		t.Errorf("%v allocations per Extract", n)
	}
}

// A capture cut short gives no usage, as it did when it was decoded.
func TestExtractIgnoresCutCaptures(t *testing.T) {
	t.Parallel()
	whole := usageBodies[0]
	for n := 1; n < len(whole); n++ {
		if u := scanned([]byte(whole[:n]), nil); u != (tokenUsage{}) {
			t.Fatalf("cut at %d: %+v", n, u)
		}
	}
	line := usageLines[0]
	for n := 6; n < len(line); n++ {
		if u := scanned(nil, [][]byte{[]byte(line[:n])}); u != (tokenUsage{}) {
			t.Fatalf("line cut at %d: %+v", n, u)
		}
	}
	if u := scanned([]byte(whole+`{"usage":{"input_tokens":5}}`), nil); u != (tokenUsage{}) {
		t.Fatalf("two objects: %+v", u)
	}
}

// BenchmarkExtractStream is the recorder's work on one streamed answer's
// captured lines (message_start, message_delta).
func BenchmarkExtractStream(b *testing.B) {
	sse := [][]byte{
		[]byte(`data: {"type":"message_start","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`),
		[]byte(`data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}`),
	}
	b.ReportAllocs()
	for b.Loop() {
		p := Pending{SSE: sse}
		Extract(&p)
	}
}

// BenchmarkExtractMessage is the same for a non-streamed answer's body.
func BenchmarkExtractMessage(b *testing.B) {
	body := []byte(`{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello! How can I help you today?"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":15}}`)
	b.ReportAllocs()
	for b.Loop() {
		p := Pending{Body: body}
		Extract(&p)
	}
}
