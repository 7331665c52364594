package openai

import (
	"net/http/httptest"
	"slices"
	"testing"
)

// TestPrepare: an OpenAI client's request gets the anthropic-version the
// provider needs (its own kept when it sends one), loses OpenAI's account
// headers, and a model list asks for the longest page. The version's
// value is shared between requests: what one request does to its headers
// never reaches another's.
func TestPrepare(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	for _, k := range []string{"Openai-Organization", "Openai-Project", "Openai-Beta"} {
		r.Header.Set(k, "x")
	}
	r.Header.Set("User-Agent", "OpenAI/Go")
	Prepare(r)
	if got := r.Header.Values("Anthropic-Version"); !slices.Equal(got, []string{AnthropicVersion}) {
		t.Fatalf("anthropic-version %q", got)
	}
	for _, k := range []string{"Openai-Organization", "Openai-Project", "Openai-Beta"} {
		if _, ok := r.Header[k]; ok {
			t.Errorf("%s kept", k)
		}
	}
	if r.Header.Get("User-Agent") != "OpenAI/Go" || r.URL.RawQuery != "" {
		t.Errorf("other headers or the query changed: %v %q", r.Header, r.URL.RawQuery)
	}

	other := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	Prepare(other)
	r.Header.Add("Anthropic-Version", "2099-01-01")
	other.Header.Set("Anthropic-Version", "2098-01-01")
	third := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	Prepare(third)
	if got := third.Header.Values("Anthropic-Version"); !slices.Equal(got, []string{AnthropicVersion}) {
		t.Fatalf("another request's headers reached this one's: %q", got)
	}
	if got := r.Header.Values("Anthropic-Version"); !slices.Equal(got, []string{AnthropicVersion, "2099-01-01"}) {
		t.Fatalf("added to: %q", got)
	}

	own := httptest.NewRequest("GET", "/v1/models", nil)
	own.Header.Set("Anthropic-Version", "2024-01-01")
	Prepare(own)
	if own.Header.Get("Anthropic-Version") != "2024-01-01" || own.URL.RawQuery != "limit=1000" {
		t.Fatalf("model list: %v %q", own.Header, own.URL.RawQuery)
	}
	paged := httptest.NewRequest("GET", "/v1/models?limit=5", nil)
	Prepare(paged)
	if paged.URL.RawQuery != "limit=5" {
		t.Fatalf("a query of the client's replaced: %q", paged.URL.RawQuery)
	}
}
