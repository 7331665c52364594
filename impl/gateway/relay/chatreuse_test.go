package relay

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestChatWritersAreReusedOnlyWhenDone runs Chat Completions requests
// concurrently (streamed, collected, cut mid-stream and refused) through
// one handler, whose translating writers are released when the handler
// returns and reused by the next requests. Each answer must be its own,
// whole: a writer used after its release (by a late write, or by two
// requests at once) would mix answers, lose their ends, or, under the race
// detector (CGO_ENABLED=1 go test -race), race with its zeroing.
func TestChatWritersAreReusedOnlyWhenDone(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := r.Header.Get("X-Test-N")
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"msg_%s","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"answer %s"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":2}}`, n, n)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		events := []string{
			`{"type":"message_start","message":{"id":"msg_` + n + `","model":"claude-test","usage":{"input_tokens":9,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"answer ` + n + `"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`,
			`{"type":"message_stop"}`,
		}
		if r.Header.Get("X-Test-Reply") == "cut" {
			events = events[:3]
		}
		for _, e := range events {
			fmt.Fprintf(w, "data: %s\n\n", e)
			w.(http.Flusher).Flush()
		}
		if r.Header.Get("X-Test-Reply") == "cut" {
			panic(http.ErrAbortHandler)
		}
	}))
	t.Cleanup(up.Close)
	srv := newTestHandler(fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), &memRecorder{})
	t.Cleanup(srv.Close)

	const workers, rounds = 4, 12
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				n := fmt.Sprint(g*rounds + i)
				kind := (g + i) % 4
				body := `{"model":"claude-test","messages":[{"role":"user","content":"question ` + n + `"}],"stream":true}`
				switch kind {
				case 1:
					body = `{"model":"claude-test","messages":[{"role":"user","content":"question ` + n + `"}]}`
				case 3:
					body = `{"model":"claude-test","messages":[{"role":"user","content":"question ` + n + `"}],"n":2}`
				}
				req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer sk-good")
				req.Header.Set("X-Test-N", n)
				if kind == 2 {
					req.Header.Set("X-Test-Reply", "cut")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Errorf("request %s: %v", n, err)
					return
				}
				b, _ := io.ReadAll(resp.Body) // a cut stream's connection is aborted after its error
				resp.Body.Close()
				if msg := checkOwnAnswer(kind, n, resp.StatusCode, string(b)); msg != "" {
					t.Errorf("request %s (kind %d): %s in %s", n, kind, msg, b)
				}
			}
		}()
	}
	wg.Wait()
}

// checkOwnAnswer says what is wrong with request n's answer of the kind
// (0 streamed, 1 collected, 2 cut, 3 refused); empty when nothing is.
func checkOwnAnswer(kind int, n string, status int, b string) string {
	id, text := `"id":"chatcmpl-`+n+`"`, "answer "+n
	switch kind {
	case 0:
		if status != 200 || !strings.HasSuffix(b, "data: [DONE]\n\n") || !strings.Contains(b, `"content":"`+text+`"`) {
			return "not a whole stream of its own"
		}
	case 1:
		if status != 200 || !strings.HasPrefix(b, `{`+id) || !strings.Contains(b, `"content":"`+text+`"`) || strings.Contains(b, "data:") {
			return "not its own completion"
		}
		return ""
	case 2:
		if status != 200 || strings.Contains(b, "[DONE]") || !strings.Contains(b, `"content":"`+text+`"`) ||
			!strings.Contains(b[strings.LastIndex(b, "data: "):], `"error"`) {
			return "not its own stream ending in an error"
		}
	case 3:
		if status != 400 || !strings.Contains(b, `"param":"n"`) || strings.Contains(b, "answer") {
			return "not its own refusal"
		}
		return ""
	}
	// Every chunk of a stream carries its own id.
	for _, line := range strings.Split(b, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok && strings.HasPrefix(d, `{"id"`) && !strings.HasPrefix(d, `{`+id) {
			return "a chunk of another answer"
		}
	}
	return ""
}
