// Command hello-populator stands in for the hello populator of the
// Kubernetes CSI volume populator library (sim/hellopopulator), with its
// flags: --mode=controller watches claims, --mode=populate is the pod that
// writes a Hello's file into a volume.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pillarhq/pillar/sim/hellopopulator"
)

func main() {
	fs := flag.NewFlagSet("hello-populator", flag.ContinueOnError)
	mode := fs.String("mode", "", "controller or populate")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig; in-cluster configuration when empty")
	namespace := fs.String("namespace", "hello", "namespace of the prime claims and populator pods")
	image := fs.String("image-name", "", "image of the populator pods")
	fileName := fs.String("file-name", "", "populate: the file to write")
	contents := fs.String("file-contents", "", "populate: what to write")
	mountPath := fs.String("mount-path", hellopopulator.MountPath, "populate: where the volume is mounted")
	devicePath := fs.String("device-path", "", "populate: the block device, for a block volume")
	// Accepted and ignored: the real populator's metrics and logging.
	for _, n := range []string{"http-endpoint", "metrics-path", "v"} {
		fs.String(n, "", "accepted for compatibility; ignored")
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	switch *mode {
	case "populate":
		if err := hellopopulator.Populate(*mountPath, *devicePath, *fileName, *contents); err != nil {
			log.Error("populate", "error", err)
			os.Exit(1)
		}
	case "controller":
		if *image == "" {
			log.Error("--image-name is required")
			os.Exit(2)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			log.Error("kubeconfig", "error", err)
			os.Exit(1)
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			log.Error("client", "error", err)
			os.Exit(1)
		}
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			log.Error("client", "error", err)
			os.Exit(1)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		log.Info("populating claims from Hello objects", "namespace", *namespace, "image", *image)
		(&hellopopulator.Populator{Client: client, Dynamic: dyn, Namespace: *namespace, Image: *image, Log: log}).Run(ctx)
	default:
		log.Error("--mode must be controller or populate", "mode", *mode)
		os.Exit(2)
	}
}
