package relay

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/affinity"
	"github.com/pillarhq/pillar/impl/gateway/routing"
)

// writeLog is a listener whose connections keep every Write the server
// makes on them, in order: the syscalls a client's answer costs.
type writeLog struct {
	net.Listener
	mu     sync.Mutex
	writes [][]byte
}

func (l *writeLog) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &loggedConn{Conn: c, log: l}, nil
}

func (l *writeLog) taken() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]byte(nil), l.writes...)
}

type loggedConn struct {
	net.Conn
	log *writeLog
}

func (c *loggedConn) Write(p []byte) (int, error) {
	c.log.mu.Lock()
	c.log.writes = append(c.log.writes, bytes.Clone(p))
	c.log.mu.Unlock()
	return c.Conn.Write(p)
}

// splitTransport answers with the reads listed (eventBody): a provider's
// event can arrive in pieces.
type splitTransport struct{ reads func() [][]byte }

func (s splitTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	return &http.Response{StatusCode: 200, Header: h, Body: &eventBody{s.reads()}, ContentLength: -1, Request: r}, nil
}

// On a real connection the first event of a stream costs the server one
// write, on both paths: the status line, the headers and the first event
// (message_start, or the role chunk translated from it) leave in the same
// syscall, so the client wakes once for its first chunk. This holds also
// when the provider's message_start arrives in two reads: the Messages
// path passes each piece on as it comes (the relay adds nothing between
// them), and the Chat Completions path, which cannot translate half an
// event, sends nothing for the first piece rather than the headers alone.
func TestFirstChunkIsOneWriteOnTheConnection(t *testing.T) {
	whole := func() [][]byte { return benchEvents() }
	halved := func() [][]byte {
		ev := benchEvents()
		first := ev[0]
		return append([][]byte{first[:len(first)/2], first[len(first)/2:]}, ev[1:]...)
	}
	body := `{"model":"claude-test","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct {
		name, path, hdr, val, first, last string
		reads                             func() [][]byte
		writes                            int // before the first event is whole on the wire
	}{
		{"messages", "/v1/messages", "x-api-key", "sk-good", "event: message_start\ndata: ", "event: message_stop", whole, 1},
		{"chat", "/v1/chat/completions", "Authorization", "Bearer sk-good", `data: {"id":"chatcmpl-`, "data: [DONE]", whole, 1},
		// Half an event is relayed as it comes on the Messages path:
		// the second piece completes it.
		{"messages, split", "/v1/messages", "x-api-key", "sk-good", "event: message_start\ndata: ", "event: message_stop", halved, 2},
		{"chat, split", "/v1/chat/completions", "Authorization", "Bearer sk-good", `data: {"id":"chatcmpl-`, "data: [DONE]", halved, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := fixture(apiKeyUpstream("up_1", "http://upstream.invalid", "sk-upstream"))
			h := New(Options{
				Source:    fakeSource{s},
				Transport: splitTransport{c.reads},
				Recorder:  discardRecorder{},
				Board:     routing.NewBoard(nil),
				Affinity:  affinity.NewTable(),
				Admission: admission.New(admission.Options{}),
			})
			srv := httptest.NewUnstartedServer(h)
			log := &writeLog{Listener: srv.Listener}
			srv.Listener = log
			srv.Start()
			defer srv.Close()

			req, err := http.NewRequest("POST", srv.URL+c.path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(c.hdr, c.val)
			req.Header.Set("Content-Type", "application/json")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			all, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || !bytes.Contains(all, []byte(c.last)) {
				t.Fatalf("status %d, %v: %s", resp.StatusCode, err, all)
			}
			// The answer was read whole: every write the server made
			// for it is in the log. Replay them to find the write
			// that completed the first event.
			writes := log.taken()
			var sent []byte
			n := 0
			for _, w := range writes {
				sent = append(sent, w...)
				n++
				if firstEventDone(sent) {
					break
				}
			}
			if !firstEventDone(sent) {
				t.Fatalf("no complete first event in %d writes: %q", len(writes), sent)
			}
			if n != c.writes {
				t.Errorf("the first event took %d writes, want %d: %q", n, c.writes, writes[:n])
			}
			first := firstEvent(sent)
			if !strings.HasPrefix(first, c.first) {
				t.Errorf("first event %q, want it to start %q", first, c.first)
			}
		})
	}
}

// firstEventDone reports whether the bytes sent hold the response head
// and a whole first server-sent event of the chunked body.
func firstEventDone(sent []byte) bool { return firstEvent(sent) != "" }

// firstEvent decodes the chunked body after the response head and
// returns its first event, through the blank line ending it ("" while
// it is incomplete).
func firstEvent(sent []byte) string {
	head := bytes.Index(sent, []byte("\r\n\r\n"))
	if head < 0 {
		return ""
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(sent[:head+4])), nil)
	if err != nil {
		return ""
	}
	resp.Body.Close()
	// A chunked body: size line, data, CRLF, repeated.
	rest, body := sent[head+4:], []byte(nil)
	for {
		line, after, ok := bytes.Cut(rest, []byte("\r\n"))
		if !ok {
			break
		}
		var size int
		for _, c := range line {
			v := strings.IndexByte("0123456789abcdef", c|0x20)
			if v < 0 {
				return ""
			}
			size = size*16 + v
		}
		if size == 0 || len(after) < size {
			body = append(body, after[:min(size, len(after))]...)
			break
		}
		body = append(body, after[:size]...)
		rest = after[size:]
		rest = bytes.TrimPrefix(rest, []byte("\r\n"))
	}
	if i := bytes.Index(body, []byte("\n\n")); i >= 0 {
		return string(body[:i+2])
	}
	return ""
}
