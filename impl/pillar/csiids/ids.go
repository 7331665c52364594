// Package csiids holds the driver's CSI identifiers. A volume id names the
// store, the pool and the volume ("<store>/<pool>/<name>") so every call
// about a volume reaches its agent without looking anything up, and the
// node derives the subsystem NQN from it alone. A node id carries the
// node's name and its NVMe host NQN ("<node>/<hostnqn>"): the controller
// allows exactly that host on publish.
package csiids

import (
	"fmt"
	"strings"

	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

// Volume is a parsed volume id.
type Volume struct {
	Store, Pool, Name string
}

func (v Volume) String() string { return v.Store + "/" + v.Pool + "/" + v.Name }

// ExportID is the agent's export id of the volume (pool and name).
func (v Volume) ExportID() string { return nvmet.ExportID(v.Pool, v.Name) }

// NQN is the subsystem NQN the agent exports the volume under.
func (v Volume) NQN() string { return nvmet.NQN(v.ExportID()) }

// ParseVolume parses "<store>/<pool>/<name>". Store names are Kubernetes
// object names and pool names ZFS or LVM names: neither holds '/'.
func ParseVolume(id string) (Volume, error) {
	parts := strings.Split(id, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return Volume{}, fmt.Errorf("volume id %q is not <store>/<pool>/<name>", id)
	}
	return Volume{Store: parts[0], Pool: parts[1], Name: parts[2]}, nil
}

// Node is a parsed node id.
type Node struct {
	Name, HostNQN string
}

func (n Node) String() string { return n.Name + "/" + n.HostNQN }

// ParseNode parses "<node>/<hostnqn>".
func ParseNode(id string) (Node, error) {
	name, nqn, ok := strings.Cut(id, "/")
	if !ok || name == "" || !strings.HasPrefix(nqn, "nqn.") || strings.Contains(nqn, "/") {
		return Node{}, fmt.Errorf("node id %q is not <node>/<host NQN>", id)
	}
	return Node{Name: name, HostNQN: nqn}, nil
}

// TopologyKey is the topology segment key NodeGetInfo reports, valued
// with the node's name: it tells Kubernetes which nodes run
// the node plugin and gives the provisioner's capacity tracking its
// segments. Volumes carry no topology: NVMe/TCP reaches a store's agent
// from every node (docs/pillar-csi.md, "Topology and capacity").
func TopologyKey(driver string) string { return driver + "/node" }

// Snapshot is a parsed snapshot id, "<store>/<pool>/<name>" like a volume
// id: the store reaches the agent, the pool and name the backend's
// snapshot (names are unique per pool whatever the source volume).
type Snapshot struct {
	Store, Pool, Name string
}

func (s Snapshot) String() string { return s.Store + "/" + s.Pool + "/" + s.Name }

// ParseSnapshot parses "<store>/<pool>/<name>".
func ParseSnapshot(id string) (Snapshot, error) {
	v, err := ParseVolume(id)
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshot id %q is not <store>/<pool>/<name>", id)
	}
	return Snapshot(v), nil
}
