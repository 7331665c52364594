package csisidecar

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// Common are the flags every real sidecar accepts; the stand-ins take them
// so a chart's arguments never make them exit, and use what applies.
type Common struct {
	CSIAddress   string
	HTTPEndpoint string
	Timeout      time.Duration
	Kubeconfig   string
	Version      bool

	LeaderElection          bool
	LeaderElectionNamespace string
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration
}

// NewFlags returns the flag set of a stand-in with the common flags bound.
func NewFlags(name, defaultAddress string, c *Common) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.StringVar(&c.CSIAddress, "csi-address", defaultAddress, "CSI endpoint (path or unix:// URL)")
	fs.StringVar(&c.HTTPEndpoint, "http-endpoint", "", "address of the HTTP server (health, and metrics for the real sidecars)")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Second, "timeout of CSI calls")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig; in-cluster configuration when empty")
	fs.BoolVar(&c.Version, "version", false, "print the version and exit")
	fs.BoolVar(&c.LeaderElection, "leader-election", false, "hold a Lease while working")
	fs.StringVar(&c.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the Lease; the pod's own when empty")
	fs.DurationVar(&c.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "lease duration")
	fs.DurationVar(&c.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "renew deadline")
	fs.DurationVar(&c.RetryPeriod, "leader-election-retry-period", 5*time.Second, "retry period")
	// Accepted and ignored: logging, metrics and tuning knobs of the real
	// sidecars.
	for _, n := range []string{"v", "metrics-address", "metrics-path", "kube-api-qps", "kube-api-burst", "workers", "resync-period",
		"retry-interval-start", "retry-interval-max", "health-port", "handle-volume-inuse-error", "feature-gates", "logging-format"} {
		fs.String(n, "", "accepted for compatibility; ignored")
	}
	return fs
}

// Parse parses args, exiting 2 on a bad flag and 0 after printing the
// version for --version, as the real sidecars do.
func Parse(fs *flag.FlagSet, c *Common, args []string) {
	if err := fs.Parse(args); err != nil {
		os.Exit(2)
	}
	if c.Version {
		fmt.Println(fs.Name() + " stand-in (pillar sim)")
		os.Exit(0)
	}
}

// PodNamespace is the namespace of the pod the process runs in ("default"
// outside a pod).
func PodNamespace() string {
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return "default"
	}
	return strings.TrimSpace(string(b))
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9-]`)

// LeaseName is the Lease a sidecar holds for driver, named as
// csi-lib-utils names it (component-<driver with other characters as ->).
func LeaseName(component, driver string) string {
	return component + "-" + unsafeName.ReplaceAllString(driver, "-")
}
