package relay

import (
	"bytes"
	"net/http/httptest"
	"testing"
)

// BenchmarkRefusal is the cost of the proxy path's error answers: a key
// it does not know (refused before the body is read, counted only) and a
// model the principal may not use (refused after it, recorded as an
// event).
func BenchmarkRefusal(b *testing.B) {
	h := benchHandler(b)
	for _, c := range []struct {
		name, key, model string
		status           int
	}{
		{"unknown_key", "sk-unknown", "claude-test", 401},
		{"model_not_allowed", "sk-good", "gpt-4o", 403},
	} {
		body := []byte(`{"model":"` + c.model + `","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				req := httptest.NewRequest("POST", "/v1/messages", bytes.NewReader(body))
				req.Header.Set("x-api-key", c.key)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != c.status {
					b.Fatal(w.Code, w.Body.String())
				}
			}
		})
	}
}
