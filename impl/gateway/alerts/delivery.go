package alerts

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/webhook"
)

// WebhookReader reads a stored webhook.
type WebhookReader interface {
	GetWebhook(ctx context.Context, id string) (*store.Webhook, error)
}

// Opener opens sealed values (secret.Box).
type Opener interface {
	Open(ciphertext, associatedData []byte) ([]byte, error)
}

// Targets resolves the stored webhooks for delivery, their secrets opened
// for the origin of the URL they are sent to.
type Targets struct {
	Store WebhookReader
	Box   Opener
}

var _ webhook.Targets = Targets{}

// Target implements webhook.Targets: a webhook deleted or switched off
// since the delivery was enqueued is webhook.ErrGone.
func (t Targets) Target(ctx context.Context, id string) (*webhook.Target, error) {
	w, err := t.Store.GetWebhook(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, webhook.ErrGone
	}
	if err != nil {
		return nil, err
	}
	if !w.Enabled {
		return nil, webhook.ErrGone
	}
	key, err := t.Box.Open(w.Secret, credential.WebhookAD(w.ID, w.URL))
	if err != nil {
		return nil, fmt.Errorf("webhook %s: its secret does not open under the master key: %w", w.ID, scheduler.ErrPermanent)
	}
	return &webhook.Target{URL: w.URL, Secret: key}, nil
}

// DeliveryType is webhook.Type counting each attempt's outcome.
func DeliveryType(targets webhook.Targets, s *webhook.Sender, timeout time.Duration, m *Metrics) scheduler.Type {
	t := webhook.Type(targets, s, timeout)
	inner := t.Handler
	t.Handler = func(ctx context.Context, j scheduler.Job) (scheduler.Outcome, error) {
		out, err := inner(ctx, j)
		switch {
		case err == nil && out == scheduler.OutcomeNoop:
			m.deliveries.WithLabelValues(OutcomeDropped).Inc()
		case err == nil:
			m.deliveries.WithLabelValues(OutcomeDelivered).Inc()
		case errors.Is(err, scheduler.ErrPermanent) || j.Attempt >= j.MaxAttempts:
			m.deliveries.WithLabelValues(OutcomeDeadLetter).Inc()
		default:
			m.deliveries.WithLabelValues(OutcomeRetrying).Inc()
		}
		return out, err
	}
	return t
}
