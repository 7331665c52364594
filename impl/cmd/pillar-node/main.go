// Command pillar-node is the CSI Node plugin: it stages volumes exported
// by pillar agents over NVMe/TCP (nvme-cli), or, with --connector=loop,
// volumes of a simulated agent as loop devices (development and tests).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"

	"github.com/pillarhq/pillar/impl/pillar/csiids"
	"github.com/pillarhq/pillar/impl/pillar/csinode"
	"github.com/pillarhq/pillar/impl/pillar/csiserver"
	"github.com/pillarhq/pillar/impl/pillar/logging"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

// Version is set at build time.
var Version = "dev"

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("pillar-node", flag.ContinueOnError)
	driver := fs.String("driver-name", "pillar-csi.pillarhq.io", "CSI driver name")
	endpoint := fs.String("csi-endpoint", "unix:///csi/csi.sock", "CSI endpoint (unix:///path or tcp://host:port)")
	nodeID := fs.String("node-id", "", "the Kubernetes node name (required)")
	hostNQNFile := fs.String("host-nqn-file", "/etc/nvme/hostnqn", "the host NQN nvme-cli uses; created when missing (mount the host's /etc/nvme so each node keeps its own)")
	hostIDFile := fs.String("host-id-file", "/etc/nvme/hostid", "the host ID nvme-cli uses; created when missing (the uuid of a generated host NQN)")
	ctrlLossTmo := fs.Int("ctrl-loss-tmo", 0, "seconds nvme connect keeps reconnecting a lost connection before failing I/O (-1: forever; 0: nvme-cli's 600); a StorageClass's ctrlLossTmo overrides it")
	reconnectDelay := fs.Int("reconnect-delay", 0, "seconds between reconnect attempts (0: nvme-cli's 10); a StorageClass's reconnectDelay overrides it")
	connector := fs.String("connector", "nvme", "nvme (nvme-cli over NVMe/TCP) or loop (volumes of a simulated agent as loop devices)")
	simRoot := fs.String("sim-root", "", "with --connector=loop: the simulated agent's --sim-root")
	stateDir := fs.String("state-dir", "/var/lib/pillar-csi/node", "node state (the loop connector's records)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *version {
		fmt.Println(Version)
		return 0
	}
	log, err := logging.New(*logLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pillar-node: %v\n", err)
		return 2
	}
	if *nodeID == "" {
		fmt.Fprintln(os.Stderr, "pillar-node: --node-id is required")
		return 2
	}
	if *ctrlLossTmo < -1 || *reconnectDelay < 0 {
		fmt.Fprintln(os.Stderr, "pillar-node: --ctrl-loss-tmo must be -1 or more and --reconnect-delay 0 or more")
		return 2
	}
	ident, err := csinode.HostIdentity(*hostNQNFile, *hostIDFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pillar-node: host NQN: %v\n", err)
		return 1
	}
	hostNQN := ident.NQN
	var conn csinode.Connector
	switch *connector {
	case "nvme":
		conn = &csinode.NVMeCLI{}
	case "loop":
		if *simRoot == "" {
			fmt.Fprintln(os.Stderr, "pillar-node: --connector=loop needs --sim-root")
			return 2
		}
		conn = loopConnector(*simRoot, nvmet.DefaultRoot, *stateDir)
	default:
		fmt.Fprintf(os.Stderr, "pillar-node: --connector %q: nvme or loop\n", *connector)
		return 2
	}
	node := &csinode.Server{NodeName: *nodeID, HostNQN: hostNQN, HostID: ident.ID, Connector: conn, Mounter: csinode.NewMounter(), Log: log,
		Reconnect: csinode.Reconnect{LossTimeoutSeconds: *ctrlLossTmo, DelaySeconds: *reconnectDelay}}
	node.TopologyKey = csiids.TopologyKey(*driver) // issue 20.8
	lis, err := csiserver.Listen(*endpoint)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pillar-node: %v\n", err)
		return 1
	}
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(csiserver.Logging(log)))
	// The driver as a whole offers the controller service (served by
	// pillar-controller); tools that only see the node socket ask here.
	csi.RegisterIdentityServer(gs, &csiserver.Identity{Name: *driver, Version: Version, Controller: true, Topology: true})
	csi.RegisterNodeServer(gs, node)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); gs.GracefulStop() }()
	log.Info("node_started", "endpoint", *endpoint, "node", *nodeID, "host_nqn", hostNQN, "connector", *connector, "version", Version)
	if err := gs.Serve(lis); err != nil {
		log.Error("node_failed", "error", err.Error())
		return 1
	}
	return 0
}
