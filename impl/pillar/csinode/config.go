package csinode

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/pillar/logging"
)

// Config is pillar-node's command line.
type Config struct {
	Driver         string
	Endpoint       string
	NodeID         string
	HostNQNFile    string
	HostIDFile     string
	CtrlLossTmo    int
	ReconnectDelay int
	FastIOFailTmo  int
	KeepAliveTmo   int
	Connector      string
	StateDir       string
	LogLevel       string
	Version        bool
}

// ParseConfig binds the flags (and those of the options) into a Config
// and checks them, reporting every bad value at once.
func ParseConfig(args []string, stderr io.Writer, opts ...Option) (*Config, error) {
	return parseConfig(args, stderr, collect(opts))
}

func parseConfig(args []string, stderr io.Writer, o *options) (*Config, error) {
	var c Config
	fs := flag.NewFlagSet("pillar-node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Driver, "driver-name", "pillar-csi.pillarhq.io", "CSI driver name")
	fs.StringVar(&c.Endpoint, "csi-endpoint", "unix:///csi/csi.sock", "CSI endpoint (unix:///path or tcp://host:port)")
	fs.StringVar(&c.NodeID, "node-id", "", "the Kubernetes node name (required)")
	fs.StringVar(&c.HostNQNFile, "host-nqn-file", "/etc/nvme/hostnqn", "the host NQN nvme-cli uses; created when missing (mount the host's /etc/nvme so each node keeps its own)")
	fs.StringVar(&c.HostIDFile, "host-id-file", "/etc/nvme/hostid", "the host ID nvme-cli uses; created when missing (the uuid of a generated host NQN)")
	fs.IntVar(&c.CtrlLossTmo, "ctrl-loss-tmo", 0, "seconds nvme connect keeps reconnecting a lost connection before failing I/O (-1: forever; 0: nvme-cli's 600); a StorageClass's ctrlLossTmo overrides it")
	fs.IntVar(&c.ReconnectDelay, "reconnect-delay", 0, "seconds between reconnect attempts (0: nvme-cli's 10); a StorageClass's reconnectDelay overrides it")
	fs.IntVar(&c.FastIOFailTmo, "fast-io-fail-tmo", 0, "seconds after a connection is lost that I/O fails while reconnecting goes on (-1: I/O waits for the whole ctrl-loss-tmo; 0: the kernel's default, off); a StorageClass's fastIOFailTmo overrides it")
	fs.IntVar(&c.KeepAliveTmo, "keep-alive-tmo", 0, "seconds between the host's keep-alive checks of the target (0: the kernel's 5); a StorageClass's keepAliveTmo overrides it")
	fs.StringVar(&c.Connector, "connector", "nvme", "how volumes attach: "+o.connectorHelp())
	fs.StringVar(&c.StateDir, "state-dir", "/var/lib/pillar-csi/node", "node state (the loop connector's records)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&c.Version, "version", false, "print the version and exit")
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
	if c.NodeID == "" {
		errs = append(errs, errors.New("--node-id is required"))
	}
	if c.CtrlLossTmo < -1 || c.ReconnectDelay < 0 {
		errs = append(errs, errors.New("--ctrl-loss-tmo must be -1 or more and --reconnect-delay 0 or more"))
	}
	if c.FastIOFailTmo < -1 || c.KeepAliveTmo < 0 {
		errs = append(errs, errors.New("--fast-io-fail-tmo must be -1 or more and --keep-alive-tmo 0 or more"))
	}
	if _, ok := o.connectors[c.Connector]; !ok {
		errs = append(errs, fmt.Errorf("--connector %q: %s", c.Connector, strings.Join(o.connectorNames(), " or ")))
	}
	errs = append(errs, checks.Run(&c)...)
	if err := errors.Join(errs...); err != nil {
		return nil, cli.Usage(err)
	}
	return &c, nil
}

func (o *options) connectorNames() []string {
	names := make([]string, 0, len(o.connectors))
	for n := range o.connectors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (o *options) connectorHelp() string {
	var parts []string
	for _, n := range o.connectorNames() {
		parts = append(parts, n+" ("+o.connectors[n].help+")")
	}
	return strings.Join(parts, " or ")
}
