package server

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/jobs"
	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
)

// areas declares every setting of the proxy, each once, grouped by
// concern with the check of its values. docs/configuration.md's reference
// is generated from it (TestConfigReference).
var areas = []area{
	{"Listeners and shutdown", listenerSettings, validateListeners},
	{"Database", databaseSettings, validateDatabase},
	{"Replica and logs", replicaSettings, validateReplica},
	{"Security and admin sign-in", securitySettings, validateSecurityArea},
	{"Routing and queue", relaySettings, validateRelay},
	{"Scheduler and jobs", schedulerSettings, validateScheduler},
	{"Retention", retentionSettings, validateRetention},
	{"OAuth, warm-up and usage", oauthSettings, validateOAuth},
	{"Plugins", pluginSettings, func(*Config, *problems) {}},
	{"Tracing", tracingSettings, func(c *Config, p *problems) { c.Tracing.Validate("tracing", p.bad) }},
	{"Alerts", alertSettings, validateAlerts},
	{"Diagnostics", debugSettings, func(*Config, *problems) {}},
}

func listenerSettings(c *Config) []setting {
	return []setting{
		opt(&c.ProxyListen, ":8080", "proxy-listen", "proxy listener address (serves /v1/messages)"),
		opt(&c.AdminListen, "[::1]:9090", "admin-listen", "admin listener address (serves /admin/v1, the dashboard and /metrics)"),
		opt(&c.Listeners.ReadHeaderTimeout, 10*time.Second, "read-header-timeout", "close a connection whose request headers take longer (every listener)"),
		opt(&c.Listeners.BodyReadTimeout, 60*time.Second, "body-read-timeout", "close a connection whose request body takes longer to arrive (every listener; the response stream is not bounded by it)"),
		opt(&c.Listeners.IdleTimeout, 120*time.Second, "idle-timeout", "close a keep-alive connection idle this long (every listener)"),
		opt(&c.Listeners.MaxHeaderBytes, 64<<10, "", "bytes of one request's headers; past them the answer is 431"),
		// The chart grants 30 s (terminationGracePeriodSeconds); 5 s of it
		// go to the preStop pause before SIGTERM arrives.
		opt(&c.DrainTimeout, 25*time.Second, "drain-timeout", "on SIGTERM, how long in-flight requests may run before they are cut (keep below the pod's grace period)"),
	}
}

func validateListeners(c *Config, p *problems) {
	for key, addr := range map[string]string{"proxy_listen": c.ProxyListen, "admin_listen": c.AdminListen} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			p.bad(key, "%q is not host:port", addr)
		}
	}
	if c.ProxyListen == c.AdminListen {
		p.bad("admin_listen", "must differ from proxy_listen: the admin and proxy listeners are separate")
	}
	for key, d := range map[string]time.Duration{"listeners.read_header_timeout": c.Listeners.ReadHeaderTimeout,
		"listeners.body_read_timeout": c.Listeners.BodyReadTimeout, "listeners.idle_timeout": c.Listeners.IdleTimeout} {
		if d < 100*time.Millisecond {
			p.bad(key, "must be at least 100ms, got %s", d)
		}
	}
	if c.Listeners.MaxHeaderBytes < 4<<10 || c.Listeners.MaxHeaderBytes > 1<<20 {
		p.bad("listeners.max_header_bytes", "must be 4096-1048576, got %d", c.Listeners.MaxHeaderBytes)
	}
	if c.DrainTimeout < 0 || c.DrainTimeout > time.Hour {
		p.bad("drain_timeout", "must be 0-1h, got %s", c.DrainTimeout)
	}
}

func databaseSettings(c *Config) []setting {
	return []setting{
		opt(&c.DatabaseURL, "sqlite://proxy.db", "database-url", "sqlite://PATH or postgres://… (the embedded SQLite by default); env PROXY_DATABASE_URL").withEnv("PROXY_DATABASE_URL"),
		opt(&c.Database.MainPool, 10, "main-pool", "PostgreSQL main connection pool size"),
		opt(&c.Database.SchedulerPool, 5, "scheduler-pool", "PostgreSQL scheduler connection pool size"),
		opt(&c.Database.Replicas, 1, "replicas", "number of replicas sharing the database (connection budget check)"),
		opt(&c.MigrateContract, false, "migrate-contract", "also apply contract-phase migrations (drops); see docs/operations.md"),
		opt(&c.ReconcileInterval, 60*time.Second, "reconcile-interval", "how often the reconciler polls the database for missed changes"),
	}
}

func validateDatabase(c *Config, p *problems) {
	if db, err := ParseDatabaseURL(c.DatabaseURL); err != nil {
		p.bad("database_url", "%v", err)
	} else {
		c.db = db
		// A typo in the path must not silently start an empty database in a
		// new directory: the directory is the operator's to create.
		if db.Driver == SQLite && db.DSN != ":memory:" {
			if dir := filepath.Dir(db.DSN); !isDir(dir) {
				p.bad("database_url", "the directory %s of the SQLite database does not exist; create it first (the proxy creates the file, not its directory)", dir)
			}
		}
	}
	if c.Database.MainPool < 1 {
		p.bad("database.main_pool", "must be at least 1")
	}
	if c.Database.SchedulerPool < 1 {
		p.bad("database.scheduler_pool", "must be at least 1")
	}
	if c.Database.Replicas < 1 {
		p.bad("database.replicas", "must be at least 1")
	}
	if c.ReconcileInterval < time.Second {
		p.bad("reconcile_interval", "must be at least 1s, got %s", c.ReconcileInterval)
	}
}

func replicaSettings(c *Config) []setting {
	return []setting{
		opt(&c.ReplicaID, "", "replica-id", "name of this replica (default: host name)").showing("host name"),
		opt(&c.LogLevel, "info", "log-level", "debug, info, warn or error"),
		opt(&c.LogFormat, "text", "log-format", "text or json"),
	}
}

func validateReplica(c *Config, p *problems) {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		p.bad("log_level", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		p.bad("log_format", "must be text or json, got %q", c.LogFormat)
	}
}

func securitySettings(c *Config) []setting {
	return []setting{
		opt(&c.AllowPrivateUpstreams, false, "allow-private-upstreams",
			"let upstreams (base_url, oauth_token_url) be loopback or private addresses: RFC 1918, fc00::/7, 100.64.0.0/10 (simulators, in-cluster upstreams)"),
		opt(&c.UpstreamKeyEnvAllow, nil, "upstream-key-env-allow",
			"environment variables api_key_env may name besides PROXY_UPSTREAM_KEY_* (comma-separated, repeatable)").repeat(func(v string) error {
			for _, n := range strings.Split(v, ",") {
				if n = strings.TrimSpace(n); n != "" {
					c.UpstreamKeyEnvAllow = append(c.UpstreamKeyEnvAllow, n)
				}
			}
			return nil
		}),
		opt(&c.AllowHostCloudCredentials, false, "allow-host-cloud-credentials",
			"let an admin give bedrock and vertex upstreams this host's own cloud credentials (AWS default chain, Google application default credentials)"),
		opt(&c.Admin.Auth.Providers, nil, "", "static admin token providers: a list of {type: static_token, token_env: VARIABLE} (docs/operations.md, Identity)"),
		opt(&c.Admin.Auth.BreakGlass, nil, "", "false turns the static admin token off, leaving scoped tokens and OIDC").showing("true"),
		opt(&c.Admin.Auth.OIDC, nil, "", "OpenID Connect sign-in and access tokens: issuer, client_id, client_secret_env, redirect_url, roles, … (docs/operations.md, OIDC configuration)"),
	}
}

func validateSecurityArea(c *Config, p *problems) {
	for i, pr := range c.Admin.Auth.Providers {
		key := fmt.Sprintf("admin.auth.providers[%d]", i)
		if pr.Type != "static_token" {
			p.bad(key+".type", "unknown provider type %q (supported: static_token)", pr.Type)
		}
		if pr.TokenEnv == "" {
			p.bad(key+".token_env", "required")
		}
	}
	p.add(c.validateSecurity()...)
	if o := c.Admin.Auth.OIDC; o != nil {
		p.add(o.Validate("admin.auth.oidc")...)
		if o.ClientSecretEnv == "" {
			p.bad("admin.auth.oidc.client_secret_env", "required (the variable holding the client secret)")
		}
	}
}

func relaySettings(c *Config) []setting {
	r := &c.Relay
	return []setting{
		opt(&r.UpstreamHeaderTimeout, relay.DefaultHeaderTimeout, "upstream-header-timeout", "wait this long for an upstream's response headers (streams, count_tokens), then fail over"),
		opt(&r.UpstreamNonStreamHeaderTimeout, relay.DefaultNonStreamHeaderTimeout, "upstream-nonstream-header-timeout", "the same for non-streaming Messages requests (headers follow the whole answer)"),
		opt(&r.UpstreamIdleTimeout, relay.DefaultIdleTimeout, "upstream-idle-timeout", "end an upstream response from which nothing arrived for this long"),
		opt(&r.MaxBodyBytesInFlight, relay.DefaultMaxBodyBytesInFlight, "max-body-bytes-in-flight", "request body bytes held at once; past it requests get 529 overloaded_error"),
		opt(&r.MaxAttempts, relay.DefaultMaxAttempts, "max-attempts", "upstreams one request may be sent to, failover included (1 to 16)"),
		opt(&r.QueueLength, admission.DefaultQueueLength, "queue-length", "requests of one principal past its max_in_flight that may wait for a slot (0 to 10000; 0: none wait)"),
		opt(&r.QueueMaxWait, admission.DefaultMaxWait, "queue-max-wait", "how long a request past its principal's max_in_flight waits for a slot before a 429"),
	}
}

func validateRelay(cfg *Config, p *problems) {
	c, bad := cfg.Relay, p.bad
	for key, d := range map[string]time.Duration{
		"relay.upstream_header_timeout": c.UpstreamHeaderTimeout, "relay.upstream_nonstream_header_timeout": c.UpstreamNonStreamHeaderTimeout,
		"relay.upstream_idle_timeout": c.UpstreamIdleTimeout,
	} {
		if d < 100*time.Millisecond {
			bad(key, "must be at least 100ms, got %s", d)
		}
	}
	if c.MaxBodyBytesInFlight < relay.MaxBodyBytes {
		bad("relay.max_body_bytes_in_flight", "must be at least %d (one request body of the largest size), got %d", relay.MaxBodyBytes, c.MaxBodyBytesInFlight)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > relay.MaxAttemptsCap {
		bad("relay.max_attempts", "must be 1 to %d, got %d", relay.MaxAttemptsCap, c.MaxAttempts)
	}
	if c.QueueLength < 0 || c.QueueLength > 10000 {
		bad("relay.queue_length", "must be 0 to 10000, got %d", c.QueueLength)
	}
	if c.QueueMaxWait < 100*time.Millisecond || c.QueueMaxWait > 10*time.Minute {
		bad("relay.queue_max_wait", "must be 100ms to 10m, got %s", c.QueueMaxWait)
	}
}

func schedulerSettings(c *Config) []setting {
	return []setting{
		opt(&c.SchedulerWorkers, 4, "", "jobs this replica runs at once"),
		opt(&c.SchedulerRescueAfter, 5*time.Minute, "scheduler-rescue-after", "retry a job elsewhere when it has been running this long (its worker presumed dead)"),
		opt(&c.JobIntervals, nil, "job-interval", "override a job's cron interval, e.g. metadata_refresh=10m (repeatable)").repeat(func(v string) error {
			name, d, ok := strings.Cut(v, "=")
			dur, err := time.ParseDuration(d)
			if !ok || err != nil {
				return fmt.Errorf("want name=duration, got %q", v)
			}
			if c.JobIntervals == nil {
				c.JobIntervals = map[string]time.Duration{}
			}
			c.JobIntervals[name] = dur
			return nil
		}),
		opt(&c.PriceCatalogURL, "", "price-catalog-url", "price catalog to fetch (empty: none)"),
	}
}

func validateScheduler(c *Config, p *problems) {
	if c.SchedulerWorkers < 1 {
		p.bad("scheduler_workers", "must be at least 1")
	}
	if c.SchedulerRescueAfter < time.Second {
		p.bad("scheduler_rescue_after", "must be at least 1s")
	}
	for name, d := range c.JobIntervals {
		if _, ok := jobs.DefaultEvery[name]; !ok {
			p.bad("job_intervals."+name, "unknown job type")
		} else if d < time.Second {
			p.bad("job_intervals."+name, "must be at least 1s")
		}
	}
}

func retentionSettings(c *Config) []setting {
	d := jobs.DefaultRetention
	return []setting{
		opt(&c.Retention.RequestEvents, d.RequestEvents, "", "age past which the prune job deletes request events"),
		opt(&c.Retention.AuditLog, d.AuditLog, "", "age past which the prune job deletes audit log rows"),
		opt(&c.Retention.UpstreamAffinity, d.UpstreamAffinity, "", "age past which the prune job deletes session affinity rows"),
		opt(&c.Retention.CapturedExchanges, d.CapturedExchanges, "", "age past which the prune job deletes captured exchanges (docs/capture.md)"),
	}
}

func validateRetention(c *Config, p *problems) {
	for key, d := range map[string]time.Duration{"retention.request_events": c.Retention.RequestEvents,
		"retention.audit_log": c.Retention.AuditLog, "retention.upstream_affinity": c.Retention.UpstreamAffinity,
		"retention.captured_exchanges": c.Retention.CapturedExchanges} {
		if d < time.Hour {
			p.bad(key, "must be at least 1h, got %s", d)
		}
	}
}

func oauthSettings(c *Config) []setting {
	return []setting{
		opt(&c.OAuth.ClientID, "", "oauth-client-id", "OAuth client id of vendor_oauth upstreams (default: the provider's CLI client)").showing("the provider's CLI client"),
		opt(&c.OAuth.RedirectURI, "", "oauth-redirect-uri", "OAuth redirect URI registered for the client (default: the provider's code page)").showing("the provider's code page"),
		opt(&c.OAuth.Scopes, "", "", "scopes the authorization asks for, space-separated").showing("the provider's"),
		opt(&c.OAuth.LazyRefreshTimeout, 10*time.Second, "oauth-lazy-refresh-timeout", "time limit of a token refresh a request triggers (expired or refused OAuth token)"),
		opt(&c.OAuth.RefreshRetryBase, 30*time.Second, "oauth-refresh-retry-base", "first retry delay of a failed OAuth token refresh (doubling, 5 attempts)"),
		opt(&c.Warmup.Model, "", "warmup-model", "small model of the one-token warm-up request (default claude-haiku-4-5)").showing("`claude-haiku-4-5`"),
		opt(&c.Warmup.FreshFor, 10*time.Minute, "", "how old a usage observation may be and still decide a warm-up attempt without asking the provider"),
		opt(&c.UsageStaleAfter, 15*time.Minute, "", "age past which a usage observation is stale: no coupon is advertised from it"),
	}
}

func validateOAuth(c *Config, p *problems) {
	if c.OAuth.LazyRefreshTimeout < 100*time.Millisecond {
		p.bad("oauth.lazy_refresh_timeout", "must be at least 100ms")
	}
	if c.OAuth.RefreshRetryBase < 10*time.Millisecond {
		p.bad("oauth.refresh_retry_base", "must be at least 10ms")
	}
}

func pluginSettings(c *Config) []setting {
	return []setting{
		opt(&c.Plugins.CallTimeout, 0, "plugin-call-timeout", "time limit of one WASM plugin call (default 50ms)").showing("50ms"),
		opt(&c.Plugins.MemoryLimitPages, 0, "", "a plugin instance's memory cap in 64 KiB pages").showing("1024 (64 MiB)"),
	}
}

func tracingSettings(c *Config) []setting {
	t, d := &c.Tracing, tracing.Defaults()
	return []setting{
		opt(&t.Enabled, d.Enabled, "tracing-enabled", "export OpenTelemetry traces of requests, admin calls, jobs and OAuth refreshes over OTLP"),
		opt(&t.Endpoint, d.Endpoint, "tracing-endpoint", "OTLP receiver URL: http(s)://host:4317 (grpc) or http(s)://host:4318[/v1/traces] (http)"),
		opt(&t.Protocol, d.Protocol, "tracing-protocol", "OTLP transport: grpc or http"),
		opt(&t.SamplerRatio, d.SamplerRatio, "tracing-sampler-ratio", "share of new traces recorded, 0 to 1 (a client's traceparent decides for its own)"),
		opt(&t.PropagateTraceparent, d.PropagateTraceparent, "tracing-propagate-traceparent", "send the attempt's traceparent to the upstream (false: strip the client's)"),
		opt(&t.Headers, d.Headers, "tracing-header", "header sent with every OTLP export, name=value (repeatable; prefer the config file for credentials)").repeat(func(v string) error {
			k, val, ok := strings.Cut(v, "=")
			if !ok || k == "" {
				return fmt.Errorf("want name=value, got a value without =")
			}
			if t.Headers == nil {
				t.Headers = map[string]string{}
			}
			t.Headers[k] = val
			return nil
		}),
	}
}

func alertSettings(c *Config) []setting {
	a := &c.Alerts
	return []setting{
		opt(&a.EvaluateInterval, time.Minute, "alerts-evaluate-interval", "how often this replica evaluates the alert conditions"),
		opt(&a.DeliveryTimeout, 10*time.Second, "alerts-delivery-timeout", "how long one alert webhook delivery attempt may take"),
		opt(&a.RetryBase, 30*time.Second, "alerts-retry-base", "first wait before a failed alert delivery is tried again (doubling)"),
	}
}

func validateAlerts(c *Config, p *problems) {
	if c.Alerts.EvaluateInterval < 100*time.Millisecond {
		p.bad("alerts.evaluate_interval", "must be at least 100ms, got %s", c.Alerts.EvaluateInterval)
	}
	if c.Alerts.DeliveryTimeout < 100*time.Millisecond || c.Alerts.DeliveryTimeout > 5*time.Minute {
		p.bad("alerts.delivery_timeout", "must be 100ms to 5m, got %s", c.Alerts.DeliveryTimeout)
	}
	if c.Alerts.RetryBase < 10*time.Millisecond || c.Alerts.RetryBase > 10*time.Minute {
		p.bad("alerts.retry_base", "must be 10ms to 10m, got %s", c.Alerts.RetryBase)
	}
}

func debugSettings(c *Config) []setting {
	return []setting{
		opt(&c.Debug.Pprof, false, "debug-pprof", "serve Go profiles under /debug/pprof/ on the admin listener (admin token required); env PROXY_DEBUG_PPROF").withEnv("PROXY_DEBUG_PPROF"),
	}
}
