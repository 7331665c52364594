package store

import (
	"context"
	"time"
)

// SealedWebhookSecret is webhooks.secret, the HMAC key of a webhook's
// signatures (Sealed.WebhookID, Sealed.BaseURL: its URL).
const SealedWebhookSecret = "webhook_secret"

// Webhook is an operator's receiver of alert notifications. Secret is
// sealed under the master key, bound to the webhook's id and the origin
// of its URL, so that the key is never sent to another origin.
type Webhook struct {
	ID   string
	Name string
	URL  string
	// Secret is the sealed HMAC key; never returned by the admin API.
	Secret []byte
	// Conditions are the alert conditions delivered (alerts.Conditions);
	// empty delivers every condition.
	Conditions []string
	Enabled    bool
	Revision   int64
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// AlertState is the stored state of one alert episode, shared by the
// replicas so that a condition is notified once when it starts firing
// and once when it resolves.
type AlertState struct {
	// Key names the condition and its subject ("principal_budget_high:pr_1").
	Key     string
	Firing  bool
	Episode int64
	// Since is when the current state began.
	Since time.Time
}

// WebhookStore holds the alert webhooks and the alert episodes. Webhook
// changes are audited but do not move the configuration generation: the
// proxy path never reads them.
type WebhookStore interface {
	// CreateWebhook stores a webhook; ID, Revision (1) and the times are
	// filled in. ErrConflict when the name is taken.
	CreateWebhook(ctx context.Context, w Webhook) (*Webhook, error)
	GetWebhook(ctx context.Context, id string) (*Webhook, error)
	// ListWebhooks returns every webhook, oldest first.
	ListWebhooks(ctx context.Context) ([]Webhook, error)
	// UpdateWebhook replaces name, URL, secret (nil keeps the stored
	// one), conditions and enabled when the revision is expect (or
	// AnyRevision); ErrStaleRevision otherwise.
	UpdateWebhook(ctx context.Context, id string, expect int64, w Webhook) (*Webhook, error)
	// DeleteWebhook deletes it when its revision is expect (or AnyRevision).
	DeleteWebhook(ctx context.Context, id string, expect int64) error

	// SetAlertState records that the alert key is firing or not at at.
	// changed reports whether this call moved it (firing after not
	// firing or never seen, or resolved after firing); only one of
	// several concurrent callers moving the same key gets changed. A key
	// first seen not firing is not recorded. The state returned is the
	// one stored after the call.
	SetAlertState(ctx context.Context, key string, firing bool, at time.Time) (st AlertState, changed bool, err error)
	// ListAlertStates returns the keys firing now.
	ListAlertStates(ctx context.Context) ([]AlertState, error)
}
