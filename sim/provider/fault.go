package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Fault is an injected misbehaviour. Queued faults match requests by path
// (empty matches all) and apply to the next Count of them (0: until
// cleared); a request can also carry its own in the x-sim-fault header.
// Times are wall-clock milliseconds: they exist to exercise the caller's
// timeouts, so they do not follow the sim's clock.
type Fault struct {
	Path  string `json:"path,omitempty"`
	Count int    `json:"count,omitempty"`
	// LatencyMS delays the response before anything is sent.
	LatencyMS int `json:"latency_ms,omitempty"`
	// MessageStartDelayMS delays a stream after its 200 headers are flushed
	// and before its first event (message_start).
	MessageStartDelayMS int `json:"message_start_delay_ms,omitempty"`
	// FirstEventDelayMS delays a stream after its first event
	// (message_start) and before the rest: the time to first token.
	FirstEventDelayMS int `json:"first_event_delay_ms,omitempty"`
	// Status answers with this error status and Anthropic's error body of
	// ErrorType (by default the type the API uses for that status).
	Status     int    `json:"status,omitempty"`
	ErrorType  string `json:"error_type,omitempty"`
	RetryAfter int    `json:"retry_after,omitempty"`
	// DropBeforeHeaders closes the connection without any response.
	DropBeforeHeaders bool `json:"drop_before_headers,omitempty"`
	// LostResponse serves the request in full (its effects apply), then
	// closes the connection without the answer.
	LostResponse bool `json:"lost_response,omitempty"`
	// DropAfterEvents closes a stream's connection after this many events.
	DropAfterEvents int `json:"drop_after_events,omitempty"`
	// ErrorAfterEvents ends a stream after this many events with an SSE
	// error event of ErrorType (default overloaded_error), as the API does
	// when it fails mid-stream.
	ErrorAfterEvents int `json:"error_after_events,omitempty"`
	// RedirectTo answers 307 Temporary Redirect to this absolute URL with
	// the request's path and query appended: a provider (or a host posing
	// as one) sending its client elsewhere.
	RedirectTo string `json:"redirect_to,omitempty"`
}

// errorTypeOf is the error type the API uses for each status.
var errorTypeOf = map[int]string{
	400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
	413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 503: "api_error", 504: "api_error",
	529: "overloaded_error",
}

// validate reports every problem at once.
func (f *Fault) validate() error {
	var errs []error
	for _, v := range []struct {
		name string
		n    int
	}{
		{"count", f.Count}, {"latency_ms", f.LatencyMS}, {"message_start_delay_ms", f.MessageStartDelayMS},
		{"first_event_delay_ms", f.FirstEventDelayMS}, {"retry_after", f.RetryAfter},
		{"drop_after_events", f.DropAfterEvents}, {"error_after_events", f.ErrorAfterEvents},
	} {
		if v.n < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative", v.name))
		}
	}
	if f.Status != 0 && (f.Status < 400 || f.Status > 599) {
		errs = append(errs, fmt.Errorf("status: %d is not an error status (400-599)", f.Status))
	}
	if u, err := url.Parse(f.RedirectTo); f.RedirectTo != "" && (err != nil || !u.IsAbs() || u.Host == "") {
		errs = append(errs, fmt.Errorf("redirect_to: %q is not an absolute URL", f.RedirectTo))
	}
	if f.Path != "" && !strings.HasPrefix(f.Path, "/") {
		errs = append(errs, fmt.Errorf("path: %q must start with /", f.Path))
	}
	return errors.Join(errs...)
}

// ParseFault reads the x-sim-fault header: key=value pairs separated by
// ';', with the keys of Fault's JSON form except path and count (the header
// already targets one request). A boolean key alone means true.
func ParseFault(v string) (*Fault, error) {
	f := &Fault{}
	ints := map[string]*int{
		"latency_ms": &f.LatencyMS, "message_start_delay_ms": &f.MessageStartDelayMS,
		"first_event_delay_ms": &f.FirstEventDelayMS, "status": &f.Status, "retry_after": &f.RetryAfter,
		"drop_after_events": &f.DropAfterEvents, "error_after_events": &f.ErrorAfterEvents,
	}
	var errs []error
	for part := range strings.SplitSeq(v, ";") {
		k, val, hasVal := strings.Cut(part, "=")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		var err error
		switch {
		case k == "" && !hasVal:
			continue // tolerate empty pairs, e.g. a trailing ';'
		case k == "drop_before_headers":
			f.DropBeforeHeaders = true
			if hasVal {
				f.DropBeforeHeaders, err = strconv.ParseBool(val)
			}
		case k == "redirect_to":
			f.RedirectTo = val
		case k == "error_type":
			f.ErrorType = val
			if val == "" {
				err = errors.New("empty value")
			}
		case ints[k] != nil:
			*ints[k], err = strconv.Atoi(val)
		default:
			err = errors.New("unknown key")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", strings.TrimSpace(part), err))
		}
	}
	if err := errors.Join(append(errs, f.validate())...); err != nil {
		return nil, fmt.Errorf("x-sim-fault: %w", err)
	}
	return f, nil
}

// AddFault queues faults behind those already queued, all of them or,
// when one is invalid, none.
func (p *Provider) AddFault(fs ...Fault) error {
	var errs []error
	for i := range fs {
		if err := fs[i].validate(); err != nil {
			errs = append(errs, fmt.Errorf("fault %d: %w", i, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	p.mu.Lock()
	for _, f := range fs {
		p.faults = append(p.faults, &f)
	}
	p.queued.Store(int32(len(p.faults)))
	p.mu.Unlock()
	return nil
}

// Faults lists the queued faults with the uses they have left.
func (p *Provider) Faults() []Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Fault, 0, len(p.faults))
	for _, f := range p.faults {
		out = append(out, *f)
	}
	return out
}

// ClearFaults removes every queued fault.
func (p *Provider) ClearFaults() {
	p.mu.Lock()
	p.faults = nil
	p.queued.Store(0)
	p.mu.Unlock()
}

// takeFault picks the fault for a request: the request's own header when
// present (queued faults are then left alone), else the first matching
// queued fault, consuming one of its uses.
func (p *Provider) takeFault(r *http.Request) (*Fault, error) {
	if v := r.Header.Get("X-Sim-Fault"); v != "" {
		return ParseFault(v)
	}
	if p.queued.Load() == 0 {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.faults {
		if f.Path != "" && f.Path != r.URL.Path {
			continue
		}
		c := *f
		if f.Count > 0 {
			f.Count--
			if f.Count == 0 {
				p.faults = slices.Delete(p.faults, i, i+1)
				p.queued.Store(int32(len(p.faults)))
			}
		}
		return &c, nil
	}
	return nil, nil
}

// beforeResponse performs the part of the fault that comes before any
// response; true means the request is finished.
func (f *Fault) beforeResponse(w http.ResponseWriter, r *http.Request, delay func(context.Context, time.Duration) error) bool {
	if f.LatencyMS > 0 && delay(r.Context(), ms(f.LatencyMS)) != nil {
		return true
	}
	if f.DropBeforeHeaders {
		dropConnection(w)
		return true
	}
	if f.RedirectTo != "" {
		http.Redirect(w, r, strings.TrimRight(f.RedirectTo, "/")+r.URL.RequestURI(), http.StatusTemporaryRedirect)
		return true
	}
	if f.Status == 0 {
		return false
	}
	typ := f.ErrorType
	if typ == "" {
		typ = errorTypeOf[f.Status]
	}
	if typ == "" {
		typ = "api_error"
	}
	if f.RetryAfter > 0 {
		w.Header().Set("retry-after", strconv.Itoa(f.RetryAfter))
	}
	// The API marks the errors worth retrying; the official SDKs honour it.
	if f.Status == 408 || f.Status == 409 || f.Status == 429 || f.Status >= 500 {
		w.Header().Set("x-should-retry", "true")
	} else {
		w.Header().Set("x-should-retry", "false")
	}
	apiError(w, f.Status, typ, "injected fault: "+typ)
	return true
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// dropConnection closes the connection without finishing the response, so
// the client sees a transport error (a truncated body when headers went out).
func dropConnection(w http.ResponseWriter) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): aborting the handler resets the stream.
		panic(http.ErrAbortHandler)
	}
	c.Close()
}
