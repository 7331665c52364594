package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/webhook"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

var (
	secret = []byte("whsec-test")
	at     = time.Date(2026, 11, 28, 22, 0, 0, 0, time.UTC)
)

func sender() *webhook.Sender {
	return service.Init(service.Options{Clock: fakeclock.New(at)}, &webhook.Sender{Client: &http.Client{}})
}

type targets map[string]*webhook.Target

func (t targets) Target(_ context.Context, id string) (*webhook.Target, error) {
	if x, ok := t[id]; ok {
		return x, nil
	}
	return nil, webhook.ErrGone
}

func job(t *testing.T, id string, event string) scheduler.Job {
	p, err := json.Marshal(webhook.Payload{WebhookID: id, Event: json.RawMessage(event)})
	if err != nil {
		t.Fatal(err)
	}
	return scheduler.Job{Type: webhook.JobType, Payload: p, Attempt: 1, MaxAttempts: 5}
}

// The receiver gets the event as enqueued, signed under the webhook's
// secret with the send time; the signature verifies and fails for another
// secret, an altered body or an old timestamp.
func TestDeliveryIsSignedAndVerifiable(t *testing.T) {
	type got struct {
		body []byte
		sig  string
	}
	recv := make(chan got, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		recv <- got{b, r.Header.Get(webhook.SignatureHeader)}
	}))
	defer srv.Close()
	typ := webhook.Type(targets{"wh_1": {URL: srv.URL, Secret: secret}}, sender(), time.Minute)
	event := `{"alert":"principal_budget","principal":"alice","ratio":0.8}`
	out, err := typ.Handler(context.Background(), job(t, "wh_1", event))
	if err != nil || out != scheduler.OutcomeDone {
		t.Fatalf("delivery: %v %v", out, err)
	}
	g := <-recv
	if string(g.body) != event {
		t.Fatalf("body %s", g.body)
	}
	if err := webhook.Verify(secret, g.sig, g.body, at.Add(time.Minute), 5*time.Minute); err != nil {
		t.Fatalf("verify: %v (%s)", err, g.sig)
	}
	if err := webhook.Verify([]byte("other"), g.sig, g.body, at, 5*time.Minute); !errors.Is(err, webhook.ErrBadSignature) {
		t.Fatalf("another secret: %v", err)
	}
	if err := webhook.Verify(secret, g.sig, append(g.body, ' '), at, 5*time.Minute); !errors.Is(err, webhook.ErrBadSignature) {
		t.Fatalf("altered body: %v", err)
	}
	if err := webhook.Verify(secret, g.sig, g.body, at.Add(time.Hour), 5*time.Minute); !errors.Is(err, webhook.ErrStale) {
		t.Fatalf("replayed an hour later: %v", err)
	}
}

// A receiver that is down, overloaded or failing is retried in the job's
// class; one refusing the delivery fails the job at once (the dead
// letter); a deleted webhook ends the job as a no-op; a bad payload is
// permanent.
func TestDeliveryFailuresAreClassed(t *testing.T) {
	status := func(code int) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) }))
		t.Cleanup(srv.Close)
		return srv
	}
	// Nothing listens on port 1, and no listener is ever given it; a closed
	// server's port would be handed to one of the servers below.
	const downURL = "http://127.0.0.1:1/hooks/T000/SECRETPATHTOKEN"
	cases := map[string]struct {
		url       string
		permanent bool
	}{
		"down": {downURL, false},
		"500":  {status(500).URL, false},
		"503":  {status(503).URL, false},
		"429":  {status(429).URL, false},
		"408":  {status(408).URL, false},
		"404":  {status(404).URL, true},
		"401":  {status(401).URL, true},
		"410":  {status(410).URL, true},
	}
	for name, c := range cases {
		typ := webhook.Type(targets{"wh": {URL: c.url, Secret: secret}}, sender(), time.Minute)
		_, err := typ.Handler(context.Background(), job(t, "wh", `{}`))
		if err == nil || errors.Is(err, scheduler.ErrPermanent) != c.permanent {
			t.Errorf("%s: error %v, want permanent %v", name, err, c.permanent)
		} else if strings.Contains(err.Error(), "SECRETPATHTOKEN") {
			t.Errorf("%s: the receiver's URL is in the error: %v", name, err)
		}
	}
	typ := webhook.Type(targets{}, sender(), time.Minute)
	if out, err := typ.Handler(context.Background(), job(t, "wh_gone", `{}`)); err != nil || out != scheduler.OutcomeNoop {
		t.Errorf("deleted webhook: %v %v", out, err)
	}
	if _, err := typ.Handler(context.Background(), scheduler.Job{Payload: []byte(`{"webhook_id":""}`)}); !errors.Is(err, scheduler.ErrPermanent) {
		t.Errorf("bad payload: %v", err)
	}
	if typ.Class != scheduler.Entity {
		t.Errorf("class %s", typ.Class.Name)
	}
}

// A slow receiver holds the attempt until the scheduler's attempt deadline
// ends it: a retryable failure, not a delivery.
func TestSlowReceiverIsRetried(t *testing.T) {
	arrived := make(chan struct{})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	typ := webhook.Type(targets{"wh": {URL: srv.URL, Secret: secret}}, sender(), time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel() // the attempt's deadline, as the scheduler's timeout ends it
	}()
	_, err := typ.Handler(ctx, job(t, "wh", `{}`))
	if err == nil || errors.Is(err, scheduler.ErrPermanent) || !errors.Is(err, context.Canceled) {
		t.Fatalf("slow receiver: %v", err)
	}
}
