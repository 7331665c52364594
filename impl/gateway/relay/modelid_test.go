package relay

import (
	"strings"
	"testing"
)

func TestValidModelID(t *testing.T) {
	t.Parallel()
	for m, want := range map[string]bool{
		"claude-sonnet-4-5":        true,
		strings.Repeat("m", 256):   true,
		strings.Repeat("m", 257):   false,
		strings.Repeat("m", 5e6+7): false,
		"claude-\xff":              false,
		"claude-sonnet-4-5\x00":    false,
		"claude\tsonnet":           false,
		"claude\x7f":               false,
		"claude-sonnet-4-5@2025":   true,
	} {
		if got := validModelID(m); got != want {
			t.Errorf("validModelID(%.20q…) = %v", m, got)
		}
	}
}

// A model decoded from a \u0000 escape is refused before it reaches the
// request event; errorType keeps only a word from an upstream's body.
func TestStoredTextFromRequestsAndUpstreams(t *testing.T) {
	t.Parallel()
	m, _, err := scanRequest([]byte(`{"model":"claude-sonnet-4-5\u0000","max_tokens":1,"messages":[]}`))
	if err == nil && validModelID(m) {
		t.Fatalf("model %q admitted", m)
	}
	for body, want := range map[string]string{
		`{"type":"error","error":{"type":"overloaded_error","message":"x"}}`:          "overloaded_error",
		"{\"type\":\"error\",\"error\":{\"type\":\"bad\x00type\",\"message\":\"x\"}}": "upstream_error",
		`{"type":"error","error":{"type":"bad\u00e9","message":"x"}}`:                 "upstream_error",
	} {
		if got := errorType([]byte(body)); got != want {
			t.Errorf("errorType(%q) = %q, want %q", body, got, want)
		}
	}
}
