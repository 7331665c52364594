package scheduler

import (
	"strings"
	"testing"
)

// P-API-6: failure summaries hide Authorization, x-api-key, downstream keys,
// ciphertext and payload-shaped material.
func TestRedact(t *testing.T) {
	t.Parallel()
	secrets := []string{"tok-abc123", "sk-ant-api03-SECRETSECRET", "sk-px-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg", "hunter2pass", "USERPROMPTTEXT", "c2VjcmV0Y2lwaGVydGV4dHNlY3JldGNpcGhlcnRleHRzZWNyZXQ="}
	inputs := []string{
		"POST /v1/messages failed: Authorization: Bearer tok-abc123 rejected",
		"upstream said 401 for x-api-key: sk-ant-api03-SECRETSECRET",
		`header map[X-Api-Key:[sk-px-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg]]`,
		`refresh failed: {"refresh_token":"hunter2pass","error":"invalid_grant"}`,
		`dispatch: body {"model":"m","messages":[{"role":"user","content":"USERPROMPTTEXT"}]}`,
		`decrypt c2VjcmV0Y2lwaGVydGV4dHNlY3JldGNpcGhlcnRleHRzZWNyZXQ= failed`,
		`api_key=hunter2pass`,
	}
	for _, in := range inputs {
		out := Redact(in)
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%q leaks %q: %q", in, s, out)
			}
		}
	}
	// Ordinary diagnostics survive.
	if out := Redact("connection refused dialing 127.0.0.1:5432 after 3 attempts"); out != "connection refused dialing 127.0.0.1:5432 after 3 attempts" {
		t.Fatalf("over-redacted: %q", out)
	}
	if out := Redact(strings.Repeat("x ", 5000)); len(out) > maxSummary+20 {
		t.Fatalf("not bounded: %d", len(out))
	}
}
