// Package bench measures what the gateway adds to a request compared with a
// bare reverse proxy in front of the same provider: a load generator, the
// baseline proxies, and the report written to docs/benchmarks.md.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Request bodies: small, like a short interactive turn, so the figures show
// per-request overhead rather than copy bandwidth. Both are also valid Chat
// Completions bodies, so the two dialects send the same bytes.
const (
	MessageBody = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"measure the added latency of the gateway please"}]}`
	StreamBody  = `{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"measure the added latency of the gateway please"}]}`
)

// Target is one path to the provider: the gateway or a baseline proxy.
type Target struct {
	Name    string // short label used in tables
	BaseURL string // e.g. http://127.0.0.1:8080
	Key     string // sent as x-api-key
	// OpenAI sends the requests in OpenAI's dialect: Chat Completions,
	// the key as a bearer token.
	OpenAI bool
	// Body, when set, is sent in place of MessageBody or StreamBody.
	Body string
}

// request builds the measured request of t.
func (t Target) request(ctx context.Context, stream bool) (*http.Request, error) {
	path, body := "/v1/messages", MessageBody
	if t.OpenAI {
		path = "/v1/chat/completions"
	}
	if stream {
		body = StreamBody
	}
	if t.Body != "" {
		body = t.Body
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.BaseURL+path, bytes.NewReader([]byte(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if t.OpenAI {
		req.Header.Set("Authorization", "Bearer "+t.Key)
	} else {
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("X-Api-Key", t.Key)
	}
	return req, nil
}

// complete tells a complete answer of one dialect: a non-streaming body
// holds body; a stream ends with an event whose line starts with last.
type complete struct {
	body, last []byte
	name       string // of the last event, for errors
}

var (
	messageMark = complete{[]byte(`"type":"message"`), []byte("event: message_stop"), "message_stop"}
	chatMark    = complete{[]byte(`"object":"chat.completion"`), []byte("data: [DONE]"), "[DONE]"}
)

// Client sends measured requests. Its zero value is not usable; use NewClient.
type Client struct {
	http *http.Client
	now  func() time.Time
}

// NewClient returns a keep-alive client with room for idle connections to
// every target at full concurrency, so no measured request pays a dial.
// now is the clock used for every measurement (time.Now when nil).
func NewClient(now func() time.Time) *Client {
	if now == nil {
		now = time.Now
	}
	return &Client{
		http: &http.Client{Transport: &http.Transport{
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}},
		now: now,
	}
}

// Close drops the idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Once sends one request and returns its latency: to the last byte of the
// body, or, when stream is set, to the end of the first server-sent event
// (the moment an SSE client could act on it). The rest of a stream is still
// read and checked, so every measured request is a complete, successful one.
func (c *Client) Once(ctx context.Context, t Target, stream bool) (time.Duration, error) {
	req, err := t.request(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", t.Name, err)
	}
	mark := messageMark
	if t.OpenAI {
		mark = chatMark
	}

	start := c.now()
	res, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", t.Name, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
		return 0, fmt.Errorf("%s: status %d: %s", t.Name, res.StatusCode, bytes.TrimSpace(msg))
	}
	if !stream {
		b, err := io.ReadAll(res.Body)
		d := c.now().Sub(start)
		if err != nil {
			return 0, fmt.Errorf("%s: read body: %w", t.Name, err)
		}
		if !bytes.Contains(b, mark.body) {
			return 0, fmt.Errorf("%s: not a message: %.200s", t.Name, b)
		}
		return d, nil
	}

	var d time.Duration
	sr, err := ReadSSE(res.Body, mark.last, func() { d = c.now().Sub(start) })
	if err != nil {
		return 0, fmt.Errorf("%s: read stream: %w", t.Name, err)
	}
	if sr.Events == 0 {
		return 0, fmt.Errorf("%s: stream ended before its first event", t.Name)
	}
	if !sr.Stopped {
		return 0, fmt.Errorf("%s: stream ended without %s", t.Name, mark.name)
	}
	return d, nil
}

// Series sends perTarget sequential requests (one client, c=1) to each
// target in blocks of block requests. The order of the targets reverses
// every round (A B C, C B A, A B C, …) so that a slow drift in machine load
// falls on every target alike. The result holds one sample slice per target,
// in the order of targets.
func (c *Client) Series(ctx context.Context, targets []Target, stream bool, perTarget, block int) ([][]time.Duration, error) {
	if block <= 0 {
		block = perTarget
	}
	out := make([][]time.Duration, len(targets))
	for i := range out {
		out[i] = make([]time.Duration, 0, perTarget)
	}
	for round := 0; len(out[0]) < perTarget; round++ {
		n := min(block, perTarget-len(out[0]))
		for j := range targets {
			i := j
			if round%2 == 1 {
				i = len(targets) - 1 - j
			}
			for k := 0; k < n; k++ {
				d, err := c.Once(ctx, targets[i], stream)
				if err != nil {
					return nil, err
				}
				out[i] = append(out[i], d)
			}
		}
	}
	return out, nil
}

// Throughput sends total non-streaming requests to t from clients concurrent
// workers, each starting its next request as soon as the previous one is
// read, and returns completed requests per second. A request count rather
// than a duration bounds the run, so every run does the same work.
func (c *Client) Throughput(ctx context.Context, t Target, clients, total int) (float64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	start := c.now()
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(total) {
				if _, err := c.Once(ctx, t, false); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := c.now().Sub(start)
	if firstErr != nil {
		return 0, firstErr
	}
	if elapsed <= 0 {
		return 0, fmt.Errorf("%s: no time elapsed for %d requests", t.Name, total)
	}
	return float64(total) / elapsed.Seconds(), nil
}
