// Package stores is what the CSI controller knows of a store: the agent
// that serves it and its backend placement (the store resource's spec, or
// an entry of the standalone stores file), and the layout check of rule 8:
// a store's parentDataset and thinPool must equal the agent's
// configuration for that pool or group, or the store is not Ready
// (PoolDiscovered False, reason BackendLayoutMismatch) and no volume is
// created on it.
package stores

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"

	"sigs.k8s.io/yaml"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
)

// ZFS is a ZFS placement.
type ZFS struct {
	Pool          string            `json:"pool"`
	ParentDataset string            `json:"parentDataset,omitempty"`
	Properties    map[string]string `json:"properties,omitempty"`
}

// LVM is an LVM placement.
type LVM struct {
	VolumeGroup      string `json:"volumeGroup"`
	ThinPool         string `json:"thinPool,omitempty"`
	ProvisioningMode string `json:"provisioningMode,omitempty"`
}

// Backend is exactly one of ZFS and LVM.
type Backend struct {
	ZFS *ZFS `json:"zfs,omitempty"`
	LVM *LVM `json:"lvm,omitempty"`
}

// Store is one store.
type Store struct {
	Name string `json:"name"`
	// Agent is the agent's gRPC address, host:port.
	Agent   string  `json:"agent"`
	Backend Backend `json:"backend"`
}

// Pool is the pool or volume group name.
func (s Store) Pool() string {
	switch {
	case s.Backend.ZFS != nil:
		return s.Backend.ZFS.Pool
	case s.Backend.LVM != nil:
		return s.Backend.LVM.VolumeGroup
	}
	return ""
}

// ErrNotFound: no store of that name.
var ErrNotFound = errors.New("store not found")

// Source finds stores.
type Source interface {
	Get(ctx context.Context, name string) (Store, error)
	List(ctx context.Context) ([]Store, error)
}

// Validate checks a store's own fields.
func (s Store) Validate() error {
	var errs []error
	if s.Name == "" {
		errs = append(errs, errors.New("name is required"))
	}
	if s.Agent == "" {
		errs = append(errs, fmt.Errorf("store %q: agent address is required", s.Name))
	}
	switch {
	case (s.Backend.ZFS == nil) == (s.Backend.LVM == nil):
		errs = append(errs, fmt.Errorf("store %q: backend needs exactly one of zfs and lvm", s.Name))
	case s.Backend.ZFS != nil && s.Backend.ZFS.Pool == "":
		errs = append(errs, fmt.Errorf("store %q: backend.zfs.pool is required", s.Name))
	case s.Backend.LVM != nil && s.Backend.LVM.VolumeGroup == "":
		errs = append(errs, fmt.Errorf("store %q: backend.lvm.volumeGroup is required", s.Name))
	case s.Backend.LVM != nil && s.Backend.LVM.ProvisioningMode != "" && s.Backend.LVM.ProvisioningMode != "linear" && s.Backend.LVM.ProvisioningMode != "thin":
		errs = append(errs, fmt.Errorf("store %q: backend.lvm.provisioningMode must be linear or thin", s.Name))
	}
	return errors.Join(errs...)
}

// Static is a fixed list of stores (standalone mode).
type Static struct {
	byName map[string]Store
}

// NewStatic indexes stores, refusing invalid and duplicate ones.
func NewStatic(list []Store) (*Static, error) {
	s := &Static{byName: map[string]Store{}}
	for _, st := range list {
		if err := st.Validate(); err != nil {
			return nil, err
		}
		if _, dup := s.byName[st.Name]; dup {
			return nil, fmt.Errorf("store %q listed twice", st.Name)
		}
		s.byName[st.Name] = st
	}
	return s, nil
}

// LoadFile reads a stores file: {"stores": [Store, ...]} in YAML or JSON.
func LoadFile(path string) (*Static, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Stores []Store `json:"stores"`
	}
	if err := yaml.UnmarshalStrict(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Stores) == 0 {
		return nil, fmt.Errorf("%s: no stores", path)
	}
	s, err := NewStatic(doc.Stores)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

func (s *Static) Get(_ context.Context, name string) (Store, error) {
	st, ok := s.byName[name]
	if !ok {
		return Store{}, fmt.Errorf("%q: %w", name, ErrNotFound)
	}
	return st, nil
}

func (s *Static) List(context.Context) ([]Store, error) {
	out := make([]Store, 0, len(s.byName))
	for _, st := range s.byName {
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Condition reasons of PoolDiscovered.
const (
	ReasonDiscovered            = "Discovered"
	ReasonBackendLayoutMismatch = "BackendLayoutMismatch"
	ReasonPoolNotConfigured     = "PoolNotConfigured"
	ReasonPoolUnavailable       = "PoolUnavailable"
)

// Check compares a store with what its agent reports for the store's pool.
// ok is true only when the agent has the pool, of the same kind, with the
// same layout, discovered and healthy; reason and message say otherwise.
func Check(s Store, pools []*agentv1.Pool) (ok bool, reason, message string) {
	var p *agentv1.Pool
	for _, q := range pools {
		if q.GetName() == s.Pool() {
			p = q
		}
	}
	if p == nil {
		return false, ReasonPoolNotConfigured, fmt.Sprintf("the agent has no backend for pool %q", s.Pool())
	}
	want := agentv1.BackendKind_BACKEND_KIND_ZFS
	var wantParent, wantThin string
	if s.Backend.ZFS != nil {
		wantParent = s.Backend.ZFS.ParentDataset
	} else {
		want = agentv1.BackendKind_BACKEND_KIND_LVM
		wantThin = s.Backend.LVM.ThinPool
	}
	if p.GetKind() != want {
		return false, ReasonBackendLayoutMismatch, fmt.Sprintf("pool %q is %s on the agent, not %s", s.Pool(), kindName(p.GetKind()), kindName(want))
	}
	gotParent, gotThin := p.GetLayout().GetParentDataset(), p.GetLayout().GetThinPool()
	if gotParent != wantParent {
		return false, ReasonBackendLayoutMismatch, fmt.Sprintf("spec.backend.zfs.parentDataset is %q but the agent places volumes of pool %q under %q", wantParent, s.Pool(), gotParent)
	}
	if gotThin != wantThin {
		return false, ReasonBackendLayoutMismatch, fmt.Sprintf("spec.backend.lvm.thinPool is %q but the agent's thin pool of volume group %q is %q", wantThin, s.Pool(), gotThin)
	}
	if !p.GetDiscovered() || !p.GetHealthy() {
		return false, ReasonPoolUnavailable, p.GetReason()
	}
	return true, ReasonDiscovered, fmt.Sprintf("pool %q discovered with the configured layout", s.Pool())
}

func kindName(k agentv1.BackendKind) string {
	switch k {
	case agentv1.BackendKind_BACKEND_KIND_ZFS:
		return "zfs"
	case agentv1.BackendKind_BACKEND_KIND_LVM:
		return "lvm"
	}
	return "unknown"
}
