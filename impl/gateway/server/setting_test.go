package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/cli"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/configuration.md's reference from the declarations")

// declared returns the settings of a fresh default Config with their file keys.
func declared(t *testing.T) (*Config, []setting, []string) {
	t.Helper()
	c := defaults()
	keys := fileKeys(&c)
	ss := c.settings()
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = keyOf(keys, s)
	}
	return &c, ss, names
}

// yamlLeaves lists the file keys of t that hold a value: every key but the
// sections (structs held by value).
func yamlLeaves(t reflect.Type, path string) []string {
	var out []string
	for name, i := range yamlFields(t) {
		f := t.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != durationType {
			out = append(out, yamlLeaves(f.Type, join(path, name))...)
			continue
		}
		out = append(out, join(path, name))
	}
	return out
}

// Every key the file accepts is declared by exactly one setting, every
// flag once, and every setting says what it sets.
func TestEverySettingDeclaredOnce(t *testing.T) {
	t.Parallel()
	_, ss, keys := declared(t)
	leaves := yamlLeaves(reflect.TypeOf(Config{}), "")
	slices.Sort(leaves)
	got := slices.Clone(keys)
	slices.Sort(got)
	if !slices.Equal(got, leaves) {
		t.Fatalf("declared keys differ from Config's file keys:\ndeclared %v\nfile     %v", got, leaves)
	}
	flags := map[string]bool{"config": true}
	for i, s := range ss {
		if s.usage == "" {
			t.Errorf("%s: no usage", keys[i])
		}
		if s.flag == "" {
			continue
		}
		if flags[s.flag] {
			t.Errorf("--%s declared twice", s.flag)
		}
		flags[s.flag] = true
		k := reflect.TypeOf(s.field).Elem().Kind()
		if (s.each != nil) != (k == reflect.Map || k == reflect.Slice) {
			t.Errorf("--%s: repeatable exactly when it fills a list or map", s.flag)
		}
	}
}

// The defaults and flag names as they were before the settings were
// declared in one place; a change here is a change operators see.
func TestSettingsDefaultsUnchanged(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"proxy_listen": ":8080", "admin_listen": "[::1]:9090", "database_url": "sqlite://proxy.db", "reconcile_interval": "1m0s",
		"alerts.evaluate_interval": "1m0s", "alerts.delivery_timeout": "10s", "alerts.retry_base": "30s",
		"replica_id": "", "log_level": "info", "log_format": "text",
		"admin.auth.providers": "[]", "admin.auth.break_glass": "<nil>", "admin.auth.oidc": "<nil>",
		"database.main_pool": "10", "database.scheduler_pool": "5", "database.replicas": "1",
		"retention.request_events": "720h0m0s", "retention.audit_log": "2160h0m0s", "retention.upstream_affinity": "168h0m0s",
		"retention.captured_exchanges": "168h0m0s",
		"price_catalog_url":            "", "job_intervals": "map[]", "scheduler_workers": "4", "scheduler_rescue_after": "5m0s",
		"oauth.client_id": "", "oauth.redirect_uri": "", "oauth.scopes": "", "oauth.lazy_refresh_timeout": "10s", "oauth.refresh_retry_base": "30s",
		"warmup.model": "", "warmup.fresh_for": "10m0s", "plugins.call_timeout": "0s", "plugins.memory_limit_pages": "0",
		"usage_stale_after": "15m0s", "migrate_contract": "false",
		"relay.upstream_header_timeout": "1m0s", "relay.upstream_nonstream_header_timeout": "10m0s", "relay.upstream_idle_timeout": "5m0s",
		"relay.max_body_bytes_in_flight": "268435456", "relay.max_attempts": "3", "relay.queue_length": "64", "relay.queue_max_wait": "30s",
		"listeners.read_header_timeout": "10s", "listeners.body_read_timeout": "1m0s", "listeners.idle_timeout": "2m0s",
		"listeners.max_header_bytes": "65536", "drain_timeout": "25s",
		"allow_private_upstreams": "false", "upstream_key_env_allow": "[]", "allow_host_cloud_credentials": "false",
		"tracing.enabled": "false", "tracing.endpoint": "http://localhost:4317", "tracing.protocol": "grpc", "tracing.sampler_ratio": "1",
		"tracing.propagate_traceparent": "true", "tracing.headers": "map[]", "debug.pprof": "false",
	}
	_, ss, keys := declared(t)
	for i, s := range ss {
		v := reflect.ValueOf(s.field).Elem()
		got := fmt.Sprint(v.Interface())
		if v.Kind() == reflect.Pointer && v.IsNil() {
			got = "<nil>"
		}
		if w, ok := want[keys[i]]; !ok {
			t.Errorf("%s: a new setting; add its default here", keys[i])
		} else if got != w {
			t.Errorf("%s: default %s, want %s", keys[i], got, w)
		}
	}
	wantFlags := []string{"admin-listen", "alerts-delivery-timeout", "alerts-evaluate-interval", "alerts-retry-base", "allow-host-cloud-credentials",
		"allow-private-upstreams", "body-read-timeout", "config", "database-url", "debug-pprof", "drain-timeout", "idle-timeout", "job-interval",
		"log-format", "log-level", "main-pool", "max-attempts", "max-body-bytes-in-flight", "migrate-contract", "oauth-client-id",
		"oauth-lazy-refresh-timeout", "oauth-redirect-uri", "oauth-refresh-retry-base", "plugin-call-timeout", "price-catalog-url", "proxy-listen",
		"queue-length", "queue-max-wait", "read-header-timeout", "reconcile-interval", "replica-id", "replicas", "scheduler-pool",
		"scheduler-rescue-after", "tracing-enabled", "tracing-endpoint", "tracing-header", "tracing-propagate-traceparent", "tracing-protocol",
		"tracing-sampler-ratio", "upstream-header-timeout", "upstream-idle-timeout", "upstream-key-env-allow", "upstream-nonstream-header-timeout",
		"warmup-model"}
	var path string
	c := defaults()
	var gotFlags []string
	newFlagSet(&c, &path).VisitAll(func(f *flag.Flag) { gotFlags = append(gotFlags, f.Name) })
	if !slices.Equal(gotFlags, wantFlags) {
		t.Errorf("flags %v\nwant  %v", gotFlags, wantFlags)
	}
}

// sample is the i-th test value of a scalar setting, as the file, the
// environment and a flag spell it: each differs from the default and from
// its neighbour (a bool alternates from the default's opposite).
func sample(def reflect.Value, i int) string {
	switch x := def.Interface().(type) {
	case string:
		return fmt.Sprintf("value-%d", i)
	case bool:
		return fmt.Sprint(x != (i%2 == 0))
	case float64:
		return fmt.Sprint(float64(i+1) / 8)
	case time.Duration:
		return fmt.Sprint(x + time.Duration(i+3)*time.Second)
	case int, int64, uint32:
		return fmt.Sprint(def.Convert(reflect.TypeOf(int64(0))).Int() + int64(i) + 3)
	}
	return ""
}

// fileFor writes a YAML file setting the dotted key to a plain scalar.
func fileFor(t *testing.T, key, value string) string {
	t.Helper()
	var b strings.Builder
	parts := strings.Split(key, ".")
	for i, p := range parts {
		b.WriteString(strings.Repeat("  ", i) + p + ":")
		if i == len(parts)-1 {
			b.WriteString(" " + value)
		}
		b.WriteString("\n")
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every scalar setting round-trips from the file and from its flag and
// environment variable into its field; the flag beats the environment,
// which beats the file.
func TestSettingsRoundTrip(t *testing.T) {
	t.Parallel()
	_, ss, keys := declared(t)
	var notScalar []string
	for i, s := range ss {
		key := keys[i]
		def := reflect.ValueOf(s.field).Elem()
		if sample(def, 0) == "" {
			notScalar = append(notScalar, key)
			continue
		}
		v := func(n int) string { return sample(def, n) }
		t.Run(key, func(t *testing.T) {
			got := func(args []string, envs map[string]string) string {
				t.Helper()
				c, envErrs, err := load(args, env(envs), io.Discard)
				if err != nil || len(envErrs) > 0 {
					t.Fatalf("%v %v: %v %v", args, envs, err, envErrs)
				}
				field := c.settings()[i].field // the same declaration, on the loaded Config
				return fmt.Sprint(reflect.ValueOf(field).Elem().Interface())
			}
			file := fileFor(t, key, v(0))
			if g := got([]string{"--config", file}, nil); g != v(0) {
				t.Errorf("file: %s, want %s", g, v(0))
			}
			if s.flag != "" {
				if g := got([]string{"--" + s.flag + "=" + v(0)}, nil); g != v(0) {
					t.Errorf("flag: %s, want %s", g, v(0))
				}
				if g := got([]string{"--config", file, "--" + s.flag + "=" + v(1)}, nil); g != v(1) {
					t.Errorf("flag over file: %s, want %s", g, v(1))
				}
			}
			if s.env != "" {
				if g := got([]string{"--config", file}, map[string]string{s.env: v(1)}); g != v(1) {
					t.Errorf("env over file: %s, want %s", g, v(1))
				}
				if g := got([]string{"--config", file, "--" + s.flag + "=" + v(2)}, map[string]string{s.env: v(1)}); g != v(2) {
					t.Errorf("flag over env: %s, want %s", g, v(2))
				}
			}
		})
	}
	// The settings that are lists, maps or optional sections: the
	// repeatable flags are covered below, the rest by their own tests.
	want := []string{"admin.auth.providers", "admin.auth.break_glass", "admin.auth.oidc", "upstream_key_env_allow", "job_intervals", "tracing.headers"}
	slices.Sort(want)
	slices.Sort(notScalar)
	if !slices.Equal(notScalar, want) {
		t.Errorf("settings without a scalar round trip %v, want %v", notScalar, want)
	}
}

// A repeatable flag adds to what the file lists.
func TestRepeatableFlagsAddToFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("upstream_key_env_allow: [FILE_KEY]\njob_intervals:\n  usage_rollup: 2m\ntracing:\n  headers:\n    A: file\n"), 0o600)
	c, _, err := load([]string{"--config", path, "--upstream-key-env-allow", "FLAG_A, FLAG_B", "--upstream-key-env-allow=FLAG_C",
		"--job-interval", "prune=3h", "--tracing-header", "B=flag"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.UpstreamKeyEnvAllow, []string{"FILE_KEY", "FLAG_A", "FLAG_B", "FLAG_C"}) {
		t.Errorf("upstream_key_env_allow %v", c.UpstreamKeyEnvAllow)
	}
	if len(c.JobIntervals) != 2 || c.JobIntervals["usage_rollup"] != 2*time.Minute || c.JobIntervals["prune"] != 3*time.Hour {
		t.Errorf("job_intervals %v", c.JobIntervals)
	}
	if len(c.Tracing.Headers) != 2 || c.Tracing.Headers["A"] != "file" || c.Tracing.Headers["B"] != "flag" {
		t.Errorf("tracing.headers %v", c.Tracing.Headers)
	}
	// The scratch parse that finds --config leaves the defaults alone.
	if d := defaults(); d.JobIntervals != nil || d.UpstreamKeyEnvAllow != nil || d.Tracing.Headers != nil {
		t.Errorf("defaults changed by a parse: %+v", d)
	}
}

// A flag value of the wrong type is refused as a usage error naming the
// flag, with nothing printed; a bad environment value names its key.
func TestBadFlagAndEnvValues(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--main-pool=many", "--max-body-bytes-in-flight=1.5", "--tracing-sampler-ratio=half", "--drain-timeout=25",
		"--migrate-contract=perhaps", "--job-interval=prune", "--tracing-header=novalue"} {
		var out strings.Builder
		_, err := ParseConfig([]string{arg}, env(nil), &out)
		var ue *cli.UsageError
		name, _, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "invalid") || !strings.Contains(err.Error(), name) || out.Len() != 0 {
			t.Errorf("%s: %v, printed %q", arg, err, out.String())
		}
	}
	_, err := ParseConfig(nil, env(map[string]string{"PROXY_DEBUG_PPROF": "yes please"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), `debug.pprof: PROXY_DEBUG_PPROF must be true or false, got "yes please"`) {
		t.Errorf("bad PROXY_DEBUG_PPROF: %v", err)
	}
}

// --help lists every flag with its usage.
func TestHelpListsEverySetting(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	if _, err := ParseConfig([]string{"--help"}, env(nil), &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	_, ss, _ := declared(t)
	for _, s := range ss {
		if s.flag != "" && (!strings.Contains(out.String(), "-"+s.flag) || !strings.Contains(out.String(), s.usage)) {
			t.Errorf("--help does not show --%s", s.flag)
		}
	}
}

const (
	refBegin = "<!-- BEGIN settings: generated from impl/gateway/server/configareas.go; go test ./impl/gateway/server -run TestConfigReference -args -update -->\n"
	refEnd   = "<!-- END settings -->\n"
)

// docs/configuration.md's reference is the declarations rendered; -update
// rewrites it.
func TestConfigReference(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", "..", "docs", "configuration.md")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	before, rest, ok1 := strings.Cut(doc, refBegin)
	_, after, ok2 := strings.Cut(rest, refEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s has no generated section between %q and %q", path, refBegin, refEnd)
	}
	want := before + refBegin + referenceTable() + "\n" + refEnd + after
	if *updateDocs {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if doc != want {
		t.Fatalf("%s is stale: run go test ./impl/gateway/server -run TestConfigReference -args -update", path)
	}
}

// Every check reports as it did before the settings were declared in one
// place: the same keys and the same sentences, all at once.
func TestValidationMessagesUnchanged(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte(`proxy_listen: nope
admin_listen: nope2
database_url: mysql://x
reconcile_interval: 1ms
alerts:
  evaluate_interval: 1ms
  delivery_timeout: 1h
  retry_base: 1ms
log_level: loud
log_format: xml
database:
  main_pool: 0
  scheduler_pool: 0
  replicas: 0
retention:
  request_events: 1m
  audit_log: 1m
  upstream_affinity: 1m
  captured_exchanges: 1m
job_intervals:
  nope: 1m
  prune: 1ms
scheduler_workers: 0
scheduler_rescue_after: 1ms
relay:
  upstream_header_timeout: 1ms
  upstream_nonstream_header_timeout: 1ms
  upstream_idle_timeout: 1ms
  max_body_bytes_in_flight: 1
  max_attempts: 0
  queue_length: -1
  queue_max_wait: 1ms
oauth:
  lazy_refresh_timeout: 1ms
  refresh_retry_base: 1ms
admin:
  auth:
    providers:
      - type: oidc
    oidc:
      issuer: x
listeners:
  read_header_timeout: 1ms
  body_read_timeout: 1ms
  idle_timeout: 1ms
  max_header_bytes: 1
drain_timeout: 2h
upstream_key_env_allow: [PROXY_MASTER_KEY, 1bad]
tracing:
  enabled: true
  protocol: thrift
  sampler_ratio: 2
  endpoint: nope
  headers:
    "a b": x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ParseConfig([]string{"--config", path}, env(map[string]string{"PROXY_DEBUG_PPROF": "maybe"}), io.Discard)
	if err == nil {
		t.Fatal("no error")
	}
	got := strings.Split(err.Error(), "\n")
	slices.Sort(got)
	want := []string{
		`admin.auth.oidc.client_id: required`,
		`admin.auth.oidc.client_secret_env: required (the variable holding the client secret)`,
		`admin.auth.oidc.issuer: required, an http(s) URL`,
		`admin.auth.oidc.redirect_url: required, the admin listener's URL ending in /auth/callback`,
		`admin.auth.oidc.roles: map at least one groups value to a role`,
		`admin.auth.providers[0].token_env: required`,
		`admin.auth.providers[0].type: unknown provider type "oidc" (supported: static_token)`,
		`admin_listen: "nope2" is not host:port`,
		`alerts.delivery_timeout: must be 100ms to 5m, got 1h0m0s`,
		`alerts.evaluate_interval: must be at least 100ms, got 1ms`,
		`alerts.retry_base: must be 10ms to 10m, got 1ms`,
		`database.main_pool: must be at least 1`,
		`database.replicas: must be at least 1`,
		`database.scheduler_pool: must be at least 1`,
		`database_url: "mysql://x": want sqlite://PATH or postgres://…`,
		`debug.pprof: PROXY_DEBUG_PPROF must be true or false, got "maybe"`,
		`drain_timeout: must be 0-1h, got 2h0m0s`,
		`job_intervals.nope: unknown job type`,
		`job_intervals.prune: must be at least 1s`,
		`listeners.body_read_timeout: must be at least 100ms, got 1ms`,
		`listeners.idle_timeout: must be at least 100ms, got 1ms`,
		`listeners.max_header_bytes: must be 4096-1048576, got 1`,
		`listeners.read_header_timeout: must be at least 100ms, got 1ms`,
		`log_format: must be text or json, got "xml"`,
		`log_level: must be debug, info, warn or error, got "loud"`,
		`oauth.lazy_refresh_timeout: must be at least 100ms`,
		`oauth.refresh_retry_base: must be at least 10ms`,
		`proxy_listen: "nope" is not host:port`,
		`reconcile_interval: must be at least 1s, got 1ms`,
		`relay.max_attempts: must be 1 to 16, got 0`,
		`relay.max_body_bytes_in_flight: must be at least 33554432 (one request body of the largest size), got 1`,
		`relay.queue_length: must be 0 to 10000, got -1`,
		`relay.queue_max_wait: must be 100ms to 10m, got 1ms`,
		`relay.upstream_header_timeout: must be at least 100ms, got 1ms`,
		`relay.upstream_idle_timeout: must be at least 100ms, got 1ms`,
		`relay.upstream_nonstream_header_timeout: must be at least 100ms, got 1ms`,
		`retention.audit_log: must be at least 1h, got 1m0s`,
		`retention.captured_exchanges: must be at least 1h, got 1m0s`,
		`retention.request_events: must be at least 1h, got 1m0s`,
		`retention.upstream_affinity: must be at least 1h, got 1m0s`,
		`scheduler_rescue_after: must be at least 1s`,
		`scheduler_workers: must be at least 1`,
		`tracing.endpoint: must be an http:// or https:// URL with a host, got "nope"`,
		`tracing.headers: "a b" is not a header name`,
		`tracing.protocol: must be grpc or http, got "thrift"`,
		`tracing.sampler_ratio: must be 0 to 1, got 2`,
		`upstream_key_env_allow[0]: PROXY_MASTER_KEY is one of the proxy's own variables and cannot be allowed`,
		`upstream_key_env_allow[1]: not an environment variable name`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("messages changed:\ngot  %q\nwant %q", got, want)
	}
}
