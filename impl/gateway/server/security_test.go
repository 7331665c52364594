package server

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The security flags: private upstreams are off by default, the allow-list
// binds from flags and the file, and never admits the proxy's own
// variables.
func TestSecurityFlags(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.AllowPrivateUpstreams || len(c.UpstreamKeyEnvAllow) != 0 {
		t.Fatalf("defaults: %+v", c)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	os.WriteFile(path, []byte("upstream_key_env_allow: [FROM_FILE]\n"), 0o600)
	c, err = ParseConfig([]string{"--config", path, "--allow-private-upstreams", "--upstream-key-env-allow", "A_KEY, B_KEY", "--upstream-key-env-allow=PROXY_UPSTREAM_KEY_C"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.AllowPrivateUpstreams || strings.Join(c.UpstreamKeyEnvAllow, ",") != "FROM_FILE,A_KEY,B_KEY,PROXY_UPSTREAM_KEY_C" {
		t.Fatalf("%+v %v", c.AllowPrivateUpstreams, c.UpstreamKeyEnvAllow)
	}
	os.WriteFile(path, []byte("admin:\n  auth:\n    providers:\n      - type: static_token\n        token_env: MY_TOKEN\n"), 0o600)
	_, err = ParseConfig([]string{"--config", path, "--upstream-key-env-allow", "PROXY_MASTER_KEY,MY_TOKEN,sk-ant-x"}, env(nil), io.Discard)
	if err == nil {
		t.Fatal("the proxy's own variables were allowed")
	}
	for _, want := range []string{"upstream_key_env_allow[0]: PROXY_MASTER_KEY", "upstream_key_env_allow[1]: MY_TOKEN", "upstream_key_env_allow[2]: not an environment variable name"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "sk-ant-x") {
		t.Errorf("the refusal repeats a value that may be a secret: %v", err)
	}
}
