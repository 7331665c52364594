// Package proxyerr is the proxy path's error: one value, built by a
// constructor per Anthropic error type, that knows its HTTP status, its
// Anthropic type and message, the stable code recorded with the request
// event and what the SDKs are told about retrying. It is written in
// Anthropic's shape by Write, as a JSON answer or, once a stream has
// started, as the stream's error event; other dialects (OpenAI's) and
// upstream kinds translate to and from it.
package proxyerr

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// The Anthropic error types.
const (
	TypeInvalidRequest  = "invalid_request_error"
	TypeAuthentication  = "authentication_error"
	TypeBilling         = "billing_error"
	TypePermission      = "permission_error"
	TypeNotFound        = "not_found_error"
	TypeRequestTooLarge = "request_too_large"
	TypeRateLimit       = "rate_limit_error"
	TypeAPI             = "api_error"
	TypeTimeout         = "timeout_error"
	TypeOverloaded      = "overloaded_error"
)

// StatusOverloaded is Anthropic's status for overloaded_error.
const StatusOverloaded = 529

// MaxClientRetryWait is the longest Retry-After the official SDKs wait out
// before retrying; longer ones they replace with their own backoff, which
// would retry early into the same refusal.
const MaxClientRetryWait = 60 * time.Second

// Error is one refusal or failure of the proxy path.
type Error struct {
	Status  int
	Type    string // Anthropic's error type
	Message string
	// Code is the stable code recorded as the request event's error type;
	// empty means Type.
	Code string

	retryAfter time.Duration // sent as Retry-After when hasRetryAfter
	hasRetry   bool
	// retry: 0 decides x-should-retry by status, 1 true, -1 false.
	retry int8
	allow string // the Allow header of a 405
}

func (e *Error) Error() string { return e.Type + ": " + e.Message }

// New is an error of any status and type, for refusals whose type someone
// else chose (a router plugin's, an upstream's).
func New(status int, typ, msg string) *Error {
	return &Error{Status: status, Type: typ, Message: msg}
}

// InvalidRequest is a 400 invalid_request_error.
func InvalidRequest(msg string) *Error {
	return New(http.StatusBadRequest, TypeInvalidRequest, msg)
}

// MethodNotAllowed is the 405 for a method other than allow.
func MethodNotAllowed(method, allow string) *Error {
	e := New(http.StatusMethodNotAllowed, TypeInvalidRequest, "method "+method+" is not allowed; use "+allow)
	e.allow = allow
	return e
}

// Authentication is a 401 authentication_error.
func Authentication(msg string) *Error {
	return New(http.StatusUnauthorized, TypeAuthentication, msg)
}

// Billing is a 402 billing_error.
func Billing(msg string) *Error { return New(http.StatusPaymentRequired, TypeBilling, msg) }

// Permission is a 403 permission_error.
func Permission(msg string) *Error { return New(http.StatusForbidden, TypePermission, msg) }

// NotFound is a 404 not_found_error.
func NotFound(msg string) *Error { return New(http.StatusNotFound, TypeNotFound, msg) }

// TooLarge is a 413 request_too_large.
func TooLarge(msg string) *Error {
	return New(http.StatusRequestEntityTooLarge, TypeRequestTooLarge, msg)
}

// RateLimited is a 429 rate_limit_error the client may retry after wait:
// the SDKs are told to retry only when they would wait that long.
func RateLimited(msg string, wait time.Duration) *Error {
	e := New(http.StatusTooManyRequests, TypeRateLimit, msg)
	e.retryAfter, e.hasRetry = wait, true
	return e.WithRetry(wait <= MaxClientRetryWait)
}

// API is an api_error: the proxy's or an upstream's failure, answered with
// status (502 when no upstream answered, 503 when none could be asked).
func API(status int, msg string) *Error { return New(status, TypeAPI, msg) }

// Timeout is a 504 timeout_error.
func Timeout(msg string) *Error { return New(http.StatusGatewayTimeout, TypeTimeout, msg) }

// Overloaded is a 529 overloaded_error, which the SDKs retry with backoff.
func Overloaded(msg string) *Error { return New(StatusOverloaded, TypeOverloaded, msg) }

// WithCode sets the code recorded with the request event.
func (e *Error) WithCode(code string) *Error {
	e.Code = code
	return e
}

// WithRetry overrides what x-should-retry tells the SDKs.
func (e *Error) WithRetry(retry bool) *Error {
	e.retry = -1
	if retry {
		e.retry = 1
	}
	return e
}

// EventCode is what the request event records as its error type.
func (e *Error) EventCode() string {
	if e.Code != "" {
		return e.Code
	}
	return e.Type
}

// ShouldRetry is the x-should-retry the error is answered with: by default
// only an overload or an unavailable service is worth retrying.
func (e *Error) ShouldRetry() bool {
	if e.retry != 0 {
		return e.retry > 0
	}
	return e.Status == StatusOverloaded || e.Status == http.StatusServiceUnavailable
}

// RetryAfter is the wait sent as Retry-After; ok is false when none is.
func (e *Error) RetryAfter() (wait time.Duration, ok bool) { return e.retryAfter, e.hasRetry }

// AppendJSON appends the error in Anthropic's shape.
func (e *Error) AppendJSON(b []byte) []byte {
	t, _ := json.Marshal(e.Type)
	m, _ := json.Marshal(e.Message)
	b = append(b, `{"type":"error","error":{"type":`...)
	b = append(b, t...)
	b = append(b, `,"message":`...)
	b = append(b, m...)
	return append(b, "}}"...)
}

// Write answers with the error. Before the answer started it is a JSON
// answer with its status and headers; once a stream has started (its
// status and events already went out) it is the stream's error event,
// flushed, after which the caller ends the stream.
func (e *Error) Write(w http.ResponseWriter, streamStarted bool) {
	if streamStarted {
		b := make([]byte, 0, 112+len(e.Message))
		b = append(b, "event: error\ndata: "...)
		b = e.AppendJSON(b)
		b = append(b, "\n\n"...)
		_, _ = w.Write(b) // a client that is gone cannot be told
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		return
	}
	b := e.AppendJSON(make([]byte, 0, 96+len(e.Message)))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Should-Retry", strconv.FormatBool(e.ShouldRetry()))
	if e.hasRetry {
		h.Set("Retry-After", strconv.FormatInt(int64((e.retryAfter+time.Second-1)/time.Second), 10))
	}
	if e.allow != "" {
		h.Set("Allow", e.allow)
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(b)
}
