package provider

import (
	"net/http"
	"time"
)

// Recorded is one request as the provider saw it.
type Recorded struct {
	Seq      int64       `json:"seq"`
	At       time.Time   `json:"at"`
	Method   string      `json:"method"`
	Path     string      `json:"path"`
	RawQuery string      `json:"raw_query"`
	Header   http.Header `json:"header"`
	Body     string      `json:"body"`
}

// requestLog keeps the newest requests, bounded both in count and in body
// bytes. It is a queue over a slice: new entries are appended, old ones
// dropped from the front, and the slice is compacted once half of it is dead,
// so each request costs amortised O(1).
type requestLog struct {
	max, maxBytes int
	items         []loggedRequest
	head          int
	bytes         int
}

// loggedRequest holds the body as read, so recording does not copy it.
type loggedRequest struct {
	Recorded
	body []byte
}

func (l *requestLog) add(e loggedRequest) {
	if l.max < 0 {
		return
	}
	l.items = append(l.items, e)
	l.bytes += cap(e.body) // capacity: what the log actually keeps alive
	for l.len() > l.max || (l.bytes > l.maxBytes && l.len() > 1) {
		l.bytes -= cap(l.items[l.head].body)
		l.items[l.head] = loggedRequest{}
		l.head++
	}
	if l.head > 64 && l.head*2 >= len(l.items) {
		n := copy(l.items, l.items[l.head:])
		clear(l.items[n:])
		l.items, l.head = l.items[:n], 0
	}
}

func (l *requestLog) len() int { return len(l.items) - l.head }

func (l *requestLog) list() []Recorded {
	out := make([]Recorded, 0, l.len())
	for _, e := range l.items[l.head:] {
		r := e.Recorded
		r.Body = string(e.body)
		out = append(out, r)
	}
	return out
}

func (l *requestLog) clear() {
	l.items, l.head, l.bytes = nil, 0, 0
}

func (p *Provider) record(seq int64, r *http.Request, body []byte) {
	if p.opts.MaxRecorded < 0 {
		return
	}
	e := loggedRequest{Recorded: Recorded{Seq: seq, Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Header: r.Header.Clone()}, body: body}
	p.mu.Lock()
	e.At = p.clock.now()
	p.log.add(e)
	p.mu.Unlock()
}

// Requests returns the recorded requests, oldest first.
func (p *Provider) Requests() []Recorded {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.list()
}

// ClearRequests empties the request log.
func (p *Provider) ClearRequests() {
	p.mu.Lock()
	p.log.clear()
	p.mu.Unlock()
}
