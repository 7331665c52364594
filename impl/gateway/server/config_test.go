package server

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/cli"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// P-LISTEN-1, P-LISTEN-2, P-RUNTIME-4: the defaults of the seed.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.ProxyListen != ":8080" || c.AdminListen != "[::1]:9090" || c.DatabaseURL != "sqlite://proxy.db" || c.ReconcileInterval != 60*time.Second {
		t.Fatalf("defaults %+v", c)
	}
}

func TestConfigFileFlagsAndEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	os.WriteFile(path, []byte("proxy_listen: 127.0.0.1:1\nadmin:\n  auth:\n    providers:\n      - type: static_token\n        token_env: MY_TOKEN\n"), 0o600)
	c, err := ParseConfig([]string{"--config", path, "--admin-listen", "127.0.0.1:2"}, env(map[string]string{"PROXY_DATABASE_URL": "postgres://u:pw@h/db"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.ProxyListen != "127.0.0.1:1" || c.AdminListen != "127.0.0.1:2" || c.DatabaseURL != "postgres://u:pw@h/db" {
		t.Fatalf("%+v", c)
	}
	if len(c.Admin.Auth.Providers) != 1 || c.Admin.Auth.Providers[0].TokenEnv != "MY_TOKEN" {
		t.Fatalf("providers %+v", c.Admin.Auth.Providers)
	}
}

// Validation reports every bad key at once, each with its path.
func TestConfigReportsEveryError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	os.WriteFile(path, []byte("admin:\n  auth:\n    providers:\n      - type: oidc\n"), 0o600)
	_, err := ParseConfig([]string{"--config", path, "--proxy-listen", "nope", "--database-url", "mysql://x", "--log-level", "loud", "--reconcile-interval", "1ms"}, env(nil), io.Discard)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"proxy_listen", "database_url", "log_level", "reconcile_interval", "admin.auth.providers[0].type", "admin.auth.providers[0].token_env"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
	os.WriteFile(path, []byte("proxy_listn: :1\n"), 0o600)
	if _, err := ParseConfig([]string{"--config", path}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "proxy_listn") {
		t.Fatalf("unknown key not refused: %v", err)
	}
	if _, err := ParseConfig([]string{"--proxy-listen", "127.0.0.1:5", "--admin-listen", "127.0.0.1:5"}, env(nil), io.Discard); err == nil {
		t.Fatal("same address for both listeners accepted")
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	if got := redactURL("postgres://user:secret@host:5432/db"); strings.Contains(got, "secret") {
		t.Fatalf("password shown: %s", got)
	}
	if _, err := ParseDatabaseURL("mysql://user:secret@h/db"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("err %v", err)
	}
}

// P-LIM-1: (main_pool + scheduler_pool) * replicas <= 0.7 * max_connections.
func TestCheckBudget(t *testing.T) {
	t.Parallel()
	cases := []struct {
		main, sched, replicas, max int
		ok                         bool
	}{
		{10, 5, 1, 100, true},
		{10, 4, 5, 100, true},   // 70 <= 70
		{10, 5, 5, 100, false},  // 75 > 70
		{20, 15, 2, 100, true},  // 70
		{20, 16, 2, 100, false}, // 72
		{1, 1, 1, 2, false},     // 2 > 1.4
	}
	for _, c := range cases {
		err := CheckBudget(c.main, c.sched, c.replicas, c.max)
		if (err == nil) != c.ok {
			t.Errorf("%+v: err=%v", c, err)
		}
		if err != nil && !strings.Contains(err.Error(), "scheduler_pool") {
			t.Errorf("message does not say what to reduce: %v", err)
		}
	}
}

// Relay area: the proxy path's deadlines and body cap have documented
// defaults, come from the file or flags (flags win) and are validated.
func TestRelayConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Relay != defaultRelayConfig() || c.Relay.UpstreamHeaderTimeout != time.Minute || c.Relay.MaxBodyBytesInFlight != 256<<20 {
		t.Fatalf("defaults %+v", c.Relay)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("relay:\n  upstream_header_timeout: 30s\n  upstream_idle_timeout: 2m\n  max_body_bytes_in_flight: 67108864\n  max_attempts: 5\n"), 0o600)
	c, err = ParseConfig([]string{"--config", path, "--upstream-idle-timeout", "90s"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Relay.UpstreamHeaderTimeout != 30*time.Second || c.Relay.UpstreamIdleTimeout != 90*time.Second ||
		c.Relay.MaxBodyBytesInFlight != 64<<20 || c.Relay.MaxAttempts != 5 ||
		c.Relay.UpstreamNonStreamHeaderTimeout != 10*time.Minute {
		t.Fatalf("%+v", c.Relay)
	}
	_, err = ParseConfig([]string{"--upstream-header-timeout", "0s", "--max-body-bytes-in-flight", "1000", "--max-attempts", "0"}, env(nil), io.Discard)
	for _, want := range []string{"relay.upstream_header_timeout", "relay.max_body_bytes_in_flight", "relay.max_attempts"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}

// Listener bounds and the drain: defaults, flags over the file, and each
// bad value reported with its key.
func TestConfigListenersAndDrain(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.DrainTimeout != 25*time.Second || c.Listeners.ReadHeaderTimeout != 10*time.Second || c.Listeners.BodyReadTimeout != time.Minute ||
		c.Listeners.IdleTimeout != 2*time.Minute || c.Listeners.MaxHeaderBytes != 64<<10 {
		t.Fatalf("defaults %+v drain %s", c.Listeners, c.DrainTimeout)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("drain_timeout: 40s\nlisteners:\n  body_read_timeout: 5s\n  max_header_bytes: 8192\n"), 0o600)
	c, err = ParseConfig([]string{"--config", path, "--drain-timeout", "55s", "--idle-timeout", "30s", "--read-header-timeout", "2s"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.DrainTimeout != 55*time.Second || c.Listeners.BodyReadTimeout != 5*time.Second || c.Listeners.MaxHeaderBytes != 8192 ||
		c.Listeners.IdleTimeout != 30*time.Second || c.Listeners.ReadHeaderTimeout != 2*time.Second {
		t.Fatalf("parsed %+v drain %s", c.Listeners, c.DrainTimeout)
	}
	_, err = ParseConfig([]string{"--drain-timeout", "-1s", "--body-read-timeout", "1ms", "--idle-timeout", "0s"}, env(nil), io.Discard)
	for _, key := range []string{"drain_timeout", "listeners.body_read_timeout", "listeners.idle_timeout"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("error %v does not name %s", err, key)
		}
	}
}

// The database URL is parsed once, by validation, and the configuration
// carries the result: driver, connection string and the files beside an
// embedded database (none on PostgreSQL, whose replicas share no disk).
func TestDatabaseURLParsedOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	c, err := ParseConfig([]string{"--database-url", "sqlite://" + dir + "/p.db"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.db.Driver != SQLite || c.db.DSN != dir+"/p.db" {
		t.Fatalf("sqlite: %+v", c.db)
	}
	if p, ok := c.db.fileBeside(".key"); !ok || p != dir+"/p.db.key" {
		t.Fatalf("key file %q %v", p, ok)
	}
	pg := "postgres://u:secret@db:5432/proxy"
	c, err = ParseConfig([]string{"--database-url", pg}, env(map[string]string{"PROXY_DATABASE_URL": "sqlite://ignored.db"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.db.Driver != Postgres || c.db.DSN != pg {
		t.Fatalf("postgres: %+v", c.db)
	}
	if _, ok := c.db.fileBeside(".key"); ok {
		t.Fatal("PostgreSQL offered a file beside the database")
	}
	if s := c.db.String(); strings.Contains(s, "secret") {
		t.Fatalf("printed form shows the password: %s", s)
	}
	// Without files beside it, the master key and the admin token must come
	// from the environment.
	if _, _, err := masterKey(c.db, env(nil)); err == nil || !strings.Contains(err.Error(), "PROXY_MASTER_KEY is required") {
		t.Fatalf("master key on PostgreSQL: %v", err)
	}
	if _, _, err := adminAuth(c, env(nil)); err == nil || !strings.Contains(err.Error(), "no admin token") {
		t.Fatalf("admin token on PostgreSQL: %v", err)
	}
}

// A SQLite path in a directory that does not exist is refused, naming the
// key and the directory, and nothing is created.
func TestSQLiteMissingDirectoryRefused(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing", "dir")
	_, err := ParseConfig([]string{"--database-url", "sqlite://" + missing + "/x.db"}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "database_url") || !strings.Contains(err.Error(), missing) {
		t.Fatalf("missing directory: %v", err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("the directory was created: %v", err)
	}
	if _, err := ParseConfig([]string{"--database-url", "sqlite://" + filepath.Join(t.TempDir(), "x.db")}, env(nil), io.Discard); err != nil {
		t.Fatalf("existing directory refused: %v", err)
	}
}

// A bad flag is a UsageError with one message and no flag dump; --help
// prints the usage with subcommands and environment variables.
func TestConfigUsage(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	_, err := ParseConfig([]string{"--no-such-flag"}, env(nil), &out)
	var ue *cli.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "no-such-flag") || out.Len() != 0 {
		t.Fatalf("bad flag: %v, printed %q", err, out.String())
	}
	if _, err := ParseConfig([]string{"stray"}, env(nil), &out); !errors.As(err, &ue) {
		t.Fatalf("stray argument: %v", err)
	}
	_, err = ParseConfig([]string{"--help"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "PROXY_ADMIN_TOKEN") || !strings.Contains(out.String(), "storage rotate-master-key") {
		t.Fatalf("help: %v\n%s", err, out.String())
	}
}

// Errors in the file name the YAML key, not a Go type, and every bad key
// of the file is reported together; the good keys still bind.
func TestConfigFileErrorsNameKeys(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte(`database_url: [not, a, string]
plugins:
  call_timeout: x
  memory_limit_pages: -3
listeners:
  idle_timeout: 5 minutes
  max_header_bytes: lots
job_intervals:
  usage_rollup: soon
admin:
  auth:
    providers:
      - type: static_token
        token_envv: T
allow_private_upstreams: maybe
retention: 7d
proxy_listen: 127.0.0.1:7
`), 0o600)
	_, err := ParseConfig([]string{"--config", path}, env(nil), io.Discard)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{
		`database_url: want a string, got a list`,
		`plugins.call_timeout: invalid duration "x"`,
		`plugins.memory_limit_pages: want a non-negative integer, got "-3"`,
		`listeners.idle_timeout: invalid duration "5 minutes"`,
		`listeners.max_header_bytes: want an integer, got "lots"`,
		`job_intervals.usage_rollup: invalid duration "soon"`,
		`admin.auth.providers[0].token_envv: unknown key`,
		`allow_private_upstreams: want true or false, got "maybe"`,
		`retention: want a mapping of keys, got "7d"`,
	} {
		if !strings.Contains(msg, path+": "+want) {
			t.Errorf("error does not say %q:\n%s", want, msg)
		}
	}
	for _, goType := range []string{"time.Duration", "!!str", "unmarshal"} {
		if strings.Contains(msg, goType) {
			t.Errorf("error speaks of %s:\n%s", goType, msg)
		}
	}
	if n := strings.Count(msg, "\n") + 1; n != 9 {
		t.Errorf("%d errors, want 9:\n%s", n, msg)
	}

	// A valid file of every shape binds as before.
	os.WriteFile(path, []byte("plugins:\n  call_timeout: 80ms\njob_intervals:\n  usage_rollup: 2m\nupstream_key_env_allow: [A_KEY]\nretention:\n  request_events: 24h\n"), 0o600)
	c, err := ParseConfig([]string{"--config", path}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Plugins.CallTimeout != 80*time.Millisecond || c.JobIntervals["usage_rollup"] != 2*time.Minute || len(c.UpstreamKeyEnvAllow) != 1 || c.Retention.RequestEvents != 24*time.Hour {
		t.Fatalf("bound %+v", c)
	}
}

// admin.auth.break_glass: false turns the static admin token off: no
// provider, no token file written, even with PROXY_ADMIN_TOKEN set.
func TestBreakGlassTurnedOff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(cfgFile, []byte("admin:\n  auth:\n    break_glass: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig([]string{"--config", cfgFile, "--database-url", "sqlite://" + dir + "/p.db"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	auth, note, err := adminAuth(c, env(map[string]string{"PROXY_ADMIN_TOKEN": "still-set"}))
	if err != nil || len(auth) != 0 || !strings.Contains(note, "off") {
		t.Fatalf("break-glass off: %d providers, %q, %v", len(auth), note, err)
	}
	if _, err := os.Stat(dir + "/p.db.admin-token"); !os.IsNotExist(err) {
		t.Fatalf("a token file was written: %v", err)
	}
	// By default the token stays.
	c, _ = ParseConfig([]string{"--database-url", "sqlite://" + dir + "/p.db"}, env(nil), io.Discard)
	if auth, _, err := adminAuth(c, env(map[string]string{"PROXY_ADMIN_TOKEN": "t"})); err != nil || len(auth) != 1 {
		t.Fatalf("default: %d providers, %v", len(auth), err)
	}
}

// admin.auth.oidc is validated with the rest: every bad key named, its
// client secret variable reserved from api_key_env.
func TestOIDCConfigValidated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "proxy.yaml")
	yaml := "upstream_key_env_allow: [IDP_SECRET]\nadmin:\n  auth:\n    oidc:\n      issuer: idp.example\n      client_secret_env: IDP_SECRET\n      redirect_url: https://admin.example/callback\n      roles: {ops: root}\n"
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ParseConfig([]string{"--config", cfgFile, "--database-url", "sqlite://" + dir + "/p.db"}, env(nil), io.Discard)
	for _, want := range []string{"admin.auth.oidc.issuer", "admin.auth.oidc.client_id", "admin.auth.oidc.redirect_url", "admin.auth.oidc.roles.ops", "upstream_key_env_allow[0]: IDP_SECRET holds the OIDC client secret"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}

// Alerts: defaults, the file and flags (flags win), and every bad value
// named by its key.
func TestConfigAlerts(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Alerts.EvaluateInterval != time.Minute || c.Alerts.DeliveryTimeout != 10*time.Second || c.Alerts.RetryBase != 30*time.Second {
		t.Fatalf("alert defaults %+v", c.Alerts)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("alerts:\n  evaluate_interval: 30s\n  delivery_timeout: 5s\n"), 0o600)
	c, err = ParseConfig([]string{"--config", path, "--alerts-delivery-timeout", "2s", "--alerts-retry-base", "1s"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Alerts.EvaluateInterval != 30*time.Second || c.Alerts.DeliveryTimeout != 2*time.Second || c.Alerts.RetryBase != time.Second {
		t.Fatalf("alerts from file and flags %+v", c.Alerts)
	}
	_, err = ParseConfig([]string{"--alerts-evaluate-interval", "1ms", "--alerts-delivery-timeout", "1h", "--alerts-retry-base", "1ms"}, env(nil), io.Discard)
	for _, want := range []string{"alerts.evaluate_interval", "alerts.delivery_timeout", "alerts.retry_base"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}

// Tracing is off by default; the file's section binds, flags win over it,
// and each bad value is reported with its key.
func TestTracingConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Tracing.Enabled || c.Tracing.Protocol != "grpc" || c.Tracing.SamplerRatio != 1 || !c.Tracing.PropagateTraceparent {
		t.Fatalf("defaults %+v", c.Tracing)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("tracing:\n  enabled: true\n  endpoint: https://otel.example:4318\n  protocol: http\n  sampler_ratio: 0.25\n  propagate_traceparent: false\n  headers:\n    Authorization: Bearer file\n"), 0o600)
	c, err = ParseConfig([]string{"--config", path, "--tracing-sampler-ratio", "0.01", "--tracing-header", "X-Team=a=b"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Tracing
	if !tc.Enabled || tc.Endpoint != "https://otel.example:4318" || tc.Protocol != "http" || tc.SamplerRatio != 0.01 ||
		tc.PropagateTraceparent || tc.Headers["Authorization"] != "Bearer file" || tc.Headers["X-Team"] != "a=b" {
		t.Fatalf("%+v", tc)
	}
	_, err = ParseConfig([]string{"--tracing-enabled", "--tracing-protocol", "thrift", "--tracing-sampler-ratio", "2", "--tracing-endpoint", "collector:4317"}, env(nil), io.Discard)
	for _, want := range []string{"tracing.protocol", "tracing.sampler_ratio", "tracing.endpoint"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}
