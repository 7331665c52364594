package provider

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// stream writes server-sent events one at a time, flushing each, and plays
// the stream-level part of a fault (delays, drops, mid-stream errors).
type stream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	ctx   context.Context
	f     Fault
	delay func(context.Context, time.Duration) error
	// sent counts the events written so far.
	sent int
	// frame and scratch are reused across events to keep a long stream
	// from allocating per event.
	frame, scratch []byte
}

func newStream(w http.ResponseWriter, r *http.Request, f *Fault, delay func(context.Context, time.Duration) error) *stream {
	s := &stream{w: w, rc: http.NewResponseController(w), ctx: r.Context(), delay: delay}
	if f != nil {
		s.f = *f
	}
	return s
}

// open sends the 200 headers at once, as the API does before generating.
func (s *stream) open() bool {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
	s.rc.Flush()
	return s.f.MessageStartDelayMS == 0 || s.delay(s.ctx, ms(s.f.MessageStartDelayMS)) == nil
}

// event sends one event; false means the stream is over (fault or client gone).
func (s *stream) event(name string, data []byte) bool {
	if s.f.DropAfterEvents > 0 && s.sent == s.f.DropAfterEvents {
		dropConnection(s.w)
		return false
	}
	if s.f.ErrorAfterEvents > 0 && s.sent == s.f.ErrorAfterEvents {
		typ := s.f.ErrorType
		if typ == "" {
			typ = "overloaded_error"
		}
		b, _ := json.Marshal(errorBody{Type: "error", Error: errorDetail{Type: typ, Message: "injected fault: " + typ}})
		s.write("error", b)
		return false
	}
	if s.sent == 1 && s.f.FirstEventDelayMS > 0 && s.delay(s.ctx, ms(s.f.FirstEventDelayMS)) != nil {
		return false
	}
	if !s.write(name, data) {
		return false
	}
	s.sent++
	return true
}

func (s *stream) write(name string, data []byte) bool {
	b := append(s.frame[:0], "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	s.frame = append(b, "\n\n"...)
	if _, err := s.w.Write(s.frame); err != nil {
		return false
	}
	// A writer that cannot flush still delivers the events, only batched.
	err := s.rc.Flush()
	return err == nil || errors.Is(err, http.ErrNotSupported)
}
