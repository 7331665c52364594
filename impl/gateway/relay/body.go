package relay

import (
	"errors"
	"io"
	"net/http"
	"time"
)

// MaxBodyBytes bounds a request body; Anthropic's own limit is 32 MB.
const MaxBodyBytes = 32 << 20

var (
	errTooLarge   = errors.New("request body too large")
	errOverloaded = errors.New("request body memory cap reached")
)

// readBody reads the request body within the body read deadline, reserving
// the bytes it holds against the global cap before it allocates them (known
// Content-Length: all at once, before reading anything). held is what it
// reserved: the caller gives it back when the request is done.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (b []byte, held int64, err error) {
	if r.ContentLength > MaxBodyBytes {
		return nil, 0, errTooLarge
	}
	size := int64(4096)
	if r.ContentLength > 0 {
		size = r.ContentLength + 1
	}
	if !h.held.take(size) {
		return nil, 0, errOverloaded
	}
	held = size
	if d, ok := w.(readDeadliner); ok {
		// The server bounds only header reads; a client that trickles or
		// stalls its body is cut off here. Cleared at once after, so the
		// deadline never reaches the response.
		// Both always succeed on net/http's HTTP/1 and HTTP/2 writers,
		// the only ones that implement the interface.
		// A network deadline: the poller reads the wall clock, never ours.
		_ = d.SetReadDeadline(time.Now().Add(h.bodyReadTimeout))
		defer func() { _ = d.SetReadDeadline(time.Time{}) }()
	}
	b = make([]byte, 0, size)
	lr := io.LimitReader(r.Body, MaxBodyBytes+1)
	for {
		if len(b) == cap(b) {
			old := cap(b)
			b = append(b, 0)[:len(b)]
			if !h.held.take(int64(cap(b) - old)) {
				h.held.give(held)
				return nil, 0, errOverloaded
			}
			held += int64(cap(b) - old)
		}
		n, rerr := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			h.held.give(held)
			return nil, 0, rerr
		}
	}
	if len(b) > MaxBodyBytes {
		h.held.give(held)
		return nil, 0, errTooLarge
	}
	return b, held, nil
}
