// Command csi-node-driver-registrar stands in for the CSI
// node-driver-registrar sidecar (sim/csisidecar.Registrar): it registers
// the node plugin with the kubelet's plugin watcher.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pillarhq/pillar/sim/csisidecar"
)

func main() {
	var c csisidecar.Common
	fs := csisidecar.NewFlags("csi-node-driver-registrar", "/run/csi/socket", &c)
	regPath := fs.String("kubelet-registration-path", "", "the plugin's socket path on the host (required)")
	dir := fs.String("plugin-registration-path", "/registration", "the kubelet's plugins_registry directory as mounted")
	fs.String("mode", "registration", "accepted for compatibility; only registration is served")
	csisidecar.Parse(fs, &c, os.Args[1:])
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if *regPath == "" {
		log.Error("--kubelet-registration-path is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	conn, err := csisidecar.Dial(c.CSIAddress)
	if err != nil {
		log.Error("dial", "error", err)
		os.Exit(1)
	}
	name, err := csisidecar.DriverName(ctx, conn)
	if err != nil {
		log.Error("driver name", "error", err)
		os.Exit(1)
	}
	r := &csisidecar.Registrar{Driver: name, Endpoint: *regPath, Dir: *dir, Log: log}
	if c.HTTPEndpoint != "" {
		go func() {
			h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if _, err := os.Stat(r.SocketPath()); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				fmt.Fprintln(w, "ok")
			})
			srv := &http.Server{Addr: c.HTTPEndpoint, Handler: h, ReadHeaderTimeout: 5 * time.Second}
			log.Error("health endpoint", "error", srv.ListenAndServe())
		}()
	}
	if err := r.Run(ctx); err != nil {
		log.Error("registrar", "error", err)
		os.Exit(1)
	}
}
