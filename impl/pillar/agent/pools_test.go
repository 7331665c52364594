package agent

import (
	"context"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/backend/lvm"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

// meetingRunner answers vgs for any group, but only once every group's
// vgs is running: backends discovered one after another never meet.
type meetingRunner struct {
	arrived sync.WaitGroup
	all     chan struct{}
	once    sync.Once
}

func (r *meetingRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	vg := args[len(args)-1]
	r.arrived.Done()
	go r.once.Do(func() { r.arrived.Wait(); close(r.all) })
	select {
	case <-r.all:
	case <-time.After(10 * time.Second):
		return nil, &backend.CommandError{Name: name, Args: args, ExitCode: 5, Stderr: "the other backends were not discovered meanwhile"}
	}
	return []byte(`{"report":[{"vg":[{"vg_name":"` + vg + `","vg_size":"1073741824","vg_free":"536870912","vg_extent_size":"4194304"}]}]}`), nil
}

// ListPools discovers the backends at once (the controller asks before
// every create) and still lists them by name with their own reports.
func TestListPoolsDiscoversAtOnce(t *testing.T) {
	t.Parallel()
	r := &meetingRunner{all: make(chan struct{})}
	r.arrived.Add(3)
	set, err := backend.NewSet(
		lvm.New(lvm.Config{VolumeGroup: "vgc", DeviceRoot: "/sim"}, r),
		lvm.New(lvm.Config{VolumeGroup: "vga", DeviceRoot: "/sim"}, r),
		lvm.New(lvm.Config{VolumeGroup: "vgb", DeviceRoot: "/sim"}, r),
	)
	if err != nil {
		t.Fatal(err)
	}
	srv := mustNew(t, Options{Backends: set, Exporter: &nvmet.Exporter{FS: nvmet.OSFS{}, Root: t.TempDir()}})
	resp, err := srv.ListPools(context.Background(), &agentv1.ListPoolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range resp.GetPools() {
		if !p.GetHealthy() || p.GetFreeBytes() != 512<<20 {
			t.Errorf("pool %s: %+v", p.GetName(), p)
		}
		names = append(names, p.GetName())
	}
	if len(names) != 3 || names[0] != "vga" || names[1] != "vgb" || names[2] != "vgc" {
		t.Fatalf("pools %v, want vga, vgb, vgc", names)
	}
}

func mustNew(t *testing.T, o Options) *Server {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
