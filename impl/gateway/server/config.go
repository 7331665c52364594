package server

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/pillarhq/pillar/impl/gateway/jobs"
)

// Config is everything the proxy binary is told at start-up. Flags and the
// optional YAML file bind into it; flags win over the file.
type Config struct {
	ProxyListen string `yaml:"proxy_listen"`
	AdminListen string `yaml:"admin_listen"`
	DatabaseURL string `yaml:"database_url"`
	// ReconcileInterval is how often the reconciler polls for missed changes.
	ReconcileInterval time.Duration `yaml:"reconcile_interval"`
	// ReplicaID names this replica in status and logs (default: host name).
	ReplicaID string `yaml:"replica_id"`
	LogLevel  string `yaml:"log_level"`
	LogFormat string `yaml:"log_format"`
	Admin     struct {
		Auth struct {
			Providers []AuthProvider `yaml:"providers"`
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
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if *configPath != "" {
		data, err := os.ReadFile(*configPath)
		if err != nil {
			return nil, err
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: %w", *configPath, err)
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
	if c.ReplicaID == "" {
		c.ReplicaID, _ = os.Hostname()
	}
	return &c, c.Validate()
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
	if _, _, err := ParseDatabaseURL(c.DatabaseURL); err != nil {
		bad("database_url", "%v", err)
	}
	if c.ReconcileInterval < time.Second {
		bad("reconcile_interval", "must be at least 1s, got %s", c.ReconcileInterval)
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
		"retention.audit_log": c.Retention.AuditLog, "retention.upstream_affinity": c.Retention.UpstreamAffinity} {
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
	return errors.Join(errs...)
}

// ParseDatabaseURL splits a database URL into its driver and the driver's
// connection string.
func ParseDatabaseURL(u string) (driver, dsn string, err error) {
	switch {
	case strings.HasPrefix(u, "sqlite://"):
		p := strings.TrimPrefix(u, "sqlite://")
		if p == "" {
			return "", "", errors.New("sqlite:// needs a file path, e.g. sqlite://proxy.db")
		}
		return "sqlite", p, nil
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return "postgres", u, nil
	default:
		return "", "", fmt.Errorf("%q: want sqlite://PATH or postgres://…", redactURL(u))
	}
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
