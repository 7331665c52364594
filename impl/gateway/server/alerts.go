package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/gateway/alerts"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/webhook"
)

// alertDeliveries gives the admin API the webhook deliveries on the
// scheduler: their keys start with the webhook's id.
type alertDeliveries struct{ s *scheduler.Scheduler }

func (d alertDeliveries) SendTest(ctx context.Context, webhookID string) (int64, error) {
	now := d.s.Clock.Now().UTC()
	body, _ := json.Marshal(alerts.Event{Alert: "test", Status: alerts.StatusTest, At: now,
		Summary: "a test delivery asked for from the admin API"})
	p, _ := json.Marshal(webhook.Payload{WebhookID: webhookID, Event: body})
	_, id, err := d.s.Enqueue(ctx, scheduler.Enqueue{Type: webhook.JobType, Payload: p,
		IdempotencyKey: webhookID + ":test:" + strconv.FormatInt(now.UnixNano(), 10)})
	return id, unavailable(err)
}

// unavailable marks the scheduler's absence for the admin API.
func unavailable(err error) error {
	if errors.Is(err, scheduler.ErrUnavailable) {
		return fmt.Errorf("%w: %w", admin.ErrAlertsUnavailable, err)
	}
	return err
}

func (d alertDeliveries) Deliveries(ctx context.Context, webhookID string) ([]admin.WebhookDelivery, error) {
	js, err := d.s.Family(ctx, webhook.JobType, webhookID+":")
	if err != nil {
		return nil, unavailable(err)
	}
	out := make([]admin.WebhookDelivery, 0, len(js))
	for _, j := range js {
		out = append(out, admin.WebhookDelivery{JobID: j.ID, Key: strings.TrimPrefix(j.IdempotencyKey, webhookID+":"), State: j.State,
			Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, DeadLetter: j.DeadLettered(), ScheduledAtUnixSecs: j.ScheduledAt.Unix()})
	}
	return out, nil
}
