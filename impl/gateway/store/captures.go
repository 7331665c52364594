package store

import (
	"context"
	"time"
)

// SealedCapturedExchange is captured_exchanges.sealed, the bodies of one
// captured exchange (Sealed.ExchangeID, Sealed.PrincipalID).
const SealedCapturedExchange = "captured_exchange"

// CapturedExchange is one request's bodies, captured because its
// principal opted in. Sealed holds both bodies sealed under the master
// key; the sizes are the bytes captured (after the cap), for listings
// that must not open the bodies.
type CapturedExchange struct {
	// EventID is the request event the exchange belongs to.
	EventID       string
	PrincipalID   string
	At            time.Time
	RequestBytes  int64
	ResponseBytes int64
	// Truncated: a body was longer than the cap and was cut.
	Truncated bool
	Sealed    []byte
}

// CaptureStore holds the captured exchanges. Writes are background
// writes: no audit row, no configuration generation.
type CaptureStore interface {
	// InsertCapturedExchanges stores a batch; an event id stored already
	// is left as it was.
	InsertCapturedExchanges(ctx context.Context, xs []CapturedExchange) error
	// GetCapturedExchange returns the exchange of a request event, or
	// ErrNotFound.
	GetCapturedExchange(ctx context.Context, eventID string) (*CapturedExchange, error)
	// ReadCapturedExchange is GetCapturedExchange for a person reading
	// the bodies: the same transaction records an audit row ("read",
	// "captured_exchange", the event id) by ctx's actor. ErrNotFound
	// records nothing.
	ReadCapturedExchange(ctx context.Context, eventID string) (*CapturedExchange, error)
	// CapturedEventIDs reports which of ids have a captured exchange.
	CapturedEventIDs(ctx context.Context, ids []string) (map[string]bool, error)
}
