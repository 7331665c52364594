package relay

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A stream waits with the small buffer, moves to the large one after a
// read that filled it, and back after a read that would have fit.
func TestStreamBufSizes(t *testing.T) {
	t.Parallel()
	var sb streamBuf
	buf := sb.first()
	defer sb.release()
	steps := []struct{ n, want int }{
		{100, sseIdleBuf},     // an event: still waiting small
		{sseIdleBuf, 4 << 10}, // filled: more is waiting
		{4 << 10, 4 << 10},    // still a burst
		{2000, 4 << 10},       // over the small size: stay large
		{300, sseIdleBuf},     // the burst is over
		{0, sseIdleBuf},
	}
	for i, s := range steps {
		buf = sb.next(s.n, len(buf))
		if len(buf) != s.want {
			t.Fatalf("step %d (read %d): next buffer %d bytes, want %d", i, s.n, len(buf), s.want)
		}
		if (sb.burst != nil) != (s.want > sseIdleBuf) {
			t.Fatalf("step %d: burst buffer held %v with a %d-byte buffer in use", i, sb.burst != nil, s.want)
		}
	}
}

// Events larger than the idle buffer and bursts of many events reach the
// client byte for byte, an event sent after a burst still reaches the client
// before the upstream sends the next, and usage is still read.
func TestRelayStreamsLargeEventsAndBursts(t *testing.T) {
	t.Parallel()
	ev := func(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }
	var burst strings.Builder
	for i := range 60 {
		burst.WriteString(ev("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"word %d "}}`, i)))
	}
	parts := []string{
		// message_start of 3 KB: three reads of the idle buffer's size.
		ev("message_start", `{"type":"message_start","message":{"id":"msg_1","model":"claude-test","content":[],"padding":"`+strings.Repeat("x", 3000)+`","usage":{"input_tokens":11,"output_tokens":1}}}`),
		burst.String(), // about 6 KB in one write
		ev("ping", `{"type":"ping"}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":61}}`) + ev("message_stop", `{"type":"message_stop"}`),
	}
	gate := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, p := range parts {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, p)
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	rec := &memRecorder{}
	srv := newTestHandler(fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), rec)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-test","max_tokens":5,"stream":true,"messages":[]}`))
	req.Header.Set("x-api-key", "sk-good")
	go func() { gate <- struct{}{} }() // the first part, so that headers come
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for i, p := range parts {
		if i > 0 {
			gate <- struct{}{} // the upstream sends this part only now
		}
		got := make([]byte, len(p))
		if _, err := io.ReadFull(rd, got); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if string(got) != p {
			t.Fatalf("part %d differs:\n got %.200q\nwant %.200q", i, got, p)
		}
	}
	if rest, _ := io.ReadAll(rd); len(rest) != 0 {
		t.Fatalf("%d bytes after message_stop", len(rest))
	}
	evs := rec.wait(t, 1)
	if len(evs) != 1 || evs[0].InputTokens != 11 || evs[0].OutputTokens != 61 {
		t.Fatalf("events %+v", evs)
	}
}

// A stream's response headers reach the client in the same write as its
// first event, as a stock reverse proxy sends them: one write, one wake-up
// of the client, instead of the headers alone and the event after them.
func TestStreamHeadersGoOutWithFirstEvent(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}))
	defer up.Close()
	srv := httptest.NewUnstartedServer(New(Options{Source: fakeSource{fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream"))}, Recorder: &memRecorder{}}))
	writes := make(chan string, 16)
	srv.Listener = writeLogListener{srv.Listener, writes}
	srv.Start()
	defer srv.Close()

	req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-test","max_tokens":5,"stream":true,"messages":[]}`))
	req.Header.Set("x-api-key", "sk-good")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := <-writes
	if !strings.HasPrefix(first, "HTTP/1.1 200") || !strings.Contains(first, "event: message_start") {
		t.Fatalf("first write to the client:\n%q\nwant the headers and the first event together", first)
	}
	close(release)
	if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), "message_stop") {
		t.Fatalf("stream %q ends without message_stop", b)
	}
}

// writeLogListener hands every write to its connections to a channel.
type writeLogListener struct {
	net.Listener
	writes chan<- string
}

func (l writeLogListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return writeLogConn{c, l.writes}, nil
}

type writeLogConn struct {
	net.Conn
	writes chan<- string
}

func (c writeLogConn) Write(p []byte) (int, error) {
	select {
	case c.writes <- string(p):
	default:
	}
	return c.Conn.Write(p)
}
