package admin

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/pillarhq/pillar/impl/gateway/alerts"
	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Alerts sends and lists the deliveries of alert webhooks (the server's
// scheduler); nil answers alerts_not_configured to a test delivery and
// lists none.
type Alerts interface {
	// SendTest enqueues a test event to the webhook.
	SendTest(ctx context.Context, webhookID string) (jobID int64, err error)
	// Deliveries lists the webhook's recent deliveries, newest first.
	Deliveries(ctx context.Context, webhookID string) ([]WebhookDelivery, error)
}

// ErrAlertsUnavailable: the scheduler that delivers webhooks is not
// running on this replica (Alerts wraps it); answered as
// alerts_not_configured.
var ErrAlertsUnavailable = errors.New("the scheduler that delivers webhooks is not running on this replica")

func alertsErr(err error) error {
	if errors.Is(err, ErrAlertsUnavailable) {
		return newErr("alerts_not_configured", "this replica runs without the scheduler that delivers webhooks; retry on another replica or later")
	}
	return err
}

// WebhookDelivery is one delivery job of a webhook.
type WebhookDelivery struct {
	JobID int64 `json:"job_id"`
	// Key names the alert, its episode and status ("test:…" for tests).
	Key         string `json:"key"`
	State       string `json:"state"`
	Attempt     int    `json:"attempt"`
	MaxAttempts int    `json:"max_attempts"`
	// DeadLetter: the delivery ended without reaching the receiver
	// (Failed at its last attempt, or Killed); it stays in the
	// scheduler's failures view with its last error.
	DeadLetter          bool  `json:"dead_letter"`
	ScheduledAtUnixSecs int64 `json:"scheduled_at_unix_secs"`
}

// Webhook secrets: an HMAC key of 16 to 256 bytes.
const (
	minWebhookSecret = 16
	maxWebhookSecret = 256
)

// WebhookBody creates or replaces a webhook. Secret is required on
// creation and whenever the URL moves to another origin (the sealed key
// is bound to the origin); omitted otherwise, the stored one is kept.
type WebhookBody struct {
	Name       string   `json:"name"`
	URL        string   `json:"url"`
	Secret     *string  `json:"secret"`
	Conditions []string `json:"conditions"`
	Enabled    *bool    `json:"enabled"`
}

// WebhookResponse describes a webhook; the secret is never returned.
type WebhookResponse struct {
	ID                string   `json:"id"`
	Name              string   `json:"name"`
	URL               string   `json:"url"`
	Conditions        []string `json:"conditions"`
	Enabled           bool     `json:"enabled"`
	SecretSet         bool     `json:"secret_set"`
	Revision          int64    `json:"revision"`
	CreatedAtUnixSecs int64    `json:"created_at_unix_secs"`
	UpdatedAtUnixSecs int64    `json:"updated_at_unix_secs"`
}

func webhookResponse(w *store.Webhook) WebhookResponse {
	cs := w.Conditions
	if cs == nil {
		cs = []string{}
	}
	return WebhookResponse{ID: w.ID, Name: w.Name, URL: w.URL, Conditions: cs, Enabled: w.Enabled, SecretSet: len(w.Secret) > 0,
		Revision: w.Revision, CreatedAtUnixSecs: w.CreatedAt.Unix(), UpdatedAtUnixSecs: w.UpdatedAt.Unix()}
}

func webhookNotFound(id string) *APIError {
	return newErr("webhook_not_found", "no webhook with id %q", id)
}

func webhookErr(err error, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return webhookNotFound(id)
	}
	return fromStore(err, resWebhook, id)
}

// validWebhook checks a body; the messages never repeat the URL or the
// secret (a receiver's URL may carry its own token).
func (a *api) validWebhook(ctx context.Context, b *WebhookBody) error {
	if err := validName(b.Name); err != nil {
		return err
	}
	if err := a.location(ctx, "url", b.URL); err != nil {
		return err
	}
	for _, c := range b.Conditions {
		if !alerts.Known(c) {
			e := newErr("unknown_condition", "conditions: %q is not a condition; one of %s", c, strings.Join(alerts.Conditions, ", "))
			e.Details = map[string]any{"conditions": alerts.Conditions}
			return e
		}
	}
	if b.Secret != nil {
		if n := len(*b.Secret); n < minWebhookSecret || n > maxWebhookSecret || !utf8.ValidString(*b.Secret) {
			return invalid("secret: %d to %d bytes of text", minWebhookSecret, maxWebhookSecret)
		}
	}
	return nil
}

func dedupe(cs []string) []string {
	out := []string{}
	for _, c := range cs {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

func (a *api) sealWebhookSecret(id, url, secret string) ([]byte, error) {
	if a.Sealer == nil {
		return nil, errors.New("no sealer configured")
	}
	return a.Sealer.Seal([]byte(secret), credential.WebhookAD(id, url))
}

func (a *api) createWebhook(w http.ResponseWriter, r *http.Request) error {
	var b WebhookBody
	if err := decode(r, &b); err != nil {
		return err
	}
	if err := a.validWebhook(r.Context(), &b); err != nil {
		return err
	}
	if b.Secret == nil {
		return invalid("secret: required, %d to %d bytes: the receiver checks each delivery's signature with it", minWebhookSecret, maxWebhookSecret)
	}
	id := store.NewID("wh")
	ct, err := a.sealWebhookSecret(id, b.URL, *b.Secret)
	if err != nil {
		return err
	}
	enabled := b.Enabled == nil || *b.Enabled
	wh, err := a.Store.CreateWebhook(r.Context(), store.Webhook{ID: id, Name: b.Name, URL: b.URL, Secret: ct, Conditions: dedupe(b.Conditions), Enabled: enabled})
	if err != nil {
		return webhookErr(err, id)
	}
	etag(w, wh.Revision)
	w.Header().Set("Location", "/admin/v1/webhooks/"+wh.ID)
	writeJSON(w, http.StatusCreated, webhookResponse(wh))
	return nil
}

func (a *api) listWebhooks(w http.ResponseWriter, r *http.Request) error {
	ws, err := a.Store.ListWebhooks(r.Context())
	if err != nil {
		return fromStore(err, resWebhook, "")
	}
	out := struct {
		Webhooks   []WebhookResponse `json:"webhooks"`
		Conditions []string          `json:"conditions"`
	}{Webhooks: []WebhookResponse{}, Conditions: alerts.Conditions}
	for i := range ws {
		out.Webhooks = append(out.Webhooks, webhookResponse(&ws[i]))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) getWebhook(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	wh, err := a.Store.GetWebhook(r.Context(), id)
	if err != nil {
		return webhookErr(err, id)
	}
	etag(w, wh.Revision)
	writeJSON(w, http.StatusOK, webhookResponse(wh))
	return nil
}

// putWebhook replaces a webhook (If-Match optional, as for upstreams).
func (a *api) putWebhook(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	expect, err := ifMatch(r, false)
	if err != nil {
		return err
	}
	var b WebhookBody
	if err := decode(r, &b); err != nil {
		return err
	}
	if err := a.validWebhook(r.Context(), &b); err != nil {
		return err
	}
	cur, err := a.Store.GetWebhook(r.Context(), id)
	if err != nil {
		return webhookErr(err, id)
	}
	var ct []byte
	switch {
	case b.Secret != nil:
		if ct, err = a.sealWebhookSecret(id, b.URL, *b.Secret); err != nil {
			return err
		}
	case store.Origin(b.URL) != store.Origin(cur.URL):
		return newErr("secret_required", "url: the change sends the webhook to another origin (scheme, host or port); give the secret again in the same request")
	}
	enabled := cur.Enabled
	if b.Enabled != nil {
		enabled = *b.Enabled
	}
	wh, err := a.Store.UpdateWebhook(r.Context(), id, expect, store.Webhook{Name: b.Name, URL: b.URL, Secret: ct, Conditions: dedupe(b.Conditions), Enabled: enabled})
	if err != nil {
		return webhookErr(err, id)
	}
	etag(w, wh.Revision)
	writeJSON(w, http.StatusOK, webhookResponse(wh))
	return nil
}

func (a *api) deleteWebhook(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	expect, err := ifMatch(r, false)
	if err != nil {
		return err
	}
	if err := a.Store.DeleteWebhook(r.Context(), id, expect); err != nil {
		return webhookErr(err, id)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// testWebhook enqueues a test event: the receiver gets it signed like an
// alert, and its delivery shows in the webhook's deliveries.
func (a *api) testWebhook(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	wh, err := a.Store.GetWebhook(r.Context(), id)
	if err != nil {
		return webhookErr(err, id)
	}
	if !wh.Enabled {
		return newErr("webhook_disabled", "the webhook is switched off; enable it to send to it")
	}
	if a.Alerts == nil {
		return newErr("alerts_not_configured", "this server runs without the scheduler that delivers webhooks")
	}
	job, err := a.Alerts.SendTest(r.Context(), id)
	if err != nil {
		return alertsErr(err)
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"job_id": job})
	return nil
}

func (a *api) webhookDeliveries(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := a.Store.GetWebhook(r.Context(), id); err != nil {
		return webhookErr(err, id)
	}
	out := struct {
		Deliveries []WebhookDelivery `json:"deliveries"`
	}{Deliveries: []WebhookDelivery{}}
	if a.Alerts != nil {
		ds, err := a.Alerts.Deliveries(r.Context(), id)
		if err != nil {
			return alertsErr(err)
		}
		out.Deliveries = append(out.Deliveries, ds...)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// AlertResponse is one alert firing now.
type AlertResponse struct {
	Key           string `json:"key"`
	Condition     string `json:"condition"`
	Rule          string `json:"rule"`
	Subject       string `json:"subject"`
	Episode       int64  `json:"episode"`
	SinceUnixSecs int64  `json:"since_unix_secs"`
}

// listAlerts shows the alerts firing now, as the replicas recorded them.
func (a *api) listAlerts(w http.ResponseWriter, r *http.Request) error {
	as, err := a.Store.ListAlertStates(r.Context())
	if err != nil {
		return fromStore(err, resWebhook, "")
	}
	out := struct {
		Alerts []AlertResponse `json:"alerts"`
	}{Alerts: []AlertResponse{}}
	for _, s := range as {
		cond, subj, _ := strings.Cut(s.Key, ":")
		out.Alerts = append(out.Alerts, AlertResponse{Key: s.Key, Condition: cond, Rule: alerts.Rules[cond], Subject: subj, Episode: s.Episode,
			SinceUnixSecs: s.Since.Unix()})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
