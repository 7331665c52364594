package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
	"github.com/pillarhq/pillar/impl/testing/promtest"
)

// The target's readiness and export count are read at scrape time, and
// every call is timed by method and status code. (Pool series are
// scraped from the real binary in conformance/agent.)
func TestMetrics(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	srv := mustNew(t, Options{Backends: backend.Set{}, Exporter: &nvmet.Exporter{FS: nvmet.OSFS{}, Root: root + "/missing"}})
	reg := prometheus.NewRegistry()
	m := NewMetrics(srv, reg)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pillar_agent_target_ready 1 when the kernel NVMe target's configfs tree is present.
# TYPE pillar_agent_target_ready gauge
pillar_agent_target_ready 0
`), "pillar_agent_target_ready", "pillar_agent_exports"); err != nil {
		t.Fatal(err)
	}
	srv.exporter.Root = root
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP pillar_agent_exports Volumes exported through the kernel NVMe target.
# TYPE pillar_agent_exports gauge
pillar_agent_exports 0
# HELP pillar_agent_target_ready 1 when the kernel NVMe target's configfs tree is present.
# TYPE pillar_agent_target_ready gauge
pillar_agent_target_ready 1
`), "pillar_agent_target_ready", "pillar_agent_exports"); err != nil {
		t.Fatal(err)
	}

	ic := m.Interceptor()
	call := func(method string, err error) {
		resp, got := ic(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/pillar.agent.v1.AgentService/" + method},
			func(context.Context, any) (any, error) { return "resp", err })
		if resp != "resp" || got != err { //nolint:errorlint // the very error, not one wrapping it
			t.Fatalf("interceptor changed the answer: %v %v", resp, got)
		}
	}
	call("ExportVolume", nil)
	call("ExportVolume", nil)
	call("DeleteVolume", status.Error(codes.FailedPrecondition, "busy"))
	if n := testutil.CollectAndCount(m.ops); n != 2 {
		t.Fatalf("%d series, want 2", n)
	}
	exported := promtest.Value(t, reg, "pillar_agent_operations_seconds", "method", "ExportVolume", "grpc_status_code", "OK")
	refused := promtest.Value(t, reg, "pillar_agent_operations_seconds", "method", "DeleteVolume", "grpc_status_code", "FailedPrecondition")
	if exported != 2 || refused != 1 {
		t.Fatalf("sample counts: ExportVolume/OK %v, DeleteVolume/FailedPrecondition %v; want 2 and 1", exported, refused)
	}
}
