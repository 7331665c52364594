package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// Run each for a bounded time, e.g.:
//
//	go test -run='^$' -fuzz='^FuzzScanRequest$' -fuzztime=10s ./impl/gateway/relay/
//	go test -run='^$' -fuzz='^FuzzSSETap$' -fuzztime=10s ./impl/gateway/relay/
//	go test -run='^$' -fuzz='^FuzzRelayStreamPassthrough$' -fuzztime=10s ./impl/gateway/relay/
//
// Plain `go test` runs the committed seed corpora in testdata/fuzz.

// FuzzScanRequest: whatever the body, the scanner reads the model and the
// stream flag that encoding/json reads, or refuses the body; and it refuses
// no body that a decoder reads without ambiguity. Besides the raw body it is
// given, each run builds one from keys the gateway reads (and others),
// spelt plainly, with some letters escaped or in another case, so duplicate
// and escaped keys are generated on every run rather than found by chance.
func FuzzScanRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","stream":true,"messages":[]}`), []byte{0x00, 0x01}, "claude-x", "true")
	f.Add([]byte(`{"a":"\\\"","model":"x"}`), []byte{0x00, 0x08}, "claude-x", "claude-y")
	f.Add([]byte(`{"model":"claude-sonnet-4-5","mod\u0065l":"claude-opus-4-1"}`), []byte{0x00, 0x28}, "claude-sonnet-4-5", "claude-opus-4-1")
	f.Add([]byte(`{"stream":false,"stre\u0061m":true,"model":"m"}`), []byte{0x01, 0x39, 0x00}, "false", "true")
	f.Add([]byte(`{"model":"a","MODEL":"b"}`), []byte{0x00, 0x06}, "a", "b")
	f.Add([]byte(`{"model":"claude-\ud83d\ude00"}`), []byte{0x10}, "claude-\U0001F600", "x")
	f.Fuzz(func(t *testing.T, raw, layout []byte, v1, v2 string) {
		checkScan(t, raw)
		checkScan(t, buildBody(layout, v1, v2))
	})
}

// fuzzKeys are the keys buildBody names: those the gateway reads, twice so
// they are drawn often, and others, one of them model in another case
// (encoding/json matches struct fields case-insensitively; JSON does not).
var fuzzKeys = [8]string{"model", "stream", "model", "stream", "max_tokens", "metadata", "MODEL", "system"}

// buildBody writes a top-level object with one key per layout byte (at
// most 8): bits 0-2 pick the key, bits 3-4 how it is spelt (plainly, one
// letter escaped, every letter escaped, one letter escaped in upper-case
// hex), bits 5-6 which letter, bit 7 whether the value is v1 or v2 as a
// JSON string or as raw JSON text (true, 1, {} or whatever it holds).
func buildBody(layout []byte, v1, v2 string) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for j, c := range layout[:min(len(layout), 8)] {
		if j > 0 {
			b.WriteByte(',')
		}
		key := fuzzKeys[c&7]
		b.WriteByte('"')
		at := int(c>>5&3) % len(key)
		for n := 0; n < len(key); n++ {
			switch mode := c >> 3 & 3; {
			case mode == 1 && n == at, mode == 2:
				fmt.Fprintf(&b, `\u%04x`, key[n])
			case mode == 3 && n == at:
				fmt.Fprintf(&b, `\u%04X`, key[n])
			default:
				b.WriteByte(key[n])
			}
		}
		b.WriteString(`":`)
		v := v1
		if j%2 == 1 {
			v = v2
		}
		if c&0x80 == 0 {
			q, _ := json.Marshal(v)
			b.Write(q)
		} else {
			b.WriteString(v)
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// checkScan holds scanRequest to what encoding/json reads of b.
func checkScan(t *testing.T, b []byte) {
	model, stream, err := scanRequest(b)
	if err == nil && !validModelID(model) {
		err = errModelText // the relay refuses it right after the scan
	}
	keys, top, ok := decodeTop(b)
	if !ok {
		return // a decoder refuses the body: so does the upstream
	}
	dup := false
	seen := map[string]bool{}
	for _, k := range keys {
		dup = dup || seen[k]
		seen[k] = true
	}
	rawModel, hasModel := top["model"]
	var wantModel string
	modelOK := !hasModel || (len(rawModel) > 0 && rawModel[0] == '"' && json.Unmarshal(rawModel, &wantModel) == nil)
	rawStream, hasStream := top["stream"]
	streamOK := !hasStream || slices.Contains([]string{"true", "false", "null"}, string(rawStream))
	if err != nil {
		// Refusing is right for an ambiguous body or a field of the wrong
		// type; a body a decoder reads plainly must pass.
		if !dup && modelOK && streamOK && utf8.Valid(b) && !loneSurrogate(b) && validModelID(wantModel) {
			t.Fatalf("refused %q (%v), which a decoder reads without ambiguity", b, err)
		}
		return
	}
	switch {
	case dup:
		t.Fatalf("accepted %q, which names a key twice (%q)", b, keys)
	case !modelOK:
		t.Fatalf("accepted %q, whose model %s is not a string", b, rawModel)
	case !streamOK:
		t.Fatalf("accepted %q, whose stream %s is not a boolean", b, rawStream)
	case model != wantModel:
		t.Fatalf("scanner model %q, encoding/json %q for %q", model, wantModel, b)
	case stream != (string(rawStream) == "true"):
		t.Fatalf("scanner stream %v, encoding/json %s for %q", stream, rawStream, b)
	}
}

// decodeTop is the top-level object of b as encoding/json reads it: every
// key in order (decoded, duplicates kept) and each key's last value; false
// when encoding/json refuses b or it is no object.
func decodeTop(b []byte) (keys []string, top map[string]json.RawMessage, ok bool) {
	if !json.Valid(b) {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, false
	}
	top = map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		k := tok.(string)
		var v json.RawMessage
		if dec.Decode(&v) != nil {
			return nil, nil, false
		}
		keys = append(keys, k)
		top[k] = v
	}
	return keys, top, true
}

// loneSurrogate reports whether b escapes a UTF-16 surrogate anywhere
// (paired or not: a coarse filter, for which a refusal is allowed).
func loneSurrogate(b []byte) bool {
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '\\' && b[i+1] == 'u' && (b[i+2] == 'd' || b[i+2] == 'D') {
			return true
		}
	}
	return false
}

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

// FuzzRelayStreamPassthrough: the relay passes an upstream event stream to
// the client byte for byte, whatever its content and read sizes.
func FuzzRelayStreamPassthrough(f *testing.F) {
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), uint16(5))
	f.Add([]byte("data: \xff\xfe\n\n\r\n"), uint16(1))
	f.Add(bytes.Repeat([]byte("data: x\n"), 5000), uint16(40000))
	// On a clock nobody advances, the attempts' deadlines never fire.
	h := New(Options{Clock: fakeclock.New(time.Time{})})
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
