// Package webhook signs and delivers alert notifications to operators'
// HTTP receivers as durable scheduler jobs: a receiver that is down or
// slow is retried in the job's retry class, one that refuses the request
// for good fails the job at once, and a job out of attempts stays in the
// scheduler's failures view as the dead letter.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/service"
)

// JobType is the scheduler job type of one delivery.
const JobType = "alert_webhook"

// SignatureHeader carries "t=<unix seconds>,v1=<hex HMAC-SHA256>" of
// "<t>.<body>" under the webhook's secret: the timestamp is signed so a
// receiver can refuse a replayed old delivery.
const SignatureHeader = "Pillar-Signature"

// Sign returns the SignatureHeader value of body sent at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Errors of Verify.
var (
	ErrBadSignature = errors.New("webhook signature does not match")
	ErrStale        = errors.New("webhook signature timestamp outside the tolerance")
)

// Verify checks a SignatureHeader value as a receiver would: the MAC in
// constant time, and the timestamp within tolerance of now.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	got, err := hex.DecodeString(sig)
	if ts == "" || err != nil || !hmac.Equal(got, mac(secret, ts, body)) {
		return ErrBadSignature
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	return nil
}

// Target is where one webhook delivers.
type Target struct {
	URL    string
	Secret []byte
}

// Targets resolves a configured webhook by id, its secret opened.
type Targets interface {
	Target(ctx context.Context, webhookID string) (*Target, error)
}

// ErrGone: the webhook was deleted since the job was enqueued.
var ErrGone = errors.New("webhook no longer configured")

// Payload is a delivery job's payload: which webhook, and the event as
// the receiver gets it (the body is signed as stored).
type Payload struct {
	WebhookID string          `json:"webhook_id"`
	Event     json.RawMessage `json:"event"`
}

// Sender posts signed bodies.
// Build it with service.Init, whose clock stamps the signatures.
type Sender struct {
	service.Base
	Client *http.Client
}

// Send posts body to the target once. A 2xx answer is delivered; 408,
// 429 and 5xx answers and transport failures (down, reset, timed out)
// are retryable; any other answer wraps scheduler.ErrPermanent.
func (s *Sender) Send(ctx context.Context, t *Target, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook request: %v: %w", err, scheduler.ErrPermanent)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(SignatureHeader, Sign(t.Secret, s.Clock.Now(), body))
	resp, err := s.Client.Do(req)
	if err != nil {
		// Without the URL: a receiver's URL may carry its own secret (chat
		// webhooks put it in the path), and this error reaches the
		// failures view.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("webhook receiver unreachable: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return nil
	case c == http.StatusRequestTimeout || c == http.StatusTooManyRequests || c >= 500:
		return fmt.Errorf("webhook receiver answered %d", c)
	default:
		return fmt.Errorf("webhook receiver refused the delivery with %d: %w", c, scheduler.ErrPermanent)
	}
}

// Type is the delivery job type: the entity retry class (five attempts,
// 30 s doubling to 10 min), each attempt bounded by timeout.
func Type(targets Targets, s *Sender, timeout time.Duration) scheduler.Type {
	return scheduler.Type{Name: JobType, Class: scheduler.Entity, Timeout: timeout,
		Handler: func(ctx context.Context, j scheduler.Job) (scheduler.Outcome, error) {
			var p Payload
			if err := json.Unmarshal(j.Payload, &p); err != nil || p.WebhookID == "" || len(p.Event) == 0 {
				return "", fmt.Errorf("webhook payload: %w", scheduler.ErrPermanent)
			}
			t, err := targets.Target(ctx, p.WebhookID)
			if errors.Is(err, ErrGone) {
				return scheduler.OutcomeNoop, nil
			}
			if err != nil {
				return "", err
			}
			if err := s.Send(ctx, t, p.Event); err != nil {
				return "", err
			}
			return scheduler.OutcomeDone, nil
		}}
}
