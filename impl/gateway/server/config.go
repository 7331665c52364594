package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/jobs"
	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/sso"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
)

// Config is everything the proxy binary is told at start-up. Flags and the
// optional YAML file bind into it; flags win over the file.
type Config struct {
	ProxyListen string `yaml:"proxy_listen"`
	AdminListen string `yaml:"admin_listen"`
	DatabaseURL string `yaml:"database_url"`
	// db is DatabaseURL as Validate parsed it: the one parse it gets.
	db DatabaseURL
	// ReconcileInterval is how often the reconciler polls for missed changes.
	ReconcileInterval time.Duration `yaml:"reconcile_interval"`
	// Alerts: how often each replica evaluates the alert conditions and
	// how long one webhook delivery attempt may take (docs/alerts.md).
	Alerts struct {
		EvaluateInterval time.Duration `yaml:"evaluate_interval"`
		DeliveryTimeout  time.Duration `yaml:"delivery_timeout"`
		// RetryBase is the first wait before a failed delivery is tried
		// again, doubling at each attempt (the entity class's 30 s).
		RetryBase time.Duration `yaml:"retry_base"`
	} `yaml:"alerts"`
	// ReplicaID names this replica in status and logs (default: host name).
	ReplicaID string `yaml:"replica_id"`
	LogLevel  string `yaml:"log_level"`
	LogFormat string `yaml:"log_format"`
	Admin     struct {
		Auth struct {
			Providers []AuthProvider `yaml:"providers"`
			// BreakGlass keeps the static admin token (PROXY_ADMIN_TOKEN,
			// the token file or providers); false turns it off, leaving
			// scoped tokens and OIDC (docs/operations.md, Identity).
			BreakGlass *bool `yaml:"break_glass"`
			// OIDC signs people in through an OpenID Connect issuer and
			// accepts its access tokens (docs/operations.md, Identity).
			OIDC *sso.Config `yaml:"oidc"`
		} `yaml:"auth"`
	} `yaml:"admin"`
	Database struct {
		// MainPool bounds the request/admin connection pool (PostgreSQL).
		MainPool int `yaml:"main_pool"`
		// SchedulerPool bounds the durable scheduler's pool (PostgreSQL).
		SchedulerPool int `yaml:"scheduler_pool"`
		// Replicas is how many proxy replicas share the database; with the
		// pools it must fit the connection budget (see CheckBudget).
		Replicas int `yaml:"replicas"`
	} `yaml:"database"`
	// Retention bounds how long the pruning job keeps rows.
	Retention jobs.Retention `yaml:"retention"`
	// PriceCatalogURL is fetched by the price catalog job; empty disables it.
	PriceCatalogURL string `yaml:"price_catalog_url"`
	// JobIntervals overrides cron intervals by job type.
	JobIntervals map[string]time.Duration `yaml:"job_intervals"`
	// SchedulerWorkers is how many jobs this replica runs at once.
	SchedulerWorkers int `yaml:"scheduler_workers"`
	// SchedulerRescueAfter is how long a running job may go before it is
	// presumed dead with its worker and retried elsewhere.
	SchedulerRescueAfter time.Duration `yaml:"scheduler_rescue_after"`
	// OAuth configures the OAuth client of vendor_oauth upstreams.
	OAuth struct {
		// ClientID is the OAuth client registered with the provider.
		ClientID string `yaml:"client_id"`
		// RedirectURI is where the provider sends the operator with the code.
		RedirectURI string `yaml:"redirect_uri"`
		Scopes      string `yaml:"scopes"`
		// scheduler/oauth area (issue 18.5): LazyRefreshTimeout bounds a
		// request-path token refresh (default 10s); RefreshRetryBase is the
		// base delay of the refresh job's retry curve (default 30s, the
		// seed's Entity class; shorter only in tests).
		LazyRefreshTimeout time.Duration `yaml:"lazy_refresh_timeout"`
		RefreshRetryBase   time.Duration `yaml:"refresh_retry_base"`
	} `yaml:"oauth"`
	Warmup struct {
		// Model is the small model of the one-token warm-up request.
		Model string `yaml:"model"`
		// FreshFor is how old a usage observation may be and still decide
		// a warm-up attempt without asking the provider.
		FreshFor time.Duration `yaml:"fresh_for"`
	} `yaml:"warmup"`
	Plugins struct {
		// CallTimeout bounds one plugin call (default 50ms).
		CallTimeout time.Duration `yaml:"call_timeout"`
		// MemoryLimitPages caps a plugin instance's memory in 64 KiB pages
		// (default 1024 = 64 MiB).
		MemoryLimitPages uint32 `yaml:"memory_limit_pages"`
	} `yaml:"plugins"`
	// UsageStaleAfter is the age past which a usage observation is stale:
	// no coupon is advertised from it.
	UsageStaleAfter time.Duration `yaml:"usage_stale_after"`
	// MigrateContract applies contract-phase (column-dropping) migrations;
	// only set it once every replica runs a version that no longer needs
	// what they drop.
	MigrateContract bool `yaml:"migrate_contract"`
	// Relay holds the proxy path's deadlines and bounds (relay area; see
	// RelayConfig at the end of this file).
	Relay RelayConfig `yaml:"relay"`

	// --- listeners and shutdown (server area) ---

	// Listeners bounds what one client connection may hold on every
	// listener (proxy and admin, which also serves /metrics).
	Listeners ListenerLimits `yaml:"listeners"`
	// DrainTimeout is how long shutdown waits for in-flight requests
	// (long streams included) after SIGTERM before cutting them; keep it
	// below the pod's terminationGracePeriodSeconds.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// --- end listeners and shutdown ---

	// Security (issue 19; docs/operations.md, Security): what upstreams may
	// reach and read. AllowPrivateUpstreams admits loopback and private
	// ranges as upstream destinations (simulators, in-cluster upstreams);
	// UpstreamKeyEnvAllow lists the variables api_key_env may name besides
	// PROXY_UPSTREAM_KEY_*.
	AllowPrivateUpstreams bool     `yaml:"allow_private_upstreams"`
	UpstreamKeyEnvAllow   []string `yaml:"upstream_key_env_allow"`
	// AllowHostCloudCredentials lets an admin give bedrock and vertex
	// upstreams the proxy host's own cloud credentials (the AWS default
	// chain, Google's application default credentials; docs/cloud.md).
	AllowHostCloudCredentials bool `yaml:"allow_host_cloud_credentials"`

	// Tracing exports OpenTelemetry traces (off by default; docs/tracing.md).
	Tracing tracing.Config `yaml:"tracing"`

	// Debug holds diagnostics that are off by default (docs/operations.md,
	// Profiling).
	Debug struct {
		// Pprof serves the Go runtime's profiles under /debug/pprof/ on
		// the admin listener, behind the admin token.
		Pprof bool `yaml:"pprof"`
	} `yaml:"debug"`
}

// ListenerLimits are the per-connection bounds of a listener.
type ListenerLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// BodyReadTimeout bounds reading a request's body, from the end of
	// its headers; once the body is read the bound is lifted, so a
	// long response stream is not cut by it.
	BodyReadTimeout time.Duration `yaml:"body_read_timeout"`
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds a request's header bytes.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
}

// AuthProvider configures one admin authentication provider.
type AuthProvider struct {
	// Type is "static_token".
	Type string `yaml:"type"`
	// TokenEnv names the server environment variable holding the token.
	TokenEnv string `yaml:"token_env"`
}

func defaults() Config {
	var c Config
	c.ProxyListen = ":8080"
	c.AdminListen = "[::1]:9090"
	c.DatabaseURL = "sqlite://proxy.db"
	c.ReconcileInterval = 60 * time.Second
	c.Alerts.EvaluateInterval, c.Alerts.DeliveryTimeout, c.Alerts.RetryBase = time.Minute, 10*time.Second, 30*time.Second
	c.LogLevel = "info"
	c.LogFormat = "text"
	c.Database.MainPool = 10
	c.Database.SchedulerPool = 5
	c.Database.Replicas = 1
	c.Retention = jobs.DefaultRetention
	c.SchedulerWorkers = 4
	c.SchedulerRescueAfter = 5 * time.Minute
	c.Warmup.FreshFor = 10 * time.Minute
	c.UsageStaleAfter = 15 * time.Minute
	c.Relay = defaultRelayConfig() // relay area
	c.Tracing = tracing.Defaults()
	// listeners and shutdown (server area)
	c.Listeners = ListenerLimits{ReadHeaderTimeout: 10 * time.Second, BodyReadTimeout: 60 * time.Second,
		IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10}
	// The chart grants 30 s (terminationGracePeriodSeconds); 5 s of it
	// go to the preStop pause before SIGTERM arrives.
	c.DrainTimeout = 25 * time.Second
	c.OAuth.LazyRefreshTimeout, c.OAuth.RefreshRetryBase = 10*time.Second, 30*time.Second // scheduler/oauth area
	return c
}

// ParseConfig binds args (and the file named by --config) into a Config and
// validates it, reporting every problem at once.
func ParseConfig(args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	c := defaults()
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		configPath = fs.String("config", "", "optional YAML configuration file")
		proxy      = fs.String("proxy-listen", c.ProxyListen, "proxy listener address (serves /v1/messages)")
		admin      = fs.String("admin-listen", c.AdminListen, "admin listener address (serves /admin/v1, the dashboard and /metrics)")
		dbURL      = fs.String("database-url", "", "sqlite://PATH (embedded default: sqlite://proxy.db) or postgres://…; env PROXY_DATABASE_URL")
		reconcile  = fs.Duration("reconcile-interval", c.ReconcileInterval, "how often the reconciler polls the database for missed changes")
		replica    = fs.String("replica-id", "", "name of this replica (default: host name)")
		alertEval  = fs.Duration("alerts-evaluate-interval", c.Alerts.EvaluateInterval, "how often this replica evaluates the alert conditions")
		alertSend  = fs.Duration("alerts-delivery-timeout", c.Alerts.DeliveryTimeout, "how long one alert webhook delivery attempt may take")
		alertRetry = fs.Duration("alerts-retry-base", c.Alerts.RetryBase, "first wait before a failed alert delivery is tried again (doubling)")
		logLevel   = fs.String("log-level", c.LogLevel, "debug, info, warn or error")
		logFormat  = fs.String("log-format", c.LogFormat, "text or json")
		mainPool   = fs.Int("main-pool", c.Database.MainPool, "PostgreSQL main connection pool size")
		schedPool  = fs.Int("scheduler-pool", c.Database.SchedulerPool, "PostgreSQL scheduler connection pool size")
		replicas   = fs.Int("replicas", c.Database.Replicas, "number of replicas sharing the database (connection budget check)")
		contract   = fs.Bool("migrate-contract", false, "also apply contract-phase migrations (drops); see docs/operations.md")
		catalogURL = fs.String("price-catalog-url", "", "price catalog to fetch (empty: none)")
		rescue     = fs.Duration("scheduler-rescue-after", c.SchedulerRescueAfter, "retry a job elsewhere when it has been running this long (its worker presumed dead)")
		clientID   = fs.String("oauth-client-id", "", "OAuth client id of vendor_oauth upstreams (default: the provider's CLI client)")
		redirect   = fs.String("oauth-redirect-uri", "", "OAuth redirect URI registered for the client (default: the provider's code page)")
		warmModel  = fs.String("warmup-model", "", "small model of the one-token warm-up request (default claude-haiku-4-5)")
		plugTime   = fs.Duration("plugin-call-timeout", 0, "time limit of one WASM plugin call (default 50ms)")
		intervals  = map[string]time.Duration{}
		applyRelay = bindRelayFlags(fs) // relay area
		applyTrace = bindTracingFlags(fs)
		// listeners and shutdown (server area)
		hdrTimeout  = fs.Duration("read-header-timeout", c.Listeners.ReadHeaderTimeout, "close a connection whose request headers take longer (every listener)")
		bodyTimeout = fs.Duration("body-read-timeout", c.Listeners.BodyReadTimeout, "close a connection whose request body takes longer to arrive (every listener; the response stream is not bounded by it)")
		idleTimeout = fs.Duration("idle-timeout", c.Listeners.IdleTimeout, "close a keep-alive connection idle this long (every listener)")
		drain       = fs.Duration("drain-timeout", c.DrainTimeout, "on SIGTERM, how long in-flight requests may run before they are cut (keep below the pod's grace period)")
		// scheduler/oauth area (issue 18.5)
		lazyTimeout = fs.Duration("oauth-lazy-refresh-timeout", c.OAuth.LazyRefreshTimeout, "time limit of a token refresh a request triggers (expired or refused OAuth token)")
		retryBase   = fs.Duration("oauth-refresh-retry-base", c.OAuth.RefreshRetryBase, "first retry delay of a failed OAuth token refresh (doubling, 5 attempts)")
	)
	fs.Func("job-interval", "override a job's cron interval, e.g. metadata_refresh=10m (repeatable)", func(v string) error {
		name, d, ok := strings.Cut(v, "=")
		dur, err := time.ParseDuration(d)
		if !ok || err != nil {
			return fmt.Errorf("want name=duration, got %q", v)
		}
		intervals[name] = dur
		return nil
	})
	applySecurity := securityFlags(fs)
	pprofOn := fs.Bool("debug-pprof", false, "serve Go profiles under /debug/pprof/ on the admin listener (admin token required); env PROXY_DEBUG_PPROF")
	// The flag package would print its error and the whole flag list on
	// any mistake; a bad flag gets one line (and exit 2), --help the list.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // called on every parse error too
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stderr, fs)
			return nil, err
		}
		return nil, cli.Usage(fmt.Errorf("%w (proxy --help lists the flags)", err))
	}
	if fs.NArg() > 0 {
		return nil, cli.Usage(fmt.Errorf("unexpected arguments: %s (subcommands: proxy storage …; see proxy --help)", strings.Join(fs.Args(), " ")))
	}
	if *configPath != "" {
		data, err := os.ReadFile(*configPath)
		if err != nil {
			return nil, err
		}
		if errs := decodeConfigFile(data, &c); len(errs) > 0 {
			for i, err := range errs {
				errs[i] = fmt.Errorf("%s: %w", *configPath, err)
			}
			return nil, errors.Join(errs...)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["proxy-listen"] {
		c.ProxyListen = *proxy
	}
	if set["admin-listen"] {
		c.AdminListen = *admin
	}
	switch {
	case *dbURL != "":
		c.DatabaseURL = *dbURL
	case getenv("PROXY_DATABASE_URL") != "":
		c.DatabaseURL = getenv("PROXY_DATABASE_URL")
	}
	if set["reconcile-interval"] {
		c.ReconcileInterval = *reconcile
	}
	if set["alerts-evaluate-interval"] {
		c.Alerts.EvaluateInterval = *alertEval
	}
	if set["alerts-delivery-timeout"] {
		c.Alerts.DeliveryTimeout = *alertSend
	}
	if set["alerts-retry-base"] {
		c.Alerts.RetryBase = *alertRetry
	}
	if *replica != "" {
		c.ReplicaID = *replica
	}
	if set["log-level"] {
		c.LogLevel = *logLevel
	}
	if set["log-format"] {
		c.LogFormat = *logFormat
	}
	if set["main-pool"] {
		c.Database.MainPool = *mainPool
	}
	if set["scheduler-pool"] {
		c.Database.SchedulerPool = *schedPool
	}
	if set["replicas"] {
		c.Database.Replicas = *replicas
	}
	if *contract {
		c.MigrateContract = true
	}
	if set["scheduler-rescue-after"] {
		c.SchedulerRescueAfter = *rescue
	}
	if *catalogURL != "" {
		c.PriceCatalogURL = *catalogURL
	}
	if *clientID != "" {
		c.OAuth.ClientID = *clientID
	}
	if *redirect != "" {
		c.OAuth.RedirectURI = *redirect
	}
	if *warmModel != "" {
		c.Warmup.Model = *warmModel
	}
	if *plugTime > 0 {
		c.Plugins.CallTimeout = *plugTime
	}
	applyRelay(set, &c.Relay) // relay area: flags win over the file
	applyTrace(set, &c.Tracing)
	applySecurity(&c)
	if set["oauth-lazy-refresh-timeout"] { // scheduler/oauth area
		c.OAuth.LazyRefreshTimeout = *lazyTimeout
	}
	if set["oauth-refresh-retry-base"] {
		c.OAuth.RefreshRetryBase = *retryBase
	}
	for k, v := range intervals {
		if c.JobIntervals == nil {
			c.JobIntervals = map[string]time.Duration{}
		}
		c.JobIntervals[k] = v
	}
	// listeners and shutdown (server area)
	if set["read-header-timeout"] {
		c.Listeners.ReadHeaderTimeout = *hdrTimeout
	}
	if set["body-read-timeout"] {
		c.Listeners.BodyReadTimeout = *bodyTimeout
	}
	if set["idle-timeout"] {
		c.Listeners.IdleTimeout = *idleTimeout
	}
	if set["drain-timeout"] {
		c.DrainTimeout = *drain
	}
	// debug: the flag wins over the environment, which wins over the file.
	var envErr error
	if set["debug-pprof"] {
		c.Debug.Pprof = *pprofOn
	} else if v, ok, err := parseBoolEnv(getenv, "PROXY_DEBUG_PPROF"); err != nil {
		envErr = fmt.Errorf("debug.pprof: PROXY_DEBUG_PPROF must be true or false, got %q", getenv("PROXY_DEBUG_PPROF"))
	} else if ok {
		c.Debug.Pprof = v
	}
	if c.ReplicaID == "" {
		c.ReplicaID, _ = os.Hostname()
	}
	return &c, errors.Join(envErr, c.Validate())
}

// Validate reports every invalid setting, each with its key.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	for key, addr := range map[string]string{"proxy_listen": c.ProxyListen, "admin_listen": c.AdminListen} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad(key, "%q is not host:port", addr)
		}
	}
	if c.ProxyListen == c.AdminListen {
		bad("admin_listen", "must differ from proxy_listen: the admin and proxy listeners are separate")
	}
	if db, err := ParseDatabaseURL(c.DatabaseURL); err != nil {
		bad("database_url", "%v", err)
	} else {
		c.db = db
		// A typo in the path must not silently start an empty database in a
		// new directory: the directory is the operator's to create.
		if db.Driver == SQLite && db.DSN != ":memory:" {
			if dir := filepath.Dir(db.DSN); !isDir(dir) {
				bad("database_url", "the directory %s of the SQLite database does not exist; create it first (the proxy creates the file, not its directory)", dir)
			}
		}
	}
	if c.ReconcileInterval < time.Second {
		bad("reconcile_interval", "must be at least 1s, got %s", c.ReconcileInterval)
	}
	if c.Alerts.EvaluateInterval < 100*time.Millisecond {
		bad("alerts.evaluate_interval", "must be at least 100ms, got %s", c.Alerts.EvaluateInterval)
	}
	if c.Alerts.DeliveryTimeout < 100*time.Millisecond || c.Alerts.DeliveryTimeout > 5*time.Minute {
		bad("alerts.delivery_timeout", "must be 100ms to 5m, got %s", c.Alerts.DeliveryTimeout)
	}
	if c.Alerts.RetryBase < 10*time.Millisecond || c.Alerts.RetryBase > 10*time.Minute {
		bad("alerts.retry_base", "must be 10ms to 10m, got %s", c.Alerts.RetryBase)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		bad("log_format", "must be text or json, got %q", c.LogFormat)
	}
	if c.Database.MainPool < 1 {
		bad("database.main_pool", "must be at least 1")
	}
	if c.Database.SchedulerPool < 1 {
		bad("database.scheduler_pool", "must be at least 1")
	}
	for key, d := range map[string]time.Duration{"retention.request_events": c.Retention.RequestEvents,
		"retention.audit_log": c.Retention.AuditLog, "retention.upstream_affinity": c.Retention.UpstreamAffinity,
		"retention.captured_exchanges": c.Retention.CapturedExchanges} {
		if d < time.Hour {
			bad(key, "must be at least 1h, got %s", d)
		}
	}
	for name, d := range c.JobIntervals {
		if _, ok := jobs.DefaultEvery[name]; !ok {
			bad("job_intervals."+name, "unknown job type")
		} else if d < time.Second {
			bad("job_intervals."+name, "must be at least 1s")
		}
	}
	if c.SchedulerRescueAfter < time.Second {
		bad("scheduler_rescue_after", "must be at least 1s")
	}
	if c.SchedulerWorkers < 1 {
		bad("scheduler_workers", "must be at least 1")
	}
	if c.Database.Replicas < 1 {
		bad("database.replicas", "must be at least 1")
	}
	c.Relay.validate(bad) // relay area
	c.Tracing.Validate("tracing", bad)
	if c.OAuth.LazyRefreshTimeout < 100*time.Millisecond { // scheduler/oauth area
		bad("oauth.lazy_refresh_timeout", "must be at least 100ms")
	}
	if c.OAuth.RefreshRetryBase < 10*time.Millisecond {
		bad("oauth.refresh_retry_base", "must be at least 10ms")
	}
	for i, p := range c.Admin.Auth.Providers {
		key := fmt.Sprintf("admin.auth.providers[%d]", i)
		if p.Type != "static_token" {
			bad(key+".type", "unknown provider type %q (supported: static_token)", p.Type)
		}
		if p.TokenEnv == "" {
			bad(key+".token_env", "required")
		}
	}
	// listeners and shutdown (server area)
	for key, d := range map[string]time.Duration{"listeners.read_header_timeout": c.Listeners.ReadHeaderTimeout,
		"listeners.body_read_timeout": c.Listeners.BodyReadTimeout, "listeners.idle_timeout": c.Listeners.IdleTimeout} {
		if d < 100*time.Millisecond {
			bad(key, "must be at least 100ms, got %s", d)
		}
	}
	if c.Listeners.MaxHeaderBytes < 4<<10 || c.Listeners.MaxHeaderBytes > 1<<20 {
		bad("listeners.max_header_bytes", "must be 4096-1048576, got %d", c.Listeners.MaxHeaderBytes)
	}
	if c.DrainTimeout < 0 || c.DrainTimeout > time.Hour {
		bad("drain_timeout", "must be 0-1h, got %s", c.DrainTimeout)
	}
	errs = append(errs, c.validateSecurity()...)
	if o := c.Admin.Auth.OIDC; o != nil {
		errs = append(errs, o.Validate("admin.auth.oidc")...)
		if o.ClientSecretEnv == "" {
			errs = append(errs, errors.New("admin.auth.oidc.client_secret_env: required (the variable holding the client secret)"))
		}
	}
	return errors.Join(errs...)
}

// redactURL hides a password in a URL before it is printed.
func redactURL(u string) string {
	at := strings.LastIndexByte(u, '@')
	scheme := strings.Index(u, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return u
	}
	cred := u[scheme+3 : at]
	if i := strings.IndexByte(cred, ':'); i >= 0 {
		return u[:scheme+3] + cred[:i] + ":***" + u[at:]
	}
	return u
}

// CheckBudget enforces the seed's connection budget:
// (main_pool + scheduler_pool) * replicas <= 0.7 * max_connections.
func CheckBudget(mainPool, schedulerPool, replicas, maxConnections int) error {
	need := (mainPool + schedulerPool) * replicas
	// Integer form of need <= 0.7*max, exact for whole numbers.
	if need*10 > maxConnections*7 {
		return fmt.Errorf("connection budget exceeded: (main_pool %d + scheduler_pool %d) * replicas %d = %d > 0.7 * max_connections %d = %.1f; "+
			"reduce database.scheduler_pool, database.main_pool or the replica count, or raise the server's max_connections",
			mainPool, schedulerPool, replicas, need, maxConnections, 0.7*float64(maxConnections))
	}
	return nil
}

// ---- relay area (issues 18 and 19; docs/resilience.md, "Proxy path") ----

// RelayConfig bounds the proxy path: how long it waits for an upstream,
// how long it reads a client's body, and how many body bytes it holds.
type RelayConfig struct {
	// UpstreamHeaderTimeout bounds the wait for response headers of a
	// streaming request or count_tokens; past it the request fails over.
	UpstreamHeaderTimeout time.Duration `yaml:"upstream_header_timeout"`
	// UpstreamNonStreamHeaderTimeout is the same for non-streaming
	// Messages requests, whose headers follow the whole generation.
	UpstreamNonStreamHeaderTimeout time.Duration `yaml:"upstream_nonstream_header_timeout"`
	// UpstreamIdleTimeout ends a response from which nothing arrived for
	// this long (streams: an error event, then the connection closed).
	UpstreamIdleTimeout time.Duration `yaml:"upstream_idle_timeout"`
	// MaxBodyBytesInFlight caps the request body bytes held at once; past
	// it requests get 529 overloaded_error.
	MaxBodyBytesInFlight int64 `yaml:"max_body_bytes_in_flight"`
	// MaxAttempts bounds how many upstreams one request is sent to,
	// failover included (docs/routing.md).
	MaxAttempts int `yaml:"max_attempts"`
	// QueueLength is how many requests of one principal past its
	// max_in_flight may wait for a slot; QueueMaxWait how long each waits
	// before a 429 (docs/routing.md).
	QueueLength  int           `yaml:"queue_length"`
	QueueMaxWait time.Duration `yaml:"queue_max_wait"`
}

func defaultRelayConfig() RelayConfig {
	return RelayConfig{
		UpstreamHeaderTimeout:          relay.DefaultHeaderTimeout,
		UpstreamNonStreamHeaderTimeout: relay.DefaultNonStreamHeaderTimeout,
		UpstreamIdleTimeout:            relay.DefaultIdleTimeout,
		MaxBodyBytesInFlight:           relay.DefaultMaxBodyBytesInFlight,
		MaxAttempts:                    relay.DefaultMaxAttempts,
		QueueLength:                    admission.DefaultQueueLength,
		QueueMaxWait:                   admission.DefaultMaxWait,
	}
}

// bindRelayFlags registers the relay's flags; the returned function copies
// the flags that were set over the file's values.
func bindRelayFlags(fs *flag.FlagSet) func(set map[string]bool, c *RelayConfig) {
	d := defaultRelayConfig()
	hdr := fs.Duration("upstream-header-timeout", d.UpstreamHeaderTimeout, "wait this long for an upstream's response headers (streams, count_tokens), then fail over")
	nonStream := fs.Duration("upstream-nonstream-header-timeout", d.UpstreamNonStreamHeaderTimeout, "the same for non-streaming Messages requests (headers follow the whole answer)")
	idle := fs.Duration("upstream-idle-timeout", d.UpstreamIdleTimeout, "end an upstream response from which nothing arrived for this long")
	held := fs.Int64("max-body-bytes-in-flight", d.MaxBodyBytesInFlight, "request body bytes held at once; past it requests get 529 overloaded_error")
	attempts := fs.Int("max-attempts", d.MaxAttempts, "upstreams one request may be sent to, failover included (1 to 16)")
	queueLen := fs.Int("queue-length", d.QueueLength, "requests of one principal past its max_in_flight that may wait for a slot (0 to 10000; 0: none wait)")
	queueWait := fs.Duration("queue-max-wait", d.QueueMaxWait, "how long a request past its principal's max_in_flight waits for a slot before a 429")
	return func(set map[string]bool, c *RelayConfig) {
		if set["queue-length"] {
			c.QueueLength = *queueLen
		}
		if set["queue-max-wait"] {
			c.QueueMaxWait = *queueWait
		}
		if set["upstream-header-timeout"] {
			c.UpstreamHeaderTimeout = *hdr
		}
		if set["upstream-nonstream-header-timeout"] {
			c.UpstreamNonStreamHeaderTimeout = *nonStream
		}
		if set["upstream-idle-timeout"] {
			c.UpstreamIdleTimeout = *idle
		}
		if set["max-body-bytes-in-flight"] {
			c.MaxBodyBytesInFlight = *held
		}
		if set["max-attempts"] {
			c.MaxAttempts = *attempts
		}
	}
}

func (c RelayConfig) validate(bad func(key, format string, a ...any)) {
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

// admission returns the controller of the principals' caps this
// configuration governs; observe feeds the queue metrics.
func (c RelayConfig) admission(observe func(time.Duration, bool)) *admission.Controller {
	n := c.QueueLength
	if n == 0 {
		n = -1 // none wait
	}
	return admission.New(admission.Options{QueueLength: n, MaxWait: c.QueueMaxWait, Observe: observe})
}

// upstreamCaps returns the controller of the upstreams' max_in_flight:
// the same queue length and wait as a principal's (docs/routing.md).
func (c RelayConfig) upstreamCaps() *admission.Controller {
	n := c.QueueLength
	if n == 0 {
		n = -1 // none wait
	}
	return admission.New(admission.Options{QueueLength: n, MaxWait: c.QueueMaxWait, Subject: "upstream"})
}

// apply sets the relay.Options fields this configuration governs. The
// relay's own body deadline is the listeners' body bound (one setting for
// one idea: how long a client may take to send its body).
func (c RelayConfig) apply(o *relay.Options, l ListenerLimits) {
	o.HeaderTimeout = c.UpstreamHeaderTimeout
	o.NonStreamHeaderTimeout = c.UpstreamNonStreamHeaderTimeout
	o.IdleTimeout = c.UpstreamIdleTimeout
	o.BodyReadTimeout = l.BodyReadTimeout
	o.MaxBodyBytesInFlight = c.MaxBodyBytesInFlight
	o.MaxAttempts = c.MaxAttempts
}

// ---- security (issue 19): the flags of the upstream destination and
// api_key_env policies, kept in one place.

// securityFlags declares the security flags on fs; the returned function
// applies the ones given (flags win over the file) after parsing.
func securityFlags(fs *flag.FlagSet) func(*Config) {
	allowPrivate := fs.Bool("allow-private-upstreams", false,
		"let upstreams (base_url, oauth_token_url) be loopback or private addresses: RFC 1918, fc00::/7, 100.64.0.0/10 (simulators, in-cluster upstreams)")
	var keyEnv []string
	fs.Func("upstream-key-env-allow", "environment variables api_key_env may name besides PROXY_UPSTREAM_KEY_* (comma-separated, repeatable)", func(v string) error {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				keyEnv = append(keyEnv, n)
			}
		}
		return nil
	})
	hostCloud := fs.Bool("allow-host-cloud-credentials", false,
		"let an admin give bedrock and vertex upstreams this host's own cloud credentials (AWS default chain, Google application default credentials)")
	return func(c *Config) {
		if *allowPrivate {
			c.AllowPrivateUpstreams = true
		}
		if *hostCloud {
			c.AllowHostCloudCredentials = true
		}
		c.UpstreamKeyEnvAllow = append(c.UpstreamKeyEnvAllow, keyEnv...)
	}
}

// validateSecurity refuses an allow-list that would hand the proxy's own
// variables to api_key_env.
func (c *Config) validateSecurity() []error {
	var errs []error
	for i, n := range c.UpstreamKeyEnvAllow {
		key := fmt.Sprintf("upstream_key_env_allow[%d]", i)
		switch {
		case !envVarName(n):
			errs = append(errs, fmt.Errorf("%s: not an environment variable name", key))
		case strings.HasPrefix(n, "PROXY_") && !strings.HasPrefix(n, "PROXY_UPSTREAM_KEY_"):
			errs = append(errs, fmt.Errorf("%s: %s is one of the proxy's own variables and cannot be allowed", key, n))
		}
		for _, p := range c.Admin.Auth.Providers {
			if n == p.TokenEnv {
				errs = append(errs, fmt.Errorf("%s: %s holds an admin token (admin.auth.providers) and cannot be allowed", key, n))
			}
		}
		if o := c.Admin.Auth.OIDC; o != nil && n == o.ClientSecretEnv {
			errs = append(errs, fmt.Errorf("%s: %s holds the OIDC client secret (admin.auth.oidc) and cannot be allowed", key, n))
		}
	}
	return errs
}

func envVarName(s string) bool {
	if s == "" || len(s) > 128 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, r := range s {
		if !(r == '_' || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9')) {
			return false
		}
	}
	return true
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `Usage:
  proxy [flags]                              run the gateway (proxy and admin listeners)
  proxy storage rotate-master-key [flags]    re-seal every stored secret under a new master key
  proxy storage disable-oauth-warmup [flags] turn off warm-up on every OAuth upstream
  proxy --version                            print the version

Environment:
  PROXY_DATABASE_URL                 database, as --database-url (the flag wins)
  PROXY_MASTER_KEY                   master key sealing stored secrets (required on PostgreSQL;
                                     on SQLite a key file beside the database is made)
  PROXY_NEW_MASTER_KEY               storage rotate-master-key: the new key
  PROXY_ADMIN_TOKEN                  admin API bearer token (or admin.auth.providers in --config)
  PROXY_METRICS_TOKEN(_FILE)         bearer token /metrics requires, when set
  PROXY_UPSTREAM_KEY_*               upstream API keys an upstream's api_key_env may name
  PROXY_DEBUG_PPROF                  true: serve /debug/pprof/ on the admin listener, as --debug-pprof

Flags:
`)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}
