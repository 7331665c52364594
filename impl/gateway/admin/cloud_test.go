package admin_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/cloud"
	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

const awsSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

func bedrockBody(name string) map[string]any {
	return map[string]any{"name": name, "kind": "bedrock", "region": "eu-west-1",
		"aws_access_key_id": "AKIAIOSFODNN7EXAMPLE", "aws_secret_access_key": awsSecret,
		"model_map": map[string]string{"claude-sonnet-4-5": "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"}}
}

// serviceAccount is a service account key file whose token_uri is uri.
func serviceAccount(t *testing.T, uri string) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	b, _ := json.Marshal(map[string]string{"type": "service_account", "project_id": "acme-prod", "private_key_id": "k1",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "client_email": "gw@acme-prod.iam.gserviceaccount.com",
		"token_uri": uri})
	return string(b)
}

// A bedrock upstream: its region gives the endpoint, its keys are sealed
// for that origin and never shown, its model map is returned as given.
func TestBedrockUpstreamCreated(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", "/admin/v1/upstreams", bedrockBody("bedrock"))
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), awsSecret) {
		t.Fatal("the response carries the secret key")
	}
	m := r.json(t)
	if m["base_url"] != "https://bedrock-runtime.eu-west-1.amazonaws.com" || m["region"] != "eu-west-1" || m["credential_mode"] != credential.AWSKeys ||
		m["model_map"].(map[string]any)["claude-sonnet-4-5"] != "eu.anthropic.claude-sonnet-4-5-20250929-v1:0" {
		t.Fatalf("created %v", m)
	}
	u, err := e.st.GetUpstream(context.Background(), m["id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	pt, err := e.box.Open(u.Credential, credential.UpstreamAD(u))
	if err != nil {
		t.Fatalf("the keys do not open for the upstream's origin: %v", err)
	}
	var keys cloud.StaticAWSCredentials
	if json.Unmarshal(pt, &keys) != nil || keys.SecretAccessKey != awsSecret || keys.AccessKeyID != "AKIAIOSFODNN7EXAMPLE" {
		t.Fatalf("sealed %s", pt)
	}
	if _, err := e.box.Open(u.Credential, credential.AD(u.ID, u.Kind, "https://elsewhere.example", "")); err == nil {
		t.Fatal("the keys open for another origin")
	}
	if strings.Contains(e.logs.String(), awsSecret) {
		t.Fatal("the secret key was logged")
	}
	// The keys stay with their origin: another endpoint needs them again.
	e.unchanged("move", func() {
		wantErr(t, e.do("PATCH", "/admin/v1/upstreams/"+u.ID, map[string]any{"base_url": "https://bedrock-runtime.us-west-2.amazonaws.com"}, "If-Match", "*"), 400, "credential_required")
	})
	r = e.do("PATCH", "/admin/v1/upstreams/"+u.ID, map[string]any{"base_url": "https://bedrock-runtime.us-west-2.amazonaws.com", "region": "us-west-2",
		"aws_access_key_id": "AKIAIOSFODNN7EXAMPLE", "aws_secret_access_key": awsSecret}, "If-Match", "*")
	if r.status != 200 || r.json(t)["region"] != "us-west-2" {
		t.Fatalf("move with the keys: %d %s", r.status, r.body)
	}
	u, _ = e.st.GetUpstream(context.Background(), u.ID)
	if _, err := e.box.Open(u.Credential, credential.UpstreamAD(u)); err != nil {
		t.Fatalf("the keys given with the move do not open for the new origin: %v", err)
	}
}

// A vertex upstream's service account is sealed for both origins it is
// sent to: the endpoint, and the token endpoint its key names.
func TestVertexUpstreamBindsTheTokenEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	sa := serviceAccount(t, "https://oauth2.example.com/token")
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "vertex", "kind": "vertex", "region": "us-east5", "project": "acme-prod",
		"service_account_json": sa})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	m := r.json(t)
	if m["base_url"] != "https://us-east5-aiplatform.googleapis.com" || m["project"] != "acme-prod" || m["credential_mode"] != credential.ServiceAccount {
		t.Fatalf("created %v", m)
	}
	if strings.Contains(string(r.body), "PRIVATE KEY") {
		t.Fatal("the response carries the private key")
	}
	u, _ := e.st.GetUpstream(context.Background(), m["id"].(string))
	if u.OAuthTokenURL != "https://oauth2.example.com/token" {
		t.Fatalf("token endpoint %q", u.OAuthTokenURL)
	}
	if pt, err := e.box.Open(u.Credential, credential.UpstreamAD(u)); err != nil || string(pt) != sa {
		t.Fatalf("open: %v", err)
	}
	if _, err := e.box.Open(u.Credential, credential.AD(u.ID, u.Kind, u.BaseURL, "https://attacker.example/token")); err == nil {
		t.Fatal("the service account opens for another token endpoint")
	}
	// The map alone changes by PATCH; the credential stays.
	p := e.do("PATCH", "/admin/v1/upstreams/"+u.ID, map[string]any{"model_map": map[string]string{"claude-sonnet-4-5": "claude-sonnet-4-5@20250929"}}, "If-Match", "*")
	if p.status != 200 || p.json(t)["model_map"].(map[string]any)["claude-sonnet-4-5"] != "claude-sonnet-4-5@20250929" || p.json(t)["credential_mode"] != credential.ServiceAccount {
		t.Fatalf("patch: %d %s", p.status, p.body)
	}
}

// Cloud fields are checked for the kind, and nothing is stored on a
// refusal.
func TestCloudUpstreamRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	withOut := func(k string) map[string]any { b := bedrockBody("x"); delete(b, k); return b }
	with := func(k string, v any) map[string]any { b := bedrockBody("x"); b[k] = v; return b }
	for name, c := range map[string]struct {
		body map[string]any
		code string
	}{
		"no region":              {withOut("region"), "invalid_request"},
		"a bad region":           {with("region", "EU West"), "invalid_request"},
		"a project on bedrock":   {with("project", "acme-prod"), "invalid_request"},
		"no keys":                {withOut("aws_secret_access_key"), "invalid_request"},
		"an API key":             {with("api_key_value", "sk-ant"), "invalid_request"},
		"a service account":      {with("service_account_json", "{}"), "invalid_request"},
		"a map entry with space": {with("model_map", map[string]string{"a b": "c"}), "invalid_request"},
		"vertex without project": {map[string]any{"name": "x", "kind": "vertex", "region": "us-east5", "service_account_json": serviceAccount(t, "")}, "invalid_request"},
		"vertex with AWS keys":   {map[string]any{"name": "x", "kind": "vertex", "region": "us-east5", "project": "acme-prod", "aws_access_key_id": "A", "aws_secret_access_key": "B"}, "invalid_request"},
		"a model map on an API-key upstream": {map[string]any{"name": "x", "kind": "vendor_api_key", "base_url": "https://api.example", "api_key_value": "k",
			"model_map": map[string]string{"a": "b"}}, "invalid_request"},
		"host credentials not allowed": {map[string]any{"name": "x", "kind": "bedrock", "region": "us-east-1", "host_credentials": true}, "host_credentials_not_allowed"},
	} {
		e.unchanged(name, func() { wantErr(t, e.do("POST", "/admin/v1/upstreams", c.body), 400, c.code) })
	}
}

// Host credentials reach wherever base_url points: only an admin may give
// them, and only when the server allows them.
func TestHostCloudCredentials(t *testing.T) {
	t.Parallel()
	e := setup(t, func(o *options) { o.hostCloud = true })
	body := map[string]any{"name": "host", "kind": "bedrock", "region": "us-east-1", "host_credentials": true}
	op := e.roleToken("operator")
	e.unchanged("operator", func() { wantErr(t, e.do("POST", "/admin/v1/upstreams", body, bearer(op)...), 403, "forbidden") })
	r := e.do("POST", "/admin/v1/upstreams", body)
	if r.status != 201 || r.json(t)["credential_mode"] != credential.Host || r.json(t)["status"].(map[string]any)["routable"] != true {
		t.Fatalf("admin: %d %s", r.status, r.body)
	}
	if u, _ := e.st.GetUpstream(context.Background(), r.json(t)["id"].(string)); u.Kind != store.KindBedrock || u.CredentialKind != credential.Host {
		t.Fatalf("stored %+v", u)
	}
}
