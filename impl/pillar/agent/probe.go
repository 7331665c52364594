package agent

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Probe answers the kubelet's liveness probe on plain HTTP (the gRPC port
// may demand client certificates, which the kubelet has none of):
// GET /healthz is 200 while the agent's gRPC service reports SERVING, 500
// once it stops. It says nothing about pools or the kernel target:
// restarting the agent mends neither (GetHealth reports them).
type Probe struct {
	Health *health.Server
}

func (p Probe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/healthz" {
		http.NotFound(w, r)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	resp, err := p.Health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		http.Error(w, fmt.Sprintf("agent not serving: %v %v", resp.GetStatus(), err), http.StatusInternalServerError)
		return
	}
	fmt.Fprintln(w, "ok")
}
