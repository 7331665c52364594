package cloud

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// Only the model's value changes: spacing, key order and the other
// fields' bytes stay the platform's; a nested "model" elsewhere is left.
func TestWithModelChangesOnlyTheModel(t *testing.T) {
	t.Parallel()
	in := `{"id":"m", "content":[{"type":"text","text":"\"model\":\"x\""}],"model" : "anthropic.x-v1:0","usage":{"model":"u"}}`
	want := `{"id":"m", "content":[{"type":"text","text":"\"model\":\"x\""}],"model" : "claude-x","usage":{"model":"u"}}`
	if got := string(withModel([]byte(in), "claude-x")); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	for _, b := range []string{`{"id":"m"}`, `not json`, `[1]`} {
		if got := string(withModel([]byte(b), "claude-x")); got != b {
			t.Fatalf("%s became %s", b, got)
		}
	}
}

// A stream's first event gets the client's model whichever way the
// platform's bytes arrive; the events after it pass unchanged.
func TestStartModelRenamesTheFirstEventOnly(t *testing.T) {
	t.Parallel()
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c@1\",\"content\":[]}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"model\":\"c@1\"}\n\n"
	want := strings.Replace(stream, "c@1", "claude-c", 1)
	for name, r := range map[string]io.Reader{
		"whole":    strings.NewReader(stream),
		"one byte": iotest.OneByteReader(strings.NewReader(stream)),
		"with EOF": iotest.DataErrReader(strings.NewReader(stream)),
	} {
		got, err := io.ReadAll(&startModel{src: io.NopCloser(r), model: "claude-c"})
		if err != nil || string(got) != want {
			t.Fatalf("%s: %v\n got %q\nwant %q", name, err, got, want)
		}
	}
	// A stream cut before its first event ends is passed on with its error.
	cut := stream[:30]
	got, err := io.ReadAll(&startModel{src: io.NopCloser(iotest.TimeoutReader(strings.NewReader(cut))), model: "claude-c"})
	if err == nil || !strings.HasPrefix(cut, string(got)) {
		t.Fatalf("cut: %q %v", got, err)
	}
}

// span finds the top-level field encoding/json finds, whatever comes
// before it: escapes, nesting, numbers, literals and spacing.
func FuzzSpan(f *testing.F) {
	for _, s := range []string{
		`{"id":"m","type":"message","role":"assistant","model":"anthropic.x-v1:0","content":[]}`,
		`{ "a" : [1, {"model":"inner"}, "x\"}"] , "b":{"c":{"model":2}}, "model" : "m" }`,
		`{"n":-1.5e3,"t":true,"f":false,"z":null,"model":"m"}`,
		`{"message":{"model":"x"}}`,
		`{"model":"a\\"b"}`,
		`{"a":"\\\\","model":"m"}`,
		`{"a":1`, `[]`, `"model"`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) != nil {
			return
		}
		want, has := m["model"]
		if !has || bytes.Contains(b, []byte(`\u`)) || countKey(b) != 1 {
			// A key spelled with escapes is not looked for; a repeated
			// key is not this function's question.
			return
		}
		start, end, ok := span(b, "model")
		if !ok {
			t.Fatalf("no model found in %s", b)
		}
		var g, w any
		if json.Unmarshal(b[start:end], &g) != nil || json.Unmarshal(want, &w) != nil || !reflect.DeepEqual(g, w) {
			t.Fatalf("span %q, want %q in %s", b[start:end], want, b)
		}
	})
}

// countKey counts the top-level "model" keys of b.
func countKey(b []byte) int {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return 0
	}
	n := 0
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return n
		}
		if t == "model" {
			n++
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return n
		}
	}
	return n
}
