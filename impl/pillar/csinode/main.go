package csinode

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/pillar/csiids"
	"github.com/pillarhq/pillar/impl/pillar/csiserver"
	"github.com/pillarhq/pillar/impl/pillar/logging"
	"github.com/pillarhq/pillar/impl/service"
)

// Version is set at build time (-X …/impl/pillar/csinode.Version=…).
var Version = "dev"

// Option changes how Main wires the node. Production passes none; the
// simulated variant (conformance/simnode) adds the loop connector.
type Option func(*options)

type connector struct {
	help string
	open func(*Config) (Connector, error)
}

type options struct {
	flags      []cli.FlagBinder[Config]
	connectors map[string]connector
	stdout     io.Writer
}

func collect(opts []Option) *options {
	o := &options{stdout: os.Stdout, connectors: map[string]connector{
		"nvme": {help: "nvme-cli over NVMe/TCP", open: func(*Config) (Connector, error) { return &NVMeCLI{}, nil }},
	}}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// WithFlags binds more flags into Main's flag set; the check it returns
// (nil: none) runs with the others once the command line is parsed.
func WithFlags(bind func(fs *flag.FlagSet) (check func(*Config) error)) Option {
	return func(o *options) { o.flags = append(o.flags, bind) }
}

// WithConnector offers --connector=name (help: what it attaches); open
// builds it from the checked command line.
func WithConnector(name, help string, open func(*Config) (Connector, error)) Option {
	return func(o *options) { o.connectors[name] = connector{help: help, open: open} }
}

// WithStdout is where --version prints (default os.Stdout).
func WithStdout(w io.Writer) Option { return func(o *options) { o.stdout = w } }

// Main is pillar-node: it parses args and serves the CSI Identity and
// Node services until ctx ends. Usage errors are cli.UsageError.
func Main(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, opts ...Option) error {
	o := collect(opts)
	c, err := parseConfig(args, stderr, o)
	if err != nil {
		return err
	}
	if c.Version {
		fmt.Fprintln(o.stdout, Version)
		return nil
	}
	log, err := logging.New(stderr, c.LogLevel)
	if err != nil {
		return err
	}
	ident, err := HostIdentity(c.HostNQNFile, c.HostIDFile)
	if err != nil {
		return fmt.Errorf("host NQN: %w", err)
	}
	conn, err := o.connectors[c.Connector].open(c)
	if err != nil {
		return fmt.Errorf("--connector %s: %w", c.Connector, err)
	}
	node := service.Init(service.Options{Logger: log}, &Server{NodeName: c.NodeID, HostNQN: ident.NQN, HostID: ident.ID, Connector: conn, Mounter: NewMounter(),
		Reconnect: Reconnect{LossTimeoutSeconds: c.CtrlLossTmo, DelaySeconds: c.ReconnectDelay,
			FastIOFailSeconds: c.FastIOFailTmo, KeepAliveSeconds: c.KeepAliveTmo}})
	node.TopologyKey = csiids.TopologyKey(c.Driver) // capacity tracking needs the node's segment
	lis, err := csiserver.Listen(c.Endpoint)
	if err != nil {
		return err
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(csiserver.Logging(log)))
	// The driver as a whole offers the controller service (served by
	// pillar-controller); tools that only see the node socket ask here.
	csi.RegisterIdentityServer(gs, &csiserver.Identity{Name: c.Driver, Version: Version, Controller: true, Topology: true})
	csi.RegisterNodeServer(gs, node)
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			gs.GracefulStop()
		case <-stopped:
		}
	}()
	defer close(stopped)
	log.Info("node_started", "endpoint", c.Endpoint, "node", c.NodeID, "host_nqn", ident.NQN, "connector", c.Connector, "version", Version)
	return gs.Serve(lis)
}
