package controller

import (
	"errors"
	"flag"
	"io"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/pillar/logging"
)

// Config is pillar-controller's command line.
type Config struct {
	Driver                  string
	Endpoint                string
	StandaloneStores        string
	MTLSCertDir             string
	MTLSServerName          string
	ProbeAddr               string
	MetricsAddr             string
	LeaderElect             bool
	LeaderElectionNamespace string
	AgentPort               int
	WebhookPort             int
	WebhookCertDir          string
	LogLevel                string
}

// ParseConfig binds the flags into a Config and checks them, reporting
// every bad value at once.
func ParseConfig(args []string, stderr io.Writer) (*Config, error) {
	var c Config
	fs := flag.NewFlagSet("pillar-controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Driver, "driver-name", "pillar-csi.pillarhq.io", "CSI driver name (also the API group and label domain)")
	fs.StringVar(&c.Endpoint, "csi-endpoint", "unix:///csi/csi.sock", "CSI endpoint (unix:///path or tcp://host:port)")
	fs.StringVar(&c.StandaloneStores, "standalone-stores", "", "run outside Kubernetes with the stores of this file")
	fs.StringVar(&c.MTLSCertDir, "mtls-cert-dir", "", "tls.crt, tls.key, ca.crt for mTLS to the agents (plaintext when empty)")
	fs.StringVar(&c.MTLSServerName, "mtls-server-name", "", "server name checked against agent certificates (default: the dialled host)")
	fs.StringVar(&c.ProbeAddr, "health-probe-bind-address", ":8081", "health probe address")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", ":8080", "metrics address")
	fs.BoolVar(&c.LeaderElect, "leader-elect", false, "elect a leader among replicas for the reconcilers")
	fs.StringVar(&c.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader-election lease")
	fs.IntVar(&c.AgentPort, "agent-port", 9500, "agent gRPC port for agents naming none")
	fs.IntVar(&c.WebhookPort, "webhook-port", 0, "webhook server port (0: off)")
	fs.StringVar(&c.WebhookCertDir, "webhook-cert-dir", "", "webhook serving certificate directory")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, &cli.UsageError{Err: err, Printed: true}
	}
	var errs []error
	if _, err := logging.Level(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, cli.Usage(err)
	}
	return &c, nil
}
