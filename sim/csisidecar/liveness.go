package csisidecar

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// Liveness answers /healthz with the plugin's Probe: 200 when it reports
// ready (or leaves readiness unset), 500 with the reason otherwise, as
// livenessprobe does for the kubelet's httpGet probe.
type Liveness struct {
	Conn    *grpc.ClientConn
	Timeout time.Duration // per probe; 1 s when zero
}

func (l *Liveness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/healthz" {
		http.NotFound(w, r)
		return
	}
	timeout := l.Timeout
	if timeout == 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	resp, err := csi.NewIdentityClient(l.Conn).Probe(ctx, &csi.ProbeRequest{})
	switch {
	case err != nil:
		http.Error(w, fmt.Sprintf("probe failed: %v", err), http.StatusInternalServerError)
	case resp.GetReady() != nil && !resp.GetReady().GetValue():
		http.Error(w, "driver responded but is not ready", http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusOK)
		fmt.Fprintln(w, "ok")
	}
}
