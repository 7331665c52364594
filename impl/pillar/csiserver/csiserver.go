// Package csiserver serves CSI services on a unix socket (or TCP) and
// implements the Identity service both the controller and the node serve.
package csiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Listen opens a CSI endpoint: "unix:///csi/csi.sock", "unix:/path",
// a bare path, or "tcp://host:port". A stale unix socket is removed.
func Listen(endpoint string) (net.Listener, error) {
	network, addr := "unix", endpoint
	if u, err := url.Parse(endpoint); err == nil && u.Scheme != "" {
		switch u.Scheme {
		case "unix":
			addr = u.Path
			if addr == "" {
				addr = u.Opaque
			}
		case "tcp":
			network, addr = "tcp", u.Host
		default:
			return nil, fmt.Errorf("endpoint %q: scheme must be unix or tcp", endpoint)
		}
	}
	if network == "unix" {
		if err := os.MkdirAll(filepath.Dir(addr), 0o755); err != nil {
			return nil, err
		}
		if err := os.Remove(addr); err != nil && !os.IsNotExist(err) {
			return nil, err
		}
	}
	return net.Listen(network, addr)
}

// Identity is the CSI Identity service.
type Identity struct {
	csi.UnimplementedIdentityServer
	Name, Version string
	// Controller says whether the controller service is offered.
	Controller bool
	// Topology says nodes report topology segments, which
	// the provisioner's capacity tracking needs.
	Topology bool
	// Ready is the Probe answer; nil means always ready.
	Ready func(ctx context.Context) error
}

func (i *Identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.Name, VendorVersion: i.Version}, nil
}

func (i *Identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	caps := []*csi.PluginCapability{{Type: &csi.PluginCapability_VolumeExpansion_{
		VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_ONLINE}}}}
	if i.Controller {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}})
	}
	if i.Topology {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_Service_{
			Service: &csi.PluginCapability_Service{Type: csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

func (i *Identity) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	if i.Ready != nil {
		if err := i.Ready(ctx); err != nil {
			return &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil
		}
	}
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// Logging logs every CSI call: info for mutations, debug for reads,
// warn for failures.
func Logging(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		lvl := slog.LevelDebug
		if !strings.HasPrefix(method, "Get") && !strings.HasPrefix(method, "List") && method != "Probe" && !strings.HasSuffix(method, "Capabilities") && !strings.HasPrefix(method, "Validate") {
			lvl = slog.LevelInfo
		}
		if err != nil {
			lvl = slog.LevelWarn
		}
		log.Log(ctx, lvl, "csi_call", "method", method, "code", status.Code(err).String(),
			"duration_ms", float64(time.Since(start).Microseconds())/1000, "error", status.Convert(err).Message())
		return resp, err
	}
}

// Metrics observes every CSI call's duration in
// pillar_csi_operations_seconds{method, grpc_status_code}, registered on
// reg: the driver-side counterpart of the sidecars' csi_sidecar_operations_seconds.
func Metrics(reg prometheus.Registerer) grpc.UnaryServerInterceptor {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "pillar_csi_operations_seconds",
		Help:    "Duration of CSI calls served by the driver, by method and gRPC status code.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"method", "grpc_status_code"})
	// A second server on the same registry (controller replicas in one
	// process, the envtest suite) shares the first one's histogram.
	if err := reg.Register(h); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			panic(err)
		}
		h = are.ExistingCollector.(*prometheus.HistogramVec)
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		h.WithLabelValues(method, status.Code(err).String()).Observe(time.Since(start).Seconds())
		return resp, err
	}
}
