package kubecontroller

// Export recovery: nvmet's configfs lives in kernel memory,
// so a storage node's reboot (or an agent started on a fresh target)
// leaves every volume attached from it unexported while Kubernetes still
// holds its VolumeAttachment. The controller, which knows the attachments
// and the nodes' host NQNs, restores them; the agent stays stateless
// (docs/decisions.md, "Re-exporting after a storage node reboot").

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/crd"
	"github.com/pillarhq/pillar/impl/pillar/csiids"
)

// Attached is one volume attached to nodes, as Kubernetes records it.
type Attached struct {
	Volume csiids.Volume
	// Hosts are the host NQNs of the nodes it is attached to.
	Hosts []string
}

// attachedOn lists this driver's volumes with a live VolumeAttachment
// (attached, not being detached) whose store is served by the agent
// named agentName, with the host NQN of every node they are attached to.
func (c *Config) attachedOn(ctx context.Context, agentName string) ([]Attached, error) {
	var vas storagev1.VolumeAttachmentList
	if err := c.Client.List(ctx, &vas); err != nil {
		return nil, fmt.Errorf("volume attachments: %w", err)
	}
	byID := map[string]*Attached{}
	storeAgent := map[string]string{} // store name -> agentRef, "" when unknown
	for i := range vas.Items {
		va := &vas.Items[i]
		// A detaching attachment is left alone: re-allowing its host would
		// undo the unpublish running for it.
		if va.Spec.Attacher != c.Group || !va.Status.Attached || va.DeletionTimestamp != nil {
			continue
		}
		handle, err := c.volumeHandle(ctx, va)
		if err != nil || handle == "" {
			continue
		}
		v, err := csiids.ParseVolume(handle)
		if err != nil {
			continue
		}
		ref, seen := storeAgent[v.Store]
		if !seen {
			ref = c.storeAgentRef(ctx, v.Store)
			storeAgent[v.Store] = ref
		}
		if ref != agentName {
			continue
		}
		host, err := c.hostNQN(ctx, va.Spec.NodeName)
		if err != nil {
			c.Log.Warn("export_restore_skipped", "volume_id", handle, "node", va.Spec.NodeName, "error", err.Error())
			continue
		}
		a := byID[handle]
		if a == nil {
			a = &Attached{Volume: v}
			byID[handle] = a
		}
		a.Hosts = append(a.Hosts, host)
	}
	out := make([]Attached, 0, len(byID))
	for _, a := range byID {
		sort.Strings(a.Hosts)
		out = append(out, *a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Volume.String() < out[j].Volume.String() })
	return out, nil
}

// volumeHandle is the CSI volume id of an attachment's volume.
func (c *Config) volumeHandle(ctx context.Context, va *storagev1.VolumeAttachment) (string, error) {
	if s := va.Spec.Source.InlineVolumeSpec; s != nil && s.CSI != nil {
		return s.CSI.VolumeHandle, nil
	}
	if va.Spec.Source.PersistentVolumeName == nil {
		return "", nil
	}
	pv := &corev1.PersistentVolume{}
	if err := c.Client.Get(ctx, types.NamespacedName{Name: *va.Spec.Source.PersistentVolumeName}, pv); err != nil {
		return "", err
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != c.Group {
		return "", nil
	}
	return pv.Spec.CSI.VolumeHandle, nil
}

// storeAgentRef is the agent a store names, "" when the store is unknown.
func (c *Config) storeAgentRef(ctx context.Context, name string) string {
	u := crd.New(c.Group, crd.KindStore)
	if err := c.Client.Get(ctx, types.NamespacedName{Name: name}, u); err != nil {
		return ""
	}
	s := &crd.Store{}
	if err := crd.FromUnstructured(u, s); err != nil {
		return ""
	}
	return s.Spec.AgentRef
}

// hostNQN is the host NQN in the node id this driver's node plugin
// registered on the node's CSINode.
func (c *Config) hostNQN(ctx context.Context, node string) (string, error) {
	var cn storagev1.CSINode
	if err := c.Client.Get(ctx, types.NamespacedName{Name: node}, &cn); err != nil {
		return "", fmt.Errorf("CSINode %q: %w", node, err)
	}
	for _, d := range cn.Spec.Drivers {
		if d.Name == c.Group {
			n, err := csiids.ParseNode(d.NodeID)
			if err != nil {
				return "", err
			}
			return n.HostNQN, nil
		}
	}
	return "", fmt.Errorf("CSINode %q has no driver %s", node, c.Group)
}

// Hosts is the CSI controller's view of the nodes' identities: the
// CSINode objects kubelet registers for this driver.
type Hosts struct{ *Config }

// NodesWithHostNQN names the nodes whose registered node id carries nqn.
func (h Hosts) NodesWithHostNQN(ctx context.Context, nqn string) ([]string, error) {
	var list storagev1.CSINodeList
	if err := h.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("CSINodes: %w", err)
	}
	var out []string
	for _, cn := range list.Items {
		for _, d := range cn.Spec.Drivers {
			if n, err := csiids.ParseNode(d.NodeID); d.Name == h.Group && err == nil && n.HostNQN == nqn {
				out = append(out, cn.Name)
			}
		}
	}
	return out, nil
}

// RestoreExports exports every attached volume the agent does not export,
// allowing the hosts it is attached to; volumes the agent exports are
// left as they are (their hosts are ControllerPublish's business, and
// an unpublish in flight must not be undone). It returns the volumes it
// restored.
func RestoreExports(ctx context.Context, c agentv1.AgentServiceClient, attached []Attached) ([]string, error) {
	if len(attached) == 0 {
		return nil, nil
	}
	list, err := c.ListVolumes(ctx, &agentv1.ListVolumesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	exported := map[string]bool{}
	for _, v := range list.GetVolumes() {
		if v.GetExport() != nil {
			exported[v.GetPool()+"/"+v.GetName()] = true
		}
	}
	var restored []string
	var errs []error
	for _, a := range attached {
		if exported[a.Volume.Pool+"/"+a.Volume.Name] {
			continue
		}
		if _, err := c.ExportVolume(ctx, &agentv1.ExportVolumeRequest{Pool: a.Volume.Pool, Name: a.Volume.Name, AllowedHosts: a.Hosts}); err != nil {
			errs = append(errs, fmt.Errorf("export %s: %w", a.Volume, err))
			continue
		}
		restored = append(restored, a.Volume.String())
	}
	if len(errs) > 0 {
		return restored, fmt.Errorf("%d of %d exports not restored, first: %w", len(errs), len(errs)+len(restored), errs[0])
	}
	return restored, nil
}

// restoreExports runs RestoreExports for one agent and logs the outcome.
func (c *Config) restoreExports(ctx context.Context, agentName string, ac agentv1.AgentServiceClient) {
	attached, err := c.attachedOn(ctx, agentName)
	if err != nil {
		c.Log.Warn("export_restore_failed", "agent", agentName, "error", err.Error())
		return
	}
	restored, err := RestoreExports(ctx, ac, attached)
	for _, v := range restored {
		c.Log.Info("export_restored", "agent", agentName, "volume_id", v)
	}
	if err != nil {
		c.Log.Warn("export_restore_failed", "agent", agentName, "error", err.Error())
	}
}
