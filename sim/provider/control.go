package provider

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Fault is an injected misbehaviour. It matches requests by path (empty
// matches all) and applies to the next Count of them (0: until removed).
type Fault struct {
	Path  string `json:"path,omitempty"`
	Count int    `json:"count,omitempty"`
	// LatencyMS delays the response before anything is sent.
	LatencyMS int `json:"latency_ms,omitempty"`
	// FirstEventDelayMS delays a stream after its first event.
	FirstEventDelayMS int `json:"first_event_delay_ms,omitempty"`
	// Status answers with this error status and Anthropic's error body.
	Status     int    `json:"status,omitempty"`
	ErrorType  string `json:"error_type,omitempty"`
	RetryAfter int    `json:"retry_after,omitempty"`
	// DropBeforeHeaders closes the connection without any response.
	DropBeforeHeaders bool `json:"drop_before_headers,omitempty"`
	// DropAfterEvents closes a stream after this many events.
	DropAfterEvents int `json:"drop_after_events,omitempty"`
}

var defaultErrorType = map[int]string{
	400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error",
	413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 529: "overloaded_error", 503: "api_error",
}

// apply performs the pre-response part of the fault; true means the
// response is finished.
func (f *Fault) apply(w http.ResponseWriter, r *http.Request) bool {
	if f.LatencyMS > 0 {
		select {
		case <-time.After(time.Duration(f.LatencyMS) * time.Millisecond):
		case <-r.Context().Done():
			return true
		}
	}
	if f.DropBeforeHeaders {
		hijackClose(w)
		return true
	}
	if f.Status > 0 {
		typ := f.ErrorType
		if typ == "" {
			typ = defaultErrorType[f.Status]
		}
		if typ == "" {
			typ = "api_error"
		}
		if f.RetryAfter > 0 {
			w.Header().Set("retry-after", strconv.Itoa(f.RetryAfter))
		}
		if f.Status == 529 || f.Status == 429 || f.Status >= 500 {
			w.Header().Set("x-should-retry", "true")
		}
		apiError(w, f.Status, typ, "injected fault: "+typ)
		return true
	}
	return false
}

// parseFaultHeader reads x-sim-fault: "status=529;latency_ms=100;drop_after_events=3".
func parseFaultHeader(v string) *Fault {
	if v == "" {
		return nil
	}
	f := &Fault{}
	for _, part := range strings.Split(v, ";") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		n, _ := strconv.Atoi(val)
		switch k {
		case "status":
			f.Status = n
		case "error_type":
			f.ErrorType = val
		case "retry_after":
			f.RetryAfter = n
		case "latency_ms":
			f.LatencyMS = n
		case "first_event_delay_ms":
			f.FirstEventDelayMS = n
		case "drop_before_headers":
			f.DropBeforeHeaders = val != "false"
		case "drop_after_events":
			f.DropAfterEvents = n
		}
	}
	return f
}

// takeFault picks the fault for a request: the request's own header first,
// then the first matching queued fault (consuming one use).
func (p *Provider) takeFault(r *http.Request) *Fault {
	if f := parseFaultHeader(r.Header.Get("X-Sim-Fault")); f != nil {
		return f
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, f := range p.faults {
		if f.Path != "" && f.Path != r.URL.Path {
			continue
		}
		if f.Count > 0 {
			f.Count--
			if f.Count == 0 {
				p.faults = append(p.faults[:i], p.faults[i+1:]...)
			}
		}
		c := *f
		return &c
	}
	return nil
}

// AddFault queues a fault.
func (p *Provider) AddFault(f Fault) {
	p.mu.Lock()
	p.faults = append(p.faults, &f)
	p.mu.Unlock()
}

// SetNow fixes the clock at t.
func (p *Provider) SetNow(t time.Time) {
	p.mu.Lock()
	p.fixed = &t
	p.mu.Unlock()
}

// Advance moves the clock forward.
func (p *Provider) Advance(d time.Duration) {
	p.mu.Lock()
	if p.fixed != nil {
		t := p.fixed.Add(d)
		p.fixed = &t
	} else {
		p.clockOff += d
	}
	p.mu.Unlock()
}

// Reset clears recorded requests, faults and clock changes.
func (p *Provider) Reset() {
	p.mu.Lock()
	p.recorded, p.faults, p.fixed, p.clockOff = nil, nil, nil, 0
	p.mu.Unlock()
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func (p *Provider) control(w http.ResponseWriter, r *http.Request) {
	switch r.Method + " " + r.URL.Path {
	case "GET /_sim/requests":
		writeJSON(w, p.Requests())
	case "DELETE /_sim/requests":
		p.mu.Lock()
		p.recorded = nil
		p.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case "GET /_sim/clock":
		now := p.Now()
		writeJSON(w, map[string]any{"now_unix": now.Unix(), "now": now.UTC().Format(time.RFC3339Nano)})
	case "POST /_sim/clock":
		var b struct {
			NowUnix     *int64   `json:"now_unix"`
			AdvanceSecs *float64 `json:"advance_secs"`
		}
		if json.NewDecoder(r.Body).Decode(&b) != nil || (b.NowUnix == nil) == (b.AdvanceSecs == nil) {
			http.Error(w, `give exactly one of {"now_unix":N} or {"advance_secs":N}`, http.StatusBadRequest)
			return
		}
		if b.NowUnix != nil {
			p.SetNow(time.Unix(*b.NowUnix, 0))
		} else {
			p.Advance(time.Duration(*b.AdvanceSecs * float64(time.Second)))
		}
		now := p.Now()
		writeJSON(w, map[string]any{"now_unix": now.Unix(), "now": now.UTC().Format(time.RFC3339Nano)})
	case "POST /_sim/faults":
		var f Fault
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			http.Error(w, "bad fault: "+err.Error(), http.StatusBadRequest)
			return
		}
		p.AddFault(f)
		w.WriteHeader(http.StatusNoContent)
	case "GET /_sim/faults":
		p.mu.Lock()
		fs := make([]Fault, 0, len(p.faults))
		for _, f := range p.faults {
			fs = append(fs, *f)
		}
		p.mu.Unlock()
		writeJSON(w, fs)
	case "DELETE /_sim/faults":
		p.mu.Lock()
		p.faults = nil
		p.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case "POST /_sim/catalog":
		var b struct {
			Version int `json:"version"`
		}
		if json.NewDecoder(r.Body).Decode(&b) != nil || b.Version < 1 {
			http.Error(w, `want {"version":N} with N >= 1`, http.StatusBadRequest)
			return
		}
		p.SetCatalogVersion(b.Version)
		w.WriteHeader(http.StatusNoContent)
	case "POST /_sim/reset":
		p.Reset()
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "unknown control endpoint", http.StatusNotFound)
	}
}
