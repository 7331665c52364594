// Package csicontroller is the CSI Controller service: it places a volume
// on the store its parameters name (never elsewhere), creates and deletes
// it through the store's agent, publishes it by allowing the node's host
// NQN on the agent's NVMe/TCP export, and expands it. Every call is
// idempotent, and the service holds no state of its own, so any number of
// controller replicas may serve it at once.
package csicontroller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/csiids"
	"github.com/pillarhq/pillar/impl/pillar/stores"
	"github.com/pillarhq/pillar/impl/service"
)

// StorageClass parameters the controller reads.
const (
	ParamStore            = "store"
	ParamProvisioningMode = "provisioningMode"
	// ParamZFSPrefix names ZFS properties: "zfs.compression": "lz4".
	ParamZFSPrefix = "zfs."
	// ParamCtrlLossTmo and ParamReconnectDelay are the node's nvme connect
	// --ctrl-loss-tmo and --reconnect-delay, in seconds (the node's flags
	// when absent).
	ParamCtrlLossTmo    = "ctrlLossTmo"
	ParamReconnectDelay = "reconnectDelay"
	// ParamFastIOFailTmo and ParamKeepAliveTmo are the controller's
	// fast_io_fail_tmo and nvme connect's --keep-alive-tmo, in seconds.
	ParamFastIOFailTmo = "fastIOFailTmo"
	ParamKeepAliveTmo  = "keepAliveTmo"
	// Publish context keys the node reads.
	CtxNQN       = "nqn"
	CtxAddress   = "address"
	CtxPort      = "port"
	CtxTransport = "transport"
	CtxUUID      = "uuid"
	CtxNGUID     = "nguid"
	// CtxCopyOf marks, in the volume context, a volume made from a
	// snapshot or a volume: the node gives its filesystem an identity of
	// its own (csinode.CtxCopyOf).
	CtxCopyOf = "copyOf"
)

// DefaultVolumeSize is the size of a request naming none.
const DefaultVolumeSize = int64(1) << 30

// Agents gives the client of an agent address.
type Agents interface {
	Client(addr string) (agentv1.AgentServiceClient, error)
}

// Overrides resolves what a volume is created with beyond the store:
// profile and PVC overrides (Kubernetes mode). Nil means none.
type Overrides interface {
	// Resolve returns extra backend parameters for a CreateVolume request.
	Resolve(ctx context.Context, st stores.Store, params map[string]string) (map[string]string, error)
}

// Hosts tells which nodes present a host NQN (Kubernetes mode: the
// nodes' CSINode objects). Nil means unknown, as in standalone mode.
type Hosts interface {
	NodesWithHostNQN(ctx context.Context, nqn string) ([]string, error)
}

// Server implements csi.ControllerServer.
type Server struct {
	csi.UnimplementedControllerServer
	Stores    stores.Source
	Agents    Agents
	Overrides Overrides
	Hosts     Hosts
	service.Base
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,99}$`)

// VolumeName maps a CSI volume name to the backend's: names that every
// backend holds are kept (Kubernetes' "pvc-<uid>"), others become a stable
// hash, so a retried request maps to the same volume.
func VolumeName(csiName string) string {
	if nameRE.MatchString(csiName) {
		return csiName
	}
	h := sha256.Sum256([]byte(csiName))
	return "pv-" + hex.EncodeToString(h[:16])
}

// agentOf resolves a store and its agent's client.
func (s *Server) agentOf(ctx context.Context, store string) (stores.Store, agentv1.AgentServiceClient, error) {
	st, err := s.Stores.Get(ctx, store)
	if errors.Is(err, stores.ErrNotFound) {
		return st, nil, status.Errorf(codes.NotFound, "store %q does not exist", store)
	}
	if err != nil {
		return st, nil, status.Errorf(codes.Unavailable, "store %q: %v", store, err)
	}
	c, err := s.Agents.Client(st.Agent)
	if err != nil {
		return st, nil, status.Errorf(codes.Unavailable, "agent of store %q at %s: %v", store, st.Agent, err)
	}
	return st, c, nil
}

// ready checks the store against its agent (rule 8): a layout mismatch
// refuses the request instead of placing the volume elsewhere.
func ready(ctx context.Context, st stores.Store, c agentv1.AgentServiceClient) error {
	pools, err := c.ListPools(ctx, &agentv1.ListPoolsRequest{})
	if err != nil {
		return status.Errorf(codes.Unavailable, "agent of store %q at %s: %v", st.Name, st.Agent, status.Convert(err).Message())
	}
	if ok, reason, msg := stores.Check(st, pools.GetPools()); !ok {
		return status.Errorf(codes.FailedPrecondition, "store %q is not ready (%s): %s", st.Name, reason, msg)
	}
	return nil
}

func checkCapabilities(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	for _, c := range caps {
		if msg := unsupported(c); msg != "" {
			return status.Error(codes.InvalidArgument, msg)
		}
	}
	return nil
}

// unsupported says why a capability cannot be served, "" when it can.
func unsupported(c *csi.VolumeCapability) string {
	if c == nil {
		return "a volume capability is empty"
	}
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
	default:
		return fmt.Sprintf("access mode %s is not supported: a volume is attached to one node at a time", c.GetAccessMode().GetMode())
	}
	switch {
	case c.GetBlock() != nil:
	case c.GetMount() != nil:
		switch c.GetMount().GetFsType() {
		case "", "ext4", "xfs":
		default:
			return fmt.Sprintf("fs_type %q is not supported (ext4 or xfs)", c.GetMount().GetFsType())
		}
	default:
		return "access_type (block or mount) is required"
	}
	return ""
}

// backendParams resolves what the agent creates the volume with: the
// store's settings, overridden by the StorageClass parameters, overridden
// by the profile and the PVC's backend document (Overrides). For LVM the resolved mode is
// always named, so the agent's default never applies to CSI volumes.
func (s *Server) backendParams(ctx context.Context, st stores.Store, params map[string]string) (map[string]string, error) {
	out := map[string]string{}
	var extra map[string]string
	if s.Overrides != nil {
		var err error
		if extra, err = s.Overrides.Resolve(ctx, st, params); err != nil {
			return nil, err
		}
	}
	switch {
	case st.Backend.ZFS != nil:
		for k, v := range st.Backend.ZFS.Properties {
			out[k] = v
		}
		for _, src := range []map[string]string{params, extra} {
			for k, v := range src {
				if p, ok := strings.CutPrefix(k, ParamZFSPrefix); ok && p != "" {
					out[p] = v
				}
			}
		}
	case st.Backend.LVM != nil:
		mode := st.Backend.LVM.ProvisioningMode
		for _, src := range []map[string]string{params, extra} {
			if m := src[ParamProvisioningMode]; m != "" {
				mode = m
			}
		}
		if mode == "" {
			mode = "linear"
		}
		if mode != "linear" && mode != "thin" {
			return nil, status.Errorf(codes.InvalidArgument, "provisioningMode %q must be linear or thin", mode)
		}
		out[ParamProvisioningMode] = mode
	}
	return out, nil
}

func requestedSize(r *csi.CapacityRange) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, status.Error(codes.InvalidArgument, "capacity_range bytes must not be negative")
	}
	if lim > 0 && req > lim {
		return 0, status.Errorf(codes.OutOfRange, "required_bytes %d exceed limit_bytes %d", req, lim)
	}
	switch {
	case req > 0:
		return req, nil
	case lim > 0 && lim < DefaultVolumeSize:
		return lim, nil
	}
	return DefaultVolumeSize, nil
}

// CreateVolume places a volume on the store named by parameters.store.
func (s *Server) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	storeName := req.GetParameters()[ParamStore]
	if storeName == "" {
		return nil, status.Errorf(codes.InvalidArgument, "parameters.%s is required: the StorageClass names the store volumes are placed on", ParamStore)
	}
	size, err := requestedSize(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	if req.GetVolumeContentSource() != nil && req.GetCapacityRange().GetRequiredBytes() == 0 {
		size = 0 // the source's size (snapshots.go)
	}
	reconnect, err := reconnectParams(req.GetParameters())
	if err != nil {
		return nil, err
	}
	st, c, err := s.agentOf(ctx, storeName)
	if err != nil {
		if status.Code(err) == codes.NotFound {
			return nil, status.Errorf(codes.InvalidArgument, "parameters.%s names store %q, which does not exist", ParamStore, storeName)
		}
		return nil, err
	}
	if err := ready(ctx, st, c); err != nil {
		return nil, err
	}
	params, err := s.backendParams(ctx, st, req.GetParameters())
	if err != nil {
		return nil, err
	}
	name := VolumeName(req.GetName())
	source, err := s.contentSource(ctx, st, req.GetVolumeContentSource())
	if err != nil {
		return nil, err
	}
	r, err := c.CreateVolume(ctx, &agentv1.CreateVolumeRequest{Pool: st.Pool(), Name: name, SizeBytes: size, Parameters: params, Source: source})
	if err != nil {
		return nil, agentError("create volume", err)
	}
	got := r.GetVolume().GetSizeBytes()
	if lim := req.GetCapacityRange().GetLimitBytes(); lim > 0 && got > lim {
		return nil, status.Errorf(codes.OutOfRange, "the volume rounds up to %d bytes, above limit_bytes %d", got, lim)
	}
	id := csiids.Volume{Store: st.Name, Pool: st.Pool(), Name: name}
	s.Logger.Info("volume_created", "volume_id", id.String(), "size_bytes", got, "params", params)
	vctx := map[string]string{ParamStore: st.Name, "pool": st.Pool()}
	for k, v := range reconnect {
		vctx[k] = v
	}
	if m := r.GetVolume().GetProvisioningMode(); m != "" {
		vctx[ParamProvisioningMode] = m
	}
	switch {
	case req.GetVolumeContentSource().GetSnapshot() != nil:
		vctx[CtxCopyOf] = "snapshot"
	case req.GetVolumeContentSource().GetVolume() != nil:
		vctx[CtxCopyOf] = "volume"
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{VolumeId: id.String(), CapacityBytes: got, VolumeContext: vctx, ContentSource: req.GetVolumeContentSource()}}, nil
}

// reconnectParams checks the StorageClass's NVMe/TCP reconnect settings,
// which travel to the node in the volume context.
func reconnectParams(params map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range []struct {
		key string
		min int
	}{{ParamCtrlLossTmo, -1}, {ParamReconnectDelay, 1}, {ParamFastIOFailTmo, -1}, {ParamKeepAliveTmo, 1}} {
		v, ok := params[p.key]
		if !ok {
			continue
		}
		if n, err := strconv.Atoi(v); err != nil || n < p.min {
			return nil, status.Errorf(codes.InvalidArgument, "parameters.%s %q must be an integer of at least %d (seconds)", p.key, v, p.min)
		}
		out[p.key] = v
	}
	return out, nil
}

// agentError keeps the agent's status code (it is chosen for callers like
// this one) and says which step failed.
func agentError(step string, err error) error {
	st := status.Convert(err)
	return status.Errorf(st.Code(), "%s: %s", step, st.Message())
}

// volume resolves a volume id to its store and agent. A malformed id is
// reported as notFound (CSI treats unknown ids so).
func (s *Server) volume(ctx context.Context, id string) (csiids.Volume, stores.Store, agentv1.AgentServiceClient, error) {
	if id == "" {
		return csiids.Volume{}, stores.Store{}, nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	v, err := csiids.ParseVolume(id)
	if err != nil {
		return v, stores.Store{}, nil, status.Error(codes.NotFound, err.Error())
	}
	st, c, err := s.agentOf(ctx, v.Store)
	if err != nil {
		return v, st, nil, err
	}
	if st.Pool() != v.Pool {
		return v, st, nil, status.Errorf(codes.NotFound, "volume %s: store %q now places volumes in pool %q", id, st.Name, st.Pool())
	}
	return v, st, c, nil
}

// DeleteVolume deletes a volume (and its export); unknown ids succeed.
func (s *Server) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	v, _, c, err := s.volume(ctx, req.GetVolumeId())
	if err != nil {
		if status.Code(err) == codes.NotFound {
			if _, perr := csiids.ParseVolume(req.GetVolumeId()); perr != nil {
				return &csi.DeleteVolumeResponse{}, nil // not one of ours
			}
			// The store is gone: the volume cannot be reached, and claiming
			// it deleted would leak it silently.
			return nil, status.Errorf(codes.FailedPrecondition, "cannot delete %s: %s", req.GetVolumeId(), status.Convert(err).Message())
		}
		return nil, err
	}
	if _, err := c.DeleteVolume(ctx, &agentv1.DeleteVolumeRequest{Pool: v.Pool, Name: v.Name}); err != nil {
		return nil, agentError("delete volume", err)
	}
	s.Logger.Info("volume_deleted", "volume_id", v.String())
	return &csi.DeleteVolumeResponse{}, nil
}

// find returns an existing volume from its agent.
func find(ctx context.Context, c agentv1.AgentServiceClient, v csiids.Volume) (*agentv1.Volume, error) {
	list, err := c.ListVolumes(ctx, &agentv1.ListVolumesRequest{Pool: v.Pool})
	if err != nil {
		return nil, agentError("list volumes", err)
	}
	for _, x := range list.GetVolumes() {
		if x.GetName() == v.Name {
			return x, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "volume %s does not exist", v)
}

// ControllerPublishVolume exports the volume to the node's host NQN.
func (s *Server) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id is required")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	if msg := unsupported(req.GetVolumeCapability()); msg != "" {
		return nil, status.Error(codes.InvalidArgument, msg)
	}
	v, st, c, err := s.volume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	node, err := csiids.ParseNode(req.GetNodeId())
	if err != nil {
		return nil, status.Error(codes.NotFound, err.Error())
	}
	if err := s.ownIdentity(ctx, node); err != nil {
		return nil, err
	}
	// Every access mode this driver serves is single-node (see
	// unsupported): a volume published to another node is refused, as the
	// CSI spec asks, instead of adding a second host to its ACL. The agent
	// checks and exports in one step under the volume's lock (single_host),
	// so two publishes racing, from this replica or another, cannot both
	// succeed. The export's generation as read here goes with the call:
	// if another publication changes the export in between (another
	// replica, or this call delayed past a later unpublish), the agent
	// refuses it as stale (ABORTED) and the attacher retries on fresh state.
	x, err := find(ctx, c, v)
	if err != nil {
		return nil, err
	}
	ex, err := c.ExportVolume(ctx, &agentv1.ExportVolumeRequest{Pool: v.Pool, Name: v.Name, AllowedHosts: []string{node.HostNQN}, SingleHost: true,
		Generation: x.GetExport().GetGeneration()})
	if err != nil {
		return nil, agentError("export volume", err)
	}
	s.Logger.Info("volume_published", "volume_id", v.String(), "node", node.Name, "host_nqn", node.HostNQN)
	return &csi.ControllerPublishVolumeResponse{PublishContext: publishContext(st, ex.GetExport())}, nil
}

// ownIdentity refuses a node whose host NQN another node presents too
// (cloned machines, a hostnqn baked into an image): the agent's ACL holds
// NQNs, so both nodes could connect to the volume and mount it at once.
func (s *Server) ownIdentity(ctx context.Context, node csiids.Node) error {
	if s.Hosts == nil {
		return nil
	}
	names, err := s.Hosts.NodesWithHostNQN(ctx, node.HostNQN)
	if err != nil {
		return status.Errorf(codes.Unavailable, "nodes presenting host NQN %s: %v", node.HostNQN, err)
	}
	others := slices.DeleteFunc(names, func(n string) bool { return n == node.Name })
	if len(others) == 0 {
		return nil
	}
	s.Logger.Error("host_nqn_shared", "node", node.Name, "host_nqn", node.HostNQN, "other_nodes", others)
	return status.Errorf(codes.FailedPrecondition, "host NQN %s of node %s is also presented by node(s) %s, so the export's ACL could not tell them apart; "+
		"give every node its own /etc/nvme/hostnqn (docs/pillar-csi.md, \"Node identity\")", node.HostNQN, node.Name, strings.Join(others, ", "))
}

// publishContext tells the node how to connect. A target listening on
// every address is reached at the address the controller reached the
// agent on.
func publishContext(st stores.Store, ex *agentv1.Export) map[string]string {
	addr := ex.GetAddress()
	if ip := net.ParseIP(addr); addr == "" || (ip != nil && ip.IsUnspecified()) {
		if host, _, err := net.SplitHostPort(st.Agent); err == nil {
			addr = host
		}
	}
	return map[string]string{
		CtxNQN: ex.GetNqn(), CtxAddress: addr, CtxPort: strconv.Itoa(int(ex.GetPort())),
		CtxTransport: ex.GetTransport(), CtxUUID: ex.GetUuid(), CtxNGUID: ex.GetNguid(),
	}
}

// ControllerUnpublishVolume removes the node's access; without a node id,
// every host's. Unknown volumes succeed.
func (s *Server) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	v, _, c, err := s.volume(ctx, req.GetVolumeId())
	if status.Code(err) == codes.NotFound {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	var hosts []string
	if req.GetNodeId() != "" {
		node, err := csiids.ParseNode(req.GetNodeId())
		if err != nil {
			return &csi.ControllerUnpublishVolumeResponse{}, nil // never published there
		}
		hosts = []string{node.HostNQN}
	}
	// The export as it is now: its hosts when no node is named, and its
	// generation, which the agent checks (see ControllerPublishVolume).
	x, err := find(ctx, c, v)
	if status.Code(err) == codes.NotFound {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if req.GetNodeId() == "" {
		hosts = x.GetExport().GetAllowedHosts()
	}
	gen := x.GetExport().GetGeneration()
	for _, h := range hosts {
		resp, err := c.DenyHost(ctx, &agentv1.DenyHostRequest{Pool: v.Pool, Name: v.Name, HostNqn: h, Generation: gen})
		if err != nil && status.Code(err) != codes.NotFound {
			return nil, agentError("deny host", err)
		}
		if g := resp.GetExport().GetGeneration(); g > gen {
			gen = g
		}
	}
	s.Logger.Info("volume_unpublished", "volume_id", v.String(), "hosts", len(hosts))
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// ValidateVolumeCapabilities confirms the capabilities this driver serves.
func (s *Server) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	v, _, c, err := s.volume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_capabilities are required")
	}
	if _, err := find(ctx, c, v); err != nil {
		return nil, err
	}
	for _, cap := range req.GetVolumeCapabilities() {
		if msg := unsupported(cap); msg != "" {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: msg}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

// ListVolumes lists the volumes of every store, paginated by position in
// the id order.
func (s *Server) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	start, err := startingToken(req.GetStartingToken())
	if err != nil {
		return nil, err
	}
	list, err := s.Stores.List(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "stores: %v", err)
	}
	var all []*csi.ListVolumesResponse_Entry
	for _, st := range list {
		c, err := s.Agents.Client(st.Agent)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "agent of store %q: %v", st.Name, err)
		}
		vols, err := c.ListVolumes(ctx, &agentv1.ListVolumesRequest{Pool: st.Pool()})
		if err != nil {
			return nil, agentError("list volumes of store "+st.Name, err)
		}
		for _, v := range vols.GetVolumes() {
			id := csiids.Volume{Store: st.Name, Pool: st.Pool(), Name: v.GetName()}
			all = append(all, &csi.ListVolumesResponse_Entry{Volume: &csi.Volume{VolumeId: id.String(), CapacityBytes: v.GetSizeBytes()}})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Volume.VolumeId < all[j].Volume.VolumeId })
	entries, next, err := page(all, start, req.GetMaxEntries(), "volumes")
	if err != nil {
		return nil, err
	}
	return &csi.ListVolumesResponse{Entries: entries, NextToken: next}, nil
}

// startingToken reads a list call's starting_token: the position this
// driver issued as next_token (empty: the start).
func startingToken(tok string) (int, error) {
	if tok == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(tok)
	if err != nil || n < 0 {
		return 0, status.Errorf(codes.Aborted, "starting_token %q is not one this driver issued", tok)
	}
	return n, nil
}

// page cuts a sorted listing at start, at most maxEntries long (0: all),
// with the next page's token when entries remain.
func page[T any](all []T, start int, maxEntries int32, what string) ([]T, string, error) {
	if start > len(all) {
		return nil, "", status.Errorf(codes.Aborted, "starting_token %d is past the end (%d %s)", start, len(all), what)
	}
	end := len(all)
	if m := int(maxEntries); m > 0 && start+m < end {
		end = start + m
	}
	next := ""
	if end < len(all) {
		next = strconv.Itoa(end)
	}
	return all[start:end], next, nil
}

// GetCapacity is one store's capacity (parameters.store), or every ready
// store's together.
func (s *Server) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	var names []string
	if n := req.GetParameters()[ParamStore]; n != "" {
		names = []string{n}
	} else {
		list, err := s.Stores.List(ctx)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "stores: %v", err)
		}
		for _, st := range list {
			names = append(names, st.Name)
		}
	}
	var free int64
	for _, n := range names {
		st, c, err := s.agentOf(ctx, n)
		if err != nil {
			if len(names) == 1 {
				return nil, err
			}
			continue
		}
		if ready(ctx, st, c) != nil {
			continue // a store that is not ready offers nothing
		}
		params, err := s.backendParams(ctx, st, req.GetParameters())
		if err != nil {
			return nil, err
		}
		r, err := c.GetCapacity(ctx, &agentv1.GetCapacityRequest{Pool: st.Pool(), Parameters: params})
		if err != nil {
			if len(names) == 1 {
				return nil, agentError("capacity", err)
			}
			continue
		}
		free += r.GetFreeBytes()
	}
	return &csi.GetCapacityResponse{AvailableCapacity: free}, nil
}

// ControllerExpandVolume grows a volume on its agent.
func (s *Server) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "capacity_range is required")
	}
	v, _, c, err := s.volume(ctx, req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	size, err := requestedSize(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	r, err := c.ExpandVolume(ctx, &agentv1.ExpandVolumeRequest{Pool: v.Pool, Name: v.Name, SizeBytes: size})
	if err != nil {
		return nil, agentError("expand volume", err)
	}
	got := r.GetVolume().GetSizeBytes()
	if lim := req.GetCapacityRange().GetLimitBytes(); lim > 0 && got > lim {
		return nil, status.Errorf(codes.OutOfRange, "the volume is %d bytes, above limit_bytes %d", got, lim)
	}
	s.Logger.Info("volume_expanded", "volume_id", v.String(), "size_bytes", got)
	// A filesystem grows on the node; a raw block volume only needs the
	// target's revalidation, which the agent did.
	nodeExpand := req.GetVolumeCapability().GetBlock() == nil
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: got, NodeExpansionRequired: nodeExpand}, nil
}

// ControllerGetCapabilities lists what the controller does.
func (s *Server) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_GET_CAPACITY,
		csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
		// snapshots.go
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: t}}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}
