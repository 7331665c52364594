package agent

import (
	"errors"
	"flag"
	"io"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/pillar/logging"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

// Config is pillar-agent's command line. The backends are in the file
// it names (agentconfig).
type Config struct {
	ConfigFile    string
	CheckConfig   bool
	Listen        string
	HealthListen  string
	MTLSCertDir   string
	NvmetRoot     string
	NvmetAddress  string
	NvmetPort     int
	NvmetPortID   int
	ToolsDir      string
	DeviceRoot    string
	StateDir      string
	LogLevel      string
	Version       bool
	MetricsListen string // Prometheus /metrics listen address (empty: none)
}

// ParseConfig binds the flags (and those of the options) into a Config
// and checks them, reporting every bad value at once.
func ParseConfig(args []string, stderr io.Writer, opts ...Option) (*Config, error) {
	return parseConfig(args, stderr, collect(opts))
}

func parseConfig(args []string, stderr io.Writer, o *options) (*Config, error) {
	var c Config
	fs := flag.NewFlagSet("pillar-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.ConfigFile, "config", "/etc/pillar-csi/agent/config.yaml", "agent configuration file (the backends list)")
	fs.BoolVar(&c.CheckConfig, "check-config", false, "validate the configuration and exit (0 when valid)")
	fs.StringVar(&c.Listen, "listen", ":9500", "gRPC listen address")
	fs.StringVar(&c.HealthListen, "health-listen", "", "plain HTTP address of the liveness endpoint GET /healthz (empty: none)")
	fs.StringVar(&c.MTLSCertDir, "mtls-cert-dir", "", "directory with tls.crt, tls.key and ca.crt; enables mTLS (client certificates required)")
	fs.StringVar(&c.NvmetRoot, "nvmet-root", nvmet.DefaultRoot, "the kernel NVMe target's configfs directory")
	fs.StringVar(&c.NvmetAddress, "nvmet-address", "0.0.0.0", "address the NVMe/TCP port listens on (0.0.0.0: every IPv4 address of the node)")
	fs.IntVar(&c.NvmetPort, "nvmet-port", 4420, "NVMe/TCP service port")
	fs.IntVar(&c.NvmetPortID, "nvmet-port-id", 1, "configfs id of the target port the agent owns")
	fs.StringVar(&c.ToolsDir, "tools-dir", "", "directory holding zfs, zpool and the LVM tools (default: PATH)")
	fs.StringVar(&c.DeviceRoot, "device-root", "/dev", "directory standing for /dev in device paths")
	fs.StringVar(&c.StateDir, "state-dir", "/var/lib/pillar-csi/agent", "directory of what outlives a restart of the agent: the exports' generations, so requests decided before a restart are still refused as stale (empty: kept in memory only)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&c.Version, "version", false, "print the version and exit")
	fs.StringVar(&c.MetricsListen, "metrics-listen", "", "address of the Prometheus /metrics endpoint (pool capacity, exports, call durations); empty disables it")
	checks := cli.Bind(fs, o.flags)
	if err := fs.Parse(args); err != nil {
		return nil, &cli.UsageError{Err: err, Printed: true}
	}
	if c.Version {
		return &c, nil
	}
	var errs []error
	if _, err := logging.Level(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checks.Run(&c)...)
	if err := errors.Join(errs...); err != nil {
		return nil, cli.Usage(err)
	}
	return &c, nil
}
