package admin_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/apikey"
)

func hashOf(s string) [32]byte { return apikey.Hash(s) }

var keyShape = regexp.MustCompile(`^sk-px-[A-Za-z0-9_-]{43}$`)

// P-KEY-1: issuing a key returns the plaintext exactly once; only its
// SHA-256 is stored, and the proxy path knows the key before the response.
func TestIssueKeyReturnsPlaintextOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	pid := e.principal("p")["id"].(string)
	r := e.do("POST", "/admin/v1/principals/"+pid+"/keys", map[string]any{"name": "ci"})
	if r.status != 201 {
		t.Fatalf("issue: %d %s", r.status, r.body)
	}
	k := r.json(t)
	plain, _ := k["key"].(string)
	if !keyShape.MatchString(plain) || !apikey.WellFormed(plain) || k["prefix"] != plain[:12] || k["name"] != "ci" ||
		k["principal_id"] != pid || k["revoked_at_unix_secs"] != nil || k["created_at_unix_secs"] != float64(now.Unix()) {
		t.Fatalf("issued key %v", k)
	}
	kid := k["id"].(string)
	if r.header.Get("Location") != "/admin/v1/principals/"+pid+"/keys/"+kid || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers %v", r.header)
	}
	// The snapshot has the key at once.
	if sk := e.rt.Current().KeyByHash(hashOf(plain)); sk == nil || sk.ID != kid || sk.Principal.ID != pid {
		t.Fatalf("snapshot key %+v", sk)
	}
	// Stored: the hash, never the plaintext.
	ks, err := e.st.ListKeys(context.Background(), pid)
	h := hashOf(plain)
	if err != nil || len(ks) != 1 || !bytes.Equal(ks[0].Hash, h[:]) || ks[0].Prefix != plain[:12] {
		t.Fatalf("stored keys %+v, %v", ks, err)
	}
	if bytes.Contains(e.dbBytes(), []byte(plain)) || bytes.Contains(e.dbBytes(), []byte(plain[12:])) {
		t.Fatal("the plaintext key is in the database")
	}
	// Nothing shows the plaintext again.
	for _, path := range []string{"/admin/v1/principals/" + pid + "/keys", "/admin/v1/export", "/admin/v1/principals/" + pid, "/admin/v1/principals"} {
		body := e.do("GET", path, nil).body
		if bytes.Contains(body, []byte(plain[12:])) || bytes.Contains(body, []byte(`"key"`)) {
			t.Fatalf("%s shows the key: %s", path, body)
		}
	}
	l := e.do("GET", "/admin/v1/principals/"+pid+"/keys", nil).list(t)
	if len(l) != 1 || l[0].(map[string]any)["id"] != kid || l[0].(map[string]any)["prefix"] != plain[:12] {
		t.Fatalf("listing %v", l)
	}
	// Every key is new; a body is optional.
	for i := 0; i < 3; i++ {
		r := e.do("POST", "/admin/v1/principals/"+pid+"/keys", nil)
		if r.status != 201 || r.json(t)["key"] == plain || r.json(t)["name"] != "" {
			t.Fatalf("issue without a body: %d %s", r.status, r.body)
		}
	}
	if r := e.do("POST", "/admin/v1/principals/"+pid+"/keys", "{}"); r.status != 201 {
		t.Fatalf("issue with {}: %d %s", r.status, r.body)
	}
	e.unchanged("refused issues", func() {
		wantErr(t, e.do("POST", "/admin/v1/principals/pr_nope/keys", nil), 404, "unknown_principal")
		wantErr(t, e.do("POST", "/admin/v1/principals/"+pid+"/keys", map[string]any{"name": strings.Repeat("n", 129)}), 400, "invalid_request")
		wantErr(t, e.do("POST", "/admin/v1/principals/"+pid+"/keys", map[string]any{"principal_id": "x"}), 400, "invalid_request")
		wantErr(t, e.do("POST", "/admin/v1/principals/"+pid+"/keys", `{"name":"x"}`, "Content-Type", "text/plain"), 415, "unsupported_media_type")
	})
	wantErr(t, e.do("GET", "/admin/v1/principals/pr_nope/keys", nil), 404, "unknown_principal")
}

// A revoked key stops working on the proxy path at once.
func TestRevokeKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	pid := e.principal("p")["id"].(string)
	other := e.principal("q")["id"].(string)
	k := e.key(pid)
	kid, plain := k["id"].(string), k["key"].(string)
	e.unchanged("refused revokes", func() {
		wantErr(t, e.do("DELETE", "/admin/v1/principals/"+pid+"/keys/key_nope", nil), 404, "key_not_found")
		// Another principal's key is not found under this one.
		wantErr(t, e.do("DELETE", "/admin/v1/principals/"+other+"/keys/"+kid, nil), 404, "key_not_found")
		wantErr(t, e.do("DELETE", "/admin/v1/principals/pr_nope/keys/"+kid, nil), 404, "unknown_principal")
	})
	r := e.do("DELETE", "/admin/v1/principals/"+pid+"/keys/"+kid, nil)
	rv := r.json(t)
	if r.status != 200 || rv["revoked_at_unix_secs"] != float64(now.Unix()) || rv["id"] != kid || rv["key"] != nil {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if e.rt.Current().KeyByHash(hashOf(plain)) != nil {
		t.Fatal("revoked key still in the snapshot")
	}
	// Revoking twice returns the record again; the listing keeps it.
	if r := e.do("DELETE", "/admin/v1/principals/"+pid+"/keys/"+kid, nil); r.status != 200 || r.json(t)["revoked_at_unix_secs"] == nil {
		t.Fatalf("second revoke: %d %s", r.status, r.body)
	}
	if l := e.do("GET", "/admin/v1/principals/"+pid+"/keys", nil).list(t); len(l) != 1 || l[0].(map[string]any)["revoked_at_unix_secs"] == nil {
		t.Fatalf("listing %v", l)
	}
}

// P-API-3 (shape), P-UP-2, P-KEY-1: the export is complete and carries no
// secret: no key, key hash, credential or ciphertext in any encoding.
func TestExportHasNoSecrets(t *testing.T) {
	t.Parallel()
	e := setup(t)
	uid := e.upstream("u")["id"].(string)
	envUp := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "env", "kind": "vendor_api_key", "base_url": "https://api.example", "api_key_env": "ANTHROPIC_KEY"}).json(t)["id"].(string)
	pid := e.principal("p")["id"].(string)
	k := e.key(pid)
	revoked := e.key(pid)
	e.do("DELETE", "/admin/v1/principals/"+pid+"/keys/"+revoked["id"].(string), nil)
	r := e.do("GET", "/admin/v1/export", nil)
	if r.status != 200 {
		t.Fatalf("export: %d %s", r.status, r.body)
	}
	var secrets []string
	for _, key := range []map[string]any{k, revoked} {
		plain := key["key"].(string)
		h := hashOf(plain)
		secrets = append(secrets, plain, plain[12:], hex.EncodeToString(h[:]), base64.StdEncoding.EncodeToString(h[:]), base64.RawURLEncoding.EncodeToString(h[:]))
	}
	secrets = append(secrets, "sk-ant-value-u", serverEnv["ANTHROPIC_KEY"], "ANTHROPIC_KEY")
	for _, id := range []string{uid, envUp} {
		u, err := e.st.GetUpstream(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, base64.StdEncoding.EncodeToString(u.Credential), hex.EncodeToString(u.Credential), string(u.Credential[len(u.Credential)-16:]))
	}
	for _, s := range secrets {
		if bytes.Contains(r.body, []byte(s)) {
			t.Fatalf("the export contains a secret (%.8s…): %s", s, r.body)
		}
	}
	ex := r.json(t)
	if ex["exported_at_unix_secs"] != float64(now.Unix()) || len(ex["upstreams"].([]any)) != 2 {
		t.Fatalf("export %s", r.body)
	}
	gen, _ := e.st.ConfigGeneration(context.Background())
	if ex["config_generation"] != float64(gen) {
		t.Fatalf("config_generation %v, want %d", ex["config_generation"], gen)
	}
	ps := ex["principals"].([]any)
	p := ps[0].(map[string]any)
	keys := p["keys"].([]any)
	chain := p["plugin_chain"].([]any)
	if len(ps) != 1 || p["id"] != pid || len(keys) != 2 || len(chain) != 1 || chain[0].(map[string]any)["builtin"] != "subscription_preference" {
		t.Fatalf("export principals %v", ps)
	}
}
