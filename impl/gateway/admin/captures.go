package admin

import (
	"errors"
	"net/http"

	"github.com/pillarhq/pillar/impl/gateway/capture"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Opener opens values sealed under the master key (secret.Box).
type Opener interface {
	Open(ciphertext, associatedData []byte) ([]byte, error)
}

// CapturedExchangeResponse is GET /admin/v1/request-events/{id}/exchange:
// the opened bodies of a captured exchange. It is also the export format
// of a captured exchange (docs/capture.md).
type CapturedExchangeResponse struct {
	EventID            string `json:"event_id"`
	PrincipalID        string `json:"principal_id"`
	CapturedAtUnixSecs int64  `json:"captured_at_unix_secs"`
	// Truncated: a body was longer than the cap and ends early.
	Truncated bool `json:"truncated"`
	// Request and Response are the bodies as text (JSON, or the SSE bytes
	// of a stream as sent).
	Request  string `json:"request"`
	Response string `json:"response"`
}

// capturedExchange opens the bodies of a request event's captured
// exchange; the read itself is audited.
func (a *api) capturedExchange(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	x, err := a.Store.ReadCapturedExchange(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return newErr("exchange_not_captured", "request event %q has no captured exchange", id)
	}
	if err != nil {
		return fromStore(err, resPrincipal, "")
	}
	b, err := capture.Open(a.Opener, *x)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, CapturedExchangeResponse{EventID: x.EventID, PrincipalID: x.PrincipalID,
		CapturedAtUnixSecs: x.At.Unix(), Truncated: b.Truncated, Request: string(b.Request), Response: string(b.Response)})
	return nil
}
