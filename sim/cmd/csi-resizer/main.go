// Command csi-resizer stands in for the CSI external-resizer sidecar
// (sim/csisidecar.Resizer), under a Lease when --leader-election is set.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/pillarhq/pillar/sim/csisidecar"
)

func main() {
	var c csisidecar.Common
	fs := csisidecar.NewFlags("csi-resizer", "/run/csi/socket", &c)
	csisidecar.Parse(fs, &c, os.Args[1:])
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(c, log); err != nil {
		log.Error("csi-resizer", "error", err)
		os.Exit(1)
	}
}

func run(c csisidecar.Common, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	conn, err := csisidecar.Dial(c.CSIAddress)
	if err != nil {
		return err
	}
	driver, err := csisidecar.DriverName(ctx, conn)
	if err != nil {
		return err
	}
	bc := record.NewBroadcaster()
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer bc.Shutdown()
	r := &csisidecar.Resizer{
		Client: client, Conn: conn, Driver: driver, Log: log, Timeout: c.Timeout,
		Events: bc.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "external-resizer " + driver}),
	}
	if !c.LeaderElection {
		return r.Run(ctx)
	}
	ns := c.LeaderElectionNamespace
	if ns == "" {
		ns = csisidecar.PodNamespace()
	}
	id, _ := os.Hostname()
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, csisidecar.LeaseName("external-resizer", driver),
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: c.LeaseDuration, RenewDeadline: c.RenewDeadline, RetryPeriod: c.RetryPeriod,
		ReleaseOnCancel: true, Name: "external-resizer",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("leading", "lease", ns+"/"+csisidecar.LeaseName("external-resizer", driver))
				errc <- r.Run(ctx)
			},
			OnStoppedLeading: func() { log.Info("stopped leading") },
		},
	})
	select {
	case err := <-errc:
		if err != nil {
			return err
		}
	case <-time.After(0):
	}
	if ctx.Err() == nil {
		return fmt.Errorf("lost the lease")
	}
	return nil
}
