package relay

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/affinity"
	"github.com/pillarhq/pillar/impl/gateway/routing"
)

// flushLog is a ResponseWriter that keeps what each flush sent, and
// whether the status line had been written by then.
type flushLog struct {
	*httptest.ResponseRecorder
	sent    int
	flushes []string
}

func (f *flushLog) Flush() {
	f.flushes = append(f.flushes, f.Body.String()[f.sent:])
	f.sent = f.Body.Len()
	f.ResponseRecorder.Flush()
}

// The first flush of a stream carries its first event whole, on both
// paths: neither sends its headers alone nor holds the first event back
// for a later one, so a client's time to first chunk is the provider's
// message_start plus the relay's work on it.
func TestFirstFlushCarriesTheFirstEvent(t *testing.T) {
	s := fixture(apiKeyUpstream("up_1", "http://upstream.invalid", "sk-upstream"))
	h := New(Options{
		Source:    fakeSource{s},
		Transport: streamTransport{benchEvents()},
		Recorder:  discardRecorder{},
		Board:     routing.NewBoard(nil),
		Affinity:  affinity.NewTable(),
		Admission: admission.New(admission.Options{}),
	})
	body := []byte(`{"model":"claude-test","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	for _, c := range []struct {
		path, hdr, val, first string
	}{
		{"/v1/messages", "x-api-key", "sk-good", "event: message_start\ndata: "},
		{"/v1/chat/completions", "Authorization", "Bearer sk-good", `data: {"id":"chatcmpl-`},
	} {
		req := httptest.NewRequest("POST", c.path, bytes.NewReader(body))
		req.Header.Set(c.hdr, c.val)
		w := &flushLog{ResponseRecorder: httptest.NewRecorder()}
		h.ServeHTTP(w, req)
		if w.Code != 200 || len(w.flushes) == 0 {
			t.Fatalf("%s: status %d, %d flushes", c.path, w.Code, len(w.flushes))
		}
		f := w.flushes[0]
		if !strings.HasPrefix(f, c.first) || !strings.HasSuffix(f, "\n\n") || strings.Count(f, "\n\n") != 1 {
			t.Errorf("%s: first flush %q, want the first event alone and whole", c.path, f)
		}
		if c.path == "/v1/chat/completions" && !strings.Contains(f, `"delta":{"role":"assistant","content":""}`) {
			t.Errorf("%s: first flush %q is not the role chunk", c.path, f)
		}
	}
}
