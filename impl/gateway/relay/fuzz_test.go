package relay

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Run each for a bounded time, e.g.:
//
//	go test -run='^$' -fuzz='^FuzzScanRequest$' -fuzztime=10s ./impl/gateway/relay/
//	go test -run='^$' -fuzz='^FuzzSSETap$' -fuzztime=10s ./impl/gateway/relay/
//	go test -run='^$' -fuzz='^FuzzRelayStreamPassthrough$' -fuzztime=10s ./impl/gateway/relay/
//
// Plain `go test` runs the committed seed corpora in testdata/fuzz.

// FuzzSSETap: whatever the stream and however it is split into reads, the
// tap never changes the bytes it is shown, keeps the same lines, keeps only
// data lines that occur whole in the stream, and bounds what it keeps.
func FuzzSSETap(f *testing.F) {
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n"), uint8(1))
	f.Add([]byte("event: message_delta\r\ndata: {\"usage\":{\"output_tokens\":2},\"type\":\"message_delta\"}\r\n\r\nevent: ping\ndata: {}\n\n"), uint8(7))
	f.Add([]byte("data: {\"type\":\"content_block_start\"}\ndata"), uint8(3))
	f.Add([]byte("event: content_block_start\ndata: {\"index\":0,\"content_block\":{\"type\":\"tool_use\"},\"type\":\"content_block_start\"}\n\n: message_start\n"), uint8(11))
	f.Add([]byte("data: {\"x\":\"0123456789012345678901234567890123456789\",\"type\":\"message_delta\"}\n"), uint8(60))
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent:error\r\n\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n"), uint8(5))
	f.Fuzz(func(t *testing.T, stream []byte, split uint8) {
		orig := bytes.Clone(stream)
		var whole sseTap
		whole.feed(stream)
		if !bytes.Equal(stream, orig) {
			t.Fatal("the tap changed the bytes it was shown")
		}
		size := int(split)%97 + 1
		var parts sseTap
		for i := 0; i < len(stream); i += size {
			parts.feed(stream[i:min(i+size, len(stream))])
		}
		if !slices.EqualFunc(whole.lines, parts.lines, bytes.Equal) || whole.started != parts.started || !bytes.Equal(whole.errData, parts.errData) {
			t.Fatalf("split reads changed the result: %q vs %q (error line %q vs %q)", whole.lines, parts.lines, whole.errData, parts.errData)
		}
		for _, l := range whole.lines {
			if !bytes.HasPrefix(l, []byte("data:")) || len(l) > tapMaxLine || !bytes.Contains(stream, l) {
				t.Fatalf("kept line %q", l)
			}
		}
		lines, started, errData := tapModel(stream)
		if !slices.EqualFunc(whole.lines, lines, bytes.Equal) || whole.started != started || !bytes.Equal(whole.errData, errData) {
			t.Fatalf("the tap kept %q (started %v, error line %q), the model %q (started %v, error line %q)",
				whole.lines, whole.started, whole.errData, lines, started, errData)
		}
	})
}

// tapModel is what sseTap computes, written line by line over the whole
// stream with plain searches: the tap's own code avoids copies and repeated
// searches, and must not change what it keeps.
func tapModel(stream []byte) (kept [][]byte, started bool, errData []byte) {
	usageEvent, errEvent := false, false
	names := [][]byte{[]byte("message_start"), []byte("message_delta"), []byte("content_block_start")}
	for {
		i := bytes.IndexByte(stream, '\n')
		if i < 0 {
			// A line is kept only once it ended, but a long enough head
			// is decided before.
			if len(stream) >= tapDecideBytes {
				started = started || bytes.Contains(stream[:tapDecideBytes], names[0])
			}
			return kept, started, errData
		}
		line := stream[:i]
		stream = stream[i+1:]
		head := line[:min(len(line), tapDecideBytes)]
		named, quoted := false, false
		for _, n := range names {
			named = named || bytes.Contains(head, n)
			quoted = quoted || bytes.Contains(head, []byte(`"`+string(n)+`"`))
		}
		started = started || bytes.Contains(head, names[0])
		isData := bytes.HasPrefix(head, []byte("data:"))
		switch {
		case isData && errEvent && len(line) <= tapMaxLine:
			errData = bytes.TrimRight(line, "\r")
		case isData && (usageEvent || quoted) && len(line) <= tapMaxLine:
			kept = append(kept, bytes.TrimRight(line, "\r"))
		}
		if name, ok := bytes.CutPrefix(head, []byte("event:")); ok {
			usageEvent = named
			name, _ = bytes.CutPrefix(name, []byte(" "))
			errEvent = string(bytes.TrimRight(name, "\r")) == "error"
		} else if isData {
			usageEvent, errEvent = false, false
		}
	}
}

// chunkReader returns its data size bytes at a time, as a network does.
type chunkReader struct {
	data []byte
	size int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.size)], c.data)
	c.data = c.data[n:]
	return n, nil
}

type noTimer struct{}

func (noTimer) Reset(time.Duration) bool { return true }
func (noTimer) Stop() bool               { return true }

// FuzzRelayStreamPassthrough: the relay passes an upstream event stream to
// the client byte for byte, whatever its content and read sizes.
func FuzzRelayStreamPassthrough(f *testing.F) {
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), uint16(5))
	f.Add([]byte("data: \xff\xfe\n\n\r\n"), uint16(1))
	f.Add(bytes.Repeat([]byte("data: x\n"), 5000), uint16(40000))
	h := New(Options{})
	h.afterFunc = func(time.Duration, func()) timer { return noTimer{} }
	up := &snapshot.Upstream{ID: "up_1", CredentialKind: "api_key"}
	f.Fuzz(func(t *testing.T, stream []byte, size uint16) {
		hdr := http.Header{}
		hdr.Set("Content-Type", "text/event-stream")
		resp := &http.Response{StatusCode: 200, Header: hdr, Body: io.NopCloser(&chunkReader{data: stream, size: int(size)%(64<<10) + 1})}
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/messages", nil)
		a := h.newAttempt(context.Background(), time.Minute)
		defer a.done()
		h.relayResponse(w, r, resp, a, up, &store.RequestEvent{}, time.Now(), nil, nil)
		if !bytes.Equal(w.Body.Bytes(), stream) {
			t.Fatalf("client got %d bytes, upstream sent %d", w.Body.Len(), len(stream))
		}
	})
}

// FuzzScanString: the string scanner's fast path (no backslash before the
// first quote) ends every string where the escape-aware walk does.
func FuzzScanString(f *testing.F) {
	f.Add([]byte(`"abc" rest`))
	f.Add([]byte(`"a\"b\\" rest"`))
	f.Add([]byte(`"unterminated`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || b[0] != '"' {
			return
		}
		end, esc := scanString(b, 0)
		wantEnd, wantEsc := -1, false
		for j := 1; j < len(b); j++ {
			if b[j] == '\\' {
				wantEsc = true
				j++
				continue
			}
			if b[j] == '"' {
				wantEnd = j + 1
				break
			}
		}
		if end != wantEnd || esc != wantEsc {
			t.Fatalf("%q: got (%d, %v), want (%d, %v)", b, end, esc, wantEnd, wantEsc)
		}
	})
}
