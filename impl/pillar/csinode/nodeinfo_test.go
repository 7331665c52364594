package csinode

import (
	"context"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/pillarhq/pillar/impl/service"
)

// The node reports its name under the topology key, so kubelet labels
// the node and the provisioner's capacity tracking finds a segment.
func TestNodeGetInfoReportsTopology(t *testing.T) {
	t.Parallel()
	s := service.Init(service.Options{}, &Server{NodeName: "worker-1", HostNQN: "nqn.2014-08.org.nvmexpress:uuid:1", TopologyKey: "pillar-csi.example.io/node"})
	resp, err := s.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.NodeId != "worker-1/nqn.2014-08.org.nvmexpress:uuid:1" {
		t.Fatalf("node id %q", resp.NodeId)
	}
	if got := resp.GetAccessibleTopology().GetSegments(); len(got) != 1 || got["pillar-csi.example.io/node"] != "worker-1" {
		t.Fatalf("topology %v", got)
	}
	s.TopologyKey = ""
	if resp, _ := s.NodeGetInfo(context.Background(), &csi.NodeGetInfoRequest{}); resp.AccessibleTopology != nil {
		t.Fatalf("topology %v without a key", resp.AccessibleTopology)
	}
}
