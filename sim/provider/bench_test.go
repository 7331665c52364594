package provider

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// The sim is the upstream in the proxy's benchmarks, so its own cost per
// request must stay small next to the proxy's.
func BenchmarkMessages(b *testing.B) {
	text := strings.TrimSpace(strings.Repeat("lorem ipsum dolor ", 20))
	for _, c := range []struct {
		name   string
		stream bool
		rec    int
	}{{"json", false, 0}, {"stream", true, 0}, {"stream-unrecorded", true, -1}} {
		b.Run(c.name, func(b *testing.B) {
			p := New(Options{MaxRecorded: c.rec})
			body := `{"model":"m","max_tokens":64,"stream":` + map[bool]string{true: "true", false: "false"}[c.stream] +
				`,"messages":[{"role":"user","content":"` + text + `"}]}`
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest("POST", "/v1/messages", strings.NewReader(body))
				req.Header.Set("x-api-key", DefaultAPIKey)
				req.Header.Set("anthropic-version", "2023-06-01")
				w := httptest.NewRecorder()
				p.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatal(w.Code, w.Body.String())
				}
			}
		})
	}
}
