// Package kubecontroller is the controller's Kubernetes side: reconcilers
// that keep PillarAgent and PillarStore status current (agent health, pool
// discovery, the layout check of rule 8) and label agent nodes, the
// admission webhooks, and the CSI controller's store source and override
// resolution read from the API.
package kubecontroller

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/crd"
	"github.com/pillarhq/pillar/impl/pillar/csicontroller"
	"github.com/pillarhq/pillar/impl/pillar/stores"
)

// Resync is how often status is refreshed without any change.
const Resync = 30 * time.Second

// Config is shared by the reconcilers.
type Config struct {
	Client client.Client
	// Group is the driver domain: API group and node label prefix.
	Group string
	// AgentPort is the port of agents naming none.
	AgentPort int
	Agents    csicontroller.Agents
	Log       *slog.Logger
}

// NodeLabel is the label the agent DaemonSet selects (S-AG-14).
func (c *Config) NodeLabel() string { return c.Group + "/agent-node" }

func (c *Config) getAgent(ctx context.Context, name string) (*crd.Agent, error) {
	u := crd.New(c.Group, crd.KindAgent)
	if err := c.Client.Get(ctx, types.NamespacedName{Name: name}, u); err != nil {
		return nil, err
	}
	a := &crd.Agent{}
	return a, crd.FromUnstructured(u, a)
}

// agentAddress is host:port of an agent: spec.address or its node's
// InternalIP, and spec.port or the default port.
func (c *Config) agentAddress(ctx context.Context, a *crd.Agent) (string, error) {
	host := a.Spec.Address
	if host == "" {
		var node corev1.Node
		if err := c.Client.Get(ctx, types.NamespacedName{Name: a.Spec.NodeName}, &node); err != nil {
			return "", fmt.Errorf("node %q: %w", a.Spec.NodeName, err)
		}
		for _, ad := range node.Status.Addresses {
			if ad.Type == corev1.NodeInternalIP {
				host = ad.Address
				break
			}
		}
		if host == "" {
			return "", fmt.Errorf("node %q has no InternalIP and the agent no spec.address", a.Spec.NodeName)
		}
	}
	port := a.Spec.Port
	if port == 0 {
		port = c.AgentPort
	}
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}

func setCondition(conds *[]metav1.Condition, gen int64, typ string, ok bool, reason, msg string) {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen})
}

// writeStatus replaces the status of an object with status.
func (c *Config) writeStatus(ctx context.Context, kind, name string, status any) error {
	u := crd.New(c.Group, kind)
	if err := c.Client.Get(ctx, types.NamespacedName{Name: name}, u); err != nil {
		return client.IgnoreNotFound(err)
	}
	st, err := crd.ToUnstructured(status)
	if err != nil {
		return err
	}
	if err := unstructured.SetNestedField(u.Object, st.Object, "status"); err != nil {
		return err
	}
	return c.Client.Status().Update(ctx, u)
}

// AgentReconciler labels the agent's node and reports the agent's health.
type AgentReconciler struct{ *Config }

// Reconcile one PillarAgent.
func (r *AgentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a, err := r.getAgent(ctx, req.Name)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	st := a.Status
	if err := r.labelNode(ctx, a.Spec.NodeName); err != nil {
		setCondition(&st.Conditions, a.Generation, crd.CondReady, false, "NodeNotFound", err.Error())
		return ctrl.Result{RequeueAfter: Resync}, r.writeStatus(ctx, crd.KindAgent, a.Name, &st)
	}
	addr, err := r.agentAddress(ctx, a)
	if err != nil {
		setCondition(&st.Conditions, a.Generation, crd.CondReady, false, "AddressUnknown", err.Error())
		return ctrl.Result{RequeueAfter: Resync}, r.writeStatus(ctx, crd.KindAgent, a.Name, &st)
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var h *agentv1.GetHealthResponse
	c, err := r.Agents.Client(addr)
	if err == nil {
		h, err = c.GetHealth(hctx, &agentv1.GetHealthRequest{})
	}
	switch {
	case err != nil:
		setCondition(&st.Conditions, a.Generation, crd.CondReady, false, "AgentUnreachable", fmt.Sprintf("%s: %s", addr, status.Convert(err).Message()))
	case !h.GetHealthy():
		setCondition(&st.Conditions, a.Generation, crd.CondReady, false, "Degraded", strings.Join(h.GetReasons(), "; "))
	default:
		setCondition(&st.Conditions, a.Generation, crd.CondReady, true, "Healthy", "agent "+h.GetVersion()+" at "+addr)
	}
	// Export recovery: a reachable agent whose target lost
	// its exports (a reboot) gets its attached volumes back.
	if err == nil && h.GetTargetReady() {
		rctx, rcancel := context.WithTimeout(ctx, time.Minute)
		r.restoreExports(rctx, a.Name, c)
		rcancel()
	}
	if h != nil {
		st.Pools = nil
		for _, p := range h.GetPools() {
			if !p.GetDiscovered() {
				continue
			}
			kind := "zfs"
			if p.GetKind() == agentv1.BackendKind_BACKEND_KIND_LVM {
				kind = "lvm"
			}
			st.Pools = append(st.Pools, crd.AgentPool{Name: p.GetName(), Kind: kind, TotalBytes: p.GetTotalBytes(), FreeBytes: p.GetFreeBytes()})
		}
	}
	return ctrl.Result{RequeueAfter: Resync}, r.writeStatus(ctx, crd.KindAgent, a.Name, &st)
}

// labelNode adds {group}/agent-node=true to a node, once.
func (r *AgentReconciler) labelNode(ctx context.Context, name string) error {
	var node corev1.Node
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &node); err != nil {
		return fmt.Errorf("node %q: %w", name, err)
	}
	if node.Labels[r.NodeLabel()] == "true" {
		return nil
	}
	patch := client.MergeFrom(node.DeepCopy())
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels[r.NodeLabel()] = "true"
	if err := r.Client.Patch(ctx, &node, patch); err != nil {
		return err
	}
	r.Log.Info("node_labeled", "node", name, "label", r.NodeLabel())
	return nil
}

// StoreReconciler reports whether a store's agent serves its pool with the
// store's layout.
type StoreReconciler struct{ *Config }

// Reconcile one PillarStore.
func (r *StoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	u := crd.New(r.Group, crd.KindStore)
	if err := r.Client.Get(ctx, req.NamespacedName, u); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	s := &crd.Store{}
	if err := crd.FromUnstructured(u, s); err != nil {
		return ctrl.Result{}, err
	}
	st := s.Status
	gen := s.Generation
	notReady := func(reason, msg string) (ctrl.Result, error) {
		setCondition(&st.Conditions, gen, crd.CondReady, false, reason, msg)
		return ctrl.Result{RequeueAfter: Resync}, r.writeStatus(ctx, crd.KindStore, s.Name, &st)
	}
	store, err := r.toStore(ctx, s)
	if err != nil {
		setCondition(&st.Conditions, gen, crd.CondAgentReachable, false, "AgentNotFound", err.Error())
		return notReady("AgentNotFound", err.Error())
	}
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var pools *agentv1.ListPoolsResponse
	c, err := r.Agents.Client(store.Agent)
	if err == nil {
		pools, err = c.ListPools(hctx, &agentv1.ListPoolsRequest{})
	}
	if err != nil {
		msg := fmt.Sprintf("%s: %s", store.Agent, status.Convert(err).Message())
		setCondition(&st.Conditions, gen, crd.CondAgentReachable, false, "AgentUnreachable", msg)
		return notReady("AgentUnreachable", msg)
	}
	setCondition(&st.Conditions, gen, crd.CondAgentReachable, true, "Reachable", store.Agent)
	ok, reason, msg := stores.Check(store, pools.GetPools())
	setCondition(&st.Conditions, gen, crd.CondPoolDiscovered, ok, reason, msg)
	for _, p := range pools.GetPools() {
		if p.GetName() == store.Pool() && ok {
			st.Capacity = &crd.Capacity{TotalBytes: p.GetTotalBytes(), FreeBytes: p.GetFreeBytes()}
		}
	}
	if !ok {
		if reason == stores.ReasonBackendLayoutMismatch {
			r.Log.Warn("store_layout_mismatch", "store", s.Name, "message", msg)
		}
		return notReady(reason, msg)
	}
	setCondition(&st.Conditions, gen, crd.CondReady, true, "Ready", msg)
	return ctrl.Result{RequeueAfter: Resync}, r.writeStatus(ctx, crd.KindStore, s.Name, &st)
}

// toStore resolves a store resource to what the CSI controller needs.
func (c *Config) toStore(ctx context.Context, s *crd.Store) (stores.Store, error) {
	a, err := c.getAgent(ctx, s.Spec.AgentRef)
	if err != nil {
		return stores.Store{}, fmt.Errorf("agent %q: %w", s.Spec.AgentRef, err)
	}
	addr, err := c.agentAddress(ctx, a)
	if err != nil {
		return stores.Store{}, err
	}
	return stores.Store{Name: s.Name, Agent: addr, Backend: s.Spec.Backend}, nil
}
