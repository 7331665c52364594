package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"golang.org/x/oauth2/google"
)

const bedrockBody = `{"anthropic_version":"bedrock-2023-05-31","max_tokens":8,"messages":[{"role":"user","content":"hi there"}]}`

// signed is a Bedrock invoke of body signed at t with secret.
func signed(t *testing.T, base, body, secret string, at time.Time) *http.Request {
	t.Helper()
	r, _ := http.NewRequest(http.MethodPost, base+"/model/"+url.PathEscape("anthropic.claude-v1:0")+"/invoke", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	sum := sha256.Sum256([]byte(body))
	creds := aws.Credentials{AccessKeyID: DefaultAWSAccessKeyID, SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, r, hex.EncodeToString(sum[:]), "bedrock", "us-east-1", at); err != nil {
		t.Fatal(err)
	}
	return r
}

func sendCloud(t *testing.T, r *http.Request) (int, string, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Amzn-Errortype"), string(b)
}

// The Bedrock endpoint serves a request the SDK signed and refuses, in
// Bedrock's shape, one unsigned, signed with another secret, altered
// after signing, signed too long ago, or with a body Bedrock refuses.
func TestBedrockChecksAsBedrock(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := New(Options{Now: now})
	srv := httptest.NewServer(p)
	defer srv.Close()
	if st, _, b := sendCloud(t, signed(t, srv.URL, bedrockBody, DefaultAWSSecretAccessKey, now)); st != 200 || !strings.Contains(b, `"text":"hi there"`) {
		t.Fatalf("signed: %d %s", st, b)
	}
	unsigned, _ := http.NewRequest(http.MethodPost, srv.URL+"/model/m/invoke", strings.NewReader(bedrockBody))
	tampered := signed(t, srv.URL, bedrockBody, DefaultAWSSecretAccessKey, now)
	tampered.Body = io.NopCloser(strings.NewReader(strings.Replace(bedrockBody, "hi", "ho", 1)))
	for name, c := range map[string]struct {
		r        *http.Request
		status   int
		typ      string
		contains string
	}{
		"unsigned":       {unsigned, 403, "MissingAuthenticationTokenException", ""},
		"another secret": {signed(t, srv.URL, bedrockBody, "wrong", now), 403, "InvalidSignatureException", "does not match"},
		"altered":        {tampered, 403, "InvalidSignatureException", "does not match"},
		"too old":        {signed(t, srv.URL, bedrockBody, DefaultAWSSecretAccessKey, now.Add(-6*time.Minute)), 403, "InvalidSignatureException", "Signature expired"},
		"model in body":  {signed(t, srv.URL, strings.Replace(bedrockBody, `"max_tokens"`, `"model":"x","max_tokens"`, 1), DefaultAWSSecretAccessKey, now), 400, "ValidationException", "extraneous key [model]"},
		"no version":     {signed(t, srv.URL, `{"max_tokens":8,"messages":[]}`, DefaultAWSSecretAccessKey, now), 400, "ValidationException", "anthropic_version"},
		"injected 529":   {withFault(signed(t, srv.URL, bedrockBody, DefaultAWSSecretAccessKey, now), "status=529"), 503, "ServiceUnavailableException", ""},
	} {
		st, typ, b := sendCloud(t, c.r)
		if st != c.status || !strings.HasPrefix(typ, c.typ+":") || !strings.Contains(b, c.contains) || strings.Contains(b, `"type":"error"`) {
			t.Errorf("%s: %d %q %s", name, st, typ, b)
		}
	}
}

func withFault(r *http.Request, f string) *http.Request {
	r.Header.Set("X-Sim-Fault", f) // not signed: the signer signed what it saw
	return r
}

// Google's own library gets a token from the sim's token endpoint with
// the sim's key file; the Vertex endpoint takes that token and no other,
// and not once it expired.
func TestVertexTokens(t *testing.T) {
	// The assertion is stamped by the library's wall clock.
	now := time.Now()
	p := New(Options{Now: now, VertexTokenTTL: time.Hour})
	srv := httptest.NewServer(p)
	defer srv.Close()
	creds, err := google.CredentialsFromJSONWithType(context.Background(), p.ServiceAccountJSON(srv.URL), google.ServiceAccount, "https://www.googleapis.com/auth/cloud-platform")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := creds.TokenSource.Token()
	if err != nil {
		t.Fatal(err)
	}
	if n := p.VertexTokenRequests(); n != 1 {
		t.Fatalf("token endpoint requests: %d", n)
	}
	call := func(bearer string) (int, string) {
		r, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-x@1:rawPredict",
			strings.NewReader(`{"anthropic_version":"vertex-2023-10-16","max_tokens":8,"messages":[{"role":"user","content":"hello"}]}`))
		r.Header.Set("Authorization", "Bearer "+bearer)
		st, _, b := sendCloud(t, r)
		return st, b
	}
	if st, b := call(tok.AccessToken); st != 200 || !strings.Contains(b, `"model":"claude-x@1"`) {
		t.Fatalf("issued token: %d %s", st, b)
	}
	if st, b := call("ya29.made-up"); st != 401 || !strings.Contains(b, "UNAUTHENTICATED") {
		t.Fatalf("made-up token: %d %s", st, b)
	}
	p.Advance(time.Hour)
	if st, _ := call(tok.AccessToken); st != 401 {
		t.Fatalf("expired token: %d", st)
	}
}
