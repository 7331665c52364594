package server

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/jobs"
	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/sso"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
)

// Config is everything the proxy binary is told at start-up. Each field's
// yaml tag is its file key; its default, flag, environment variable and
// check are declared once, in configareas.go. The file, the environment
// and the flags bind onto the fields in that order, the last one winning.
type Config struct {
	ProxyListen string `yaml:"proxy_listen"`
	AdminListen string `yaml:"admin_listen"`
	DatabaseURL string `yaml:"database_url"`
	// db is DatabaseURL as Validate parsed it: the one parse it gets.
	db DatabaseURL
	// clock is the one clock of every service and loop; nil (always but
	// in tests) is the real clock.
	clock clock.Clock
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
		// LazyRefreshTimeout bounds a request-path token refresh (default
		// 10s); RefreshRetryBase is the base delay of the refresh job's
		// retry curve (default 30s, the seed's Entity class; shorter only
		// in tests).
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

	// Security (docs/operations.md, "Security"): what upstreams may
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

// defaults is the configuration before the file, the environment and the
// flags: every setting's declared default.
func defaults() Config {
	var c Config
	for _, s := range c.settings() {
		s.reset()
	}
	return c
}

// ParseConfig binds args (and the file named by --config) into a Config and
// validates it, reporting every problem at once.
func ParseConfig(args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	c, envErrs, err := load(args, getenv, stderr)
	if err != nil {
		return nil, err
	}
	if c.ReplicaID == "" {
		c.ReplicaID, _ = os.Hostname()
	}
	return c, errors.Join(append(envErrs, c.Validate())...)
}

// newFlagSet binds every setting's flag onto the fields of c, as they
// hold now, and --config onto path.
func newFlagSet(c *Config, path *string) *flag.FlagSet {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	// The flag package would print its error and the whole flag list on
	// any mistake; a bad flag gets one line (and exit 2), --help the list.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // called on every parse error too
	fs.StringVar(path, "config", "", "optional YAML configuration file")
	for _, s := range c.settings() {
		s.bind(fs)
	}
	return fs
}

// load decodes the file onto the defaults, the environment over it and
// the flags over both; the environment's bad values come back apart so
// they are reported with the validation's.
func load(args []string, getenv func(string) string, stderr io.Writer) (*Config, []error, error) {
	// A first parse onto a scratch copy finds --config and refuses bad
	// flags before the file is read; the second binds onto the result.
	var path string
	scratch := defaults()
	fs := newFlagSet(&scratch, &path)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stderr, fs)
			return nil, nil, err
		}
		return nil, nil, cli.Usage(fmt.Errorf("%w (proxy --help lists the flags)", err))
	}
	if fs.NArg() > 0 {
		return nil, nil, cli.Usage(fmt.Errorf("unexpected arguments: %s (subcommands: proxy storage …; see proxy --help)", strings.Join(fs.Args(), " ")))
	}
	c := defaults()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		if errs := decodeConfigFile(data, &c); len(errs) > 0 {
			for i, err := range errs {
				errs[i] = fmt.Errorf("%s: %w", path, err)
			}
			return nil, nil, errors.Join(errs...)
		}
	}
	envErrs := applyEnv(&c, getenv)
	if err := newFlagSet(&c, &path).Parse(args); err != nil {
		return nil, nil, cli.Usage(err) // the first parse took the same arguments
	}
	return &c, envErrs, nil
}

// Validate reports every invalid setting, each with its key.
func (c *Config) Validate() error {
	var p problems
	for _, a := range areas {
		a.validate(c, &p)
	}
	return errors.Join(p.errs...)
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

// ---- relay area (docs/resilience.md, "Proxy path") ----

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

func defaultRelayConfig() RelayConfig { return defaults().Relay }

// admission returns the controller of the principals' caps this
// configuration governs; observe feeds the queue metrics.
func (c RelayConfig) admission(clk clock.Clock, observe func(time.Duration, bool)) *admission.Controller {
	n := c.QueueLength
	if n == 0 {
		n = -1 // none wait
	}
	return admission.New(admission.Options{QueueLength: n, MaxWait: c.QueueMaxWait, Clock: clk, Observe: observe})
}

// upstreamCaps returns the controller of the upstreams' max_in_flight:
// the same queue length and wait as a principal's (docs/routing.md).
func (c RelayConfig) upstreamCaps(clk clock.Clock) *admission.Controller {
	n := c.QueueLength
	if n == 0 {
		n = -1 // none wait
	}
	return admission.New(admission.Options{QueueLength: n, MaxWait: c.QueueMaxWait, Clock: clk, Subject: "upstream"})
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
