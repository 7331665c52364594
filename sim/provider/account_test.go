package provider

import (
	"testing"
	"time"
)

// With EnforceRequestsPerMinute an account's requests past its limit in
// the window are answered 429 with retry-after to the window's end and
// the requests headers at 0; the next window serves again.
func TestEnforcedRequestsPerMinute(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_800_000_000, 0)
	p, srv := newServer(t, Options{RequestsPerMinute: 2, EnforceRequestsPerMinute: true, Now: t0})
	body := `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	for i := range 2 {
		if res, b := post(t, srv.URL+"/v1/messages", body, nil); res.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, res.StatusCode, b)
		}
	}
	res, b := post(t, srv.URL+"/v1/messages", body, nil)
	if res.StatusCode != 429 || errType(t, b) != "rate_limit_error" {
		t.Fatalf("past the limit: %d %s", res.StatusCode, b)
	}
	if res.Header.Get("Retry-After") != "60" || res.Header.Get("Anthropic-Ratelimit-Requests-Remaining") != "0" {
		t.Fatalf("headers %v", res.Header)
	}
	p.Advance(time.Minute)
	if res, b := post(t, srv.URL+"/v1/messages", body, nil); res.StatusCode != 200 {
		t.Fatalf("next window: %d %s", res.StatusCode, b)
	}
}
