// Command livenessprobe stands in for the CSI livenessprobe sidecar
// (sim/csisidecar.Liveness): /healthz calls the plugin's Probe.
package main

import (
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/pillarhq/pillar/sim/csisidecar"
)

func main() {
	var c csisidecar.Common
	fs := csisidecar.NewFlags("livenessprobe", "/run/csi/socket", &c)
	probeTimeout := fs.Duration("probe-timeout", time.Second, "timeout of each Probe call")
	csisidecar.Parse(fs, &c, os.Args[1:])
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	addr := c.HTTPEndpoint
	if addr == "" {
		addr = ":9808"
	}
	conn, err := csisidecar.Dial(c.CSIAddress)
	if err != nil {
		log.Error("dial", "error", err)
		os.Exit(1)
	}
	log.Info("serving /healthz", "address", addr, "csi_address", c.CSIAddress)
	srv := &http.Server{Addr: addr, Handler: &csisidecar.Liveness{Conn: conn, Timeout: *probeTimeout}, ReadHeaderTimeout: 5 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		log.Error("serve", "error", err)
		os.Exit(1)
	}
}
