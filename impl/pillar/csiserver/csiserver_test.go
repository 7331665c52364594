package csiserver

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/pillarhq/pillar/impl/testing/promtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Every call lands in pillar_csi_operations_seconds with its method and
// status code; the handler's answer passes through untouched.
func TestMetricsObservesCalls(t *testing.T) {
	reg := prometheus.NewRegistry()
	ic := Metrics(reg)
	call := func(method string, err error) {
		resp, got := ic(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Controller/" + method},
			func(context.Context, any) (any, error) { return "resp", err })
		if resp != "resp" || got != err { //nolint:errorlint // the very error, not one wrapping it
			t.Fatalf("interceptor changed the answer: %v %v", resp, got)
		}
	}
	call("CreateVolume", nil)
	call("CreateVolume", nil)
	call("DeleteVolume", status.Error(codes.NotFound, "gone"))
	if n := testutil.CollectAndCount(reg, "pillar_csi_operations_seconds"); n != 2 {
		t.Fatalf("%d series, want 2 (CreateVolume/OK, DeleteVolume/NotFound)", n)
	}
	created := promtest.Value(t, reg, "pillar_csi_operations_seconds", "method", "CreateVolume", "grpc_status_code", "OK")
	deleted := promtest.Value(t, reg, "pillar_csi_operations_seconds", "method", "DeleteVolume", "grpc_status_code", "NotFound")
	if created != 2 || deleted != 1 {
		t.Fatalf("sample counts: CreateVolume/OK %v, DeleteVolume/NotFound %v; want 2 and 1", created, deleted)
	}
}

// Two servers on one registry (controller replicas in one process) share
// the histogram instead of panicking on the second registration.
func TestMetricsSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, b := Metrics(reg), Metrics(reg)
	info := &grpc.UnaryServerInfo{FullMethod: "/csi.v1.Controller/CreateVolume"}
	ok := func(context.Context, any) (any, error) { return nil, nil }
	a(context.Background(), nil, info, ok)
	b(context.Background(), nil, info, ok)
	if n := promtest.Value(t, reg, "pillar_csi_operations_seconds", "method", "CreateVolume"); n != 2 {
		t.Fatalf("%v samples, want 2 (one per server)", n)
	}
}

// Topology is advertised only when asked for: only the node plugin reports
// segments (docs/pillar-csi.md, "Topology and capacity").
func TestIdentityAdvertisesTopology(t *testing.T) {
	has := func(i *Identity) bool {
		resp, err := i.GetPluginCapabilities(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range resp.Capabilities {
			if c.GetService().GetType() == csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS {
				return true
			}
		}
		return false
	}
	if has(&Identity{Controller: true}) || !has(&Identity{Controller: true, Topology: true}) {
		t.Fatal("VOLUME_ACCESSIBILITY_CONSTRAINTS must follow Identity.Topology")
	}
}
