// Package csinode is the CSI Node service: it connects to a volume's
// NVMe/TCP export (through a Connector), formats it when blank and mounts
// it at the staging path, bind-mounts it into pods (read-only honoured,
// raw block volumes as device files), grows filesystems after an expand,
// and undoes all of it idempotently.
package csinode

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mountutils "k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"

	"github.com/pillarhq/pillar/impl/pillar/csiids"
	"github.com/pillarhq/pillar/impl/service"
)

// Target is how to reach an exported volume (the controller's publish
// context) and as which host.
type Target struct {
	NQN, Address, Port, Transport, UUID, NGUID string
	HostNQN, HostID                            string
	// Reconnect is how a connection that drops is retried.
	Reconnect Reconnect
}

// Reconnect bounds the retries of a lost NVMe/TCP connection: every
// DelaySeconds, until LossTimeoutSeconds have passed (-1: forever) when
// the kernel gives up on the controller. FastIOFailSeconds after the loss
// I/O fails instead of waiting for the reconnect (-1: it waits as long as
// the controller is retried), and KeepAliveSeconds is how often the host
// checks that the target still answers, which is how a silent loss is
// noticed at all. Zero values leave nvme-cli's and the kernel's own
// defaults (600 s, 10 s, off, 5 s).
type Reconnect struct {
	LossTimeoutSeconds, DelaySeconds    int
	FastIOFailSeconds, KeepAliveSeconds int
}

// Volume context keys naming a StorageClass's reconnect settings (the
// controller copies the parameters of the same names there).
const (
	CtxCtrlLossTmo    = "ctrlLossTmo"
	CtxReconnectDelay = "reconnectDelay"
	CtxFastIOFailTmo  = "fastIOFailTmo"
	CtxKeepAliveTmo   = "keepAliveTmo"
)

// reconnectMinimums is the least value of each reconnect setting, by
// volume context key (csicontroller checks the StorageClass parameters
// with the same bounds).
var reconnectMinimums = map[string]int{CtxCtrlLossTmo: -1, CtxReconnectDelay: 1, CtxFastIOFailTmo: -1, CtxKeepAliveTmo: 1}

// ParseReconnect reads the reconnect settings of a volume context over
// the defaults; a bad value is InvalidArgument.
func ParseReconnect(vctx map[string]string, def Reconnect) (Reconnect, error) {
	r := def
	for _, f := range []struct {
		key string
		dst *int
	}{
		{CtxCtrlLossTmo, &r.LossTimeoutSeconds}, {CtxReconnectDelay, &r.DelaySeconds},
		{CtxFastIOFailTmo, &r.FastIOFailSeconds}, {CtxKeepAliveTmo, &r.KeepAliveSeconds},
	} {
		v, ok := vctx[f.key]
		if !ok || v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if low := reconnectMinimums[f.key]; err != nil || n < low {
			return r, status.Errorf(codes.InvalidArgument, "%s %q must be an integer of at least %d (seconds)", f.key, v, low)
		}
		*f.dst = n
	}
	return r, nil
}

// Connector attaches exported volumes as local block devices.
type Connector interface {
	// Connect attaches the volume (or finds it attached) and returns its
	// block device.
	Connect(ctx context.Context, t Target) (string, error)
	// Connected reports whether the volume is attached already.
	Connected(ctx context.Context, nqn string) (bool, error)
	// Disconnect detaches the volume; a volume not attached is no error.
	Disconnect(ctx context.Context, nqn string) error
	// Rescan makes an attached volume's new size visible.
	Rescan(ctx context.Context, nqn string) error
}

// Publish context keys (see csicontroller).
const (
	ctxNQN, ctxAddress, ctxPort, ctxTransport, ctxUUID, ctxNGUID = "nqn", "address", "port", "transport", "uuid", "nguid"
)

// DefaultFS is the filesystem of mount volumes naming none.
const DefaultFS = "ext4"

// Server implements csi.NodeServer.
type Server struct {
	csi.UnimplementedNodeServer
	NodeName string
	HostNQN  string
	// HostID is the NVMe host identifier sent with HostNQN.
	HostID string
	// Reconnect is the default of volumes whose StorageClass names none.
	Reconnect Reconnect
	// TopologyKey, when set, is reported with the node's name as its
	// accessible topology (csiids.TopologyKey).
	TopologyKey string
	Connector   Connector
	Mounter     *mountutils.SafeFormatAndMount
	service.Base

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// NewMounter is the host's mounter with format-if-blank.
func NewMounter() *mountutils.SafeFormatAndMount {
	return &mountutils.SafeFormatAndMount{Interface: mountutils.New(""), Exec: utilexec.New()}
}

func (s *Server) lock(id string) func() {
	s.mu.Lock()
	if s.locks == nil {
		s.locks = map[string]*sync.Mutex{}
	}
	l := s.locks[id]
	if l == nil {
		l = &sync.Mutex{}
		s.locks[id] = l
	}
	s.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func target(v csiids.Volume, pc map[string]string, host string) (Target, error) {
	t := Target{NQN: pc[ctxNQN], Address: pc[ctxAddress], Port: pc[ctxPort], Transport: pc[ctxTransport], UUID: pc[ctxUUID], NGUID: pc[ctxNGUID], HostNQN: host}
	if t.NQN == "" {
		t.NQN = v.NQN()
	}
	if t.NQN != v.NQN() {
		return t, status.Errorf(codes.InvalidArgument, "publish context names subsystem %s, not the volume's %s", t.NQN, v.NQN())
	}
	if t.Address == "" || t.Port == "" {
		return t, status.Error(codes.InvalidArgument, "publish context lacks the target address and port (was the volume published by this driver's controller?)")
	}
	if t.Transport == "" {
		t.Transport = "tcp"
	}
	return t, nil
}

// required refuses the first empty field: pairs of value and name.
func required(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i] == "" {
			return status.Errorf(codes.InvalidArgument, "%s is required", pairs[i+1])
		}
	}
	return nil
}

func parseVolume(id string) (csiids.Volume, error) {
	if id == "" {
		return csiids.Volume{}, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	v, err := csiids.ParseVolume(id)
	if err != nil {
		return v, status.Error(codes.NotFound, err.Error())
	}
	return v, nil
}

func checkCap(c *csi.VolumeCapability) error {
	if c == nil {
		return status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	if c.GetBlock() == nil && c.GetMount() == nil {
		return status.Error(codes.InvalidArgument, "access_type (block or mount) is required")
	}
	if m := c.GetMount(); m != nil {
		switch m.GetFsType() {
		case "", "ext4", "xfs":
		default:
			return status.Errorf(codes.InvalidArgument, "fs_type %q is not supported (ext4 or xfs)", m.GetFsType())
		}
	}
	return nil
}

// NodeStageVolume connects the volume and, for mount volumes, formats it
// when blank and mounts it at the staging path.
func (s *Server) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if err := required(req.GetVolumeId(), "volume_id", req.GetStagingTargetPath(), "staging_target_path"); err != nil {
		return nil, err
	}
	if err := checkCap(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	v, err := parseVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	t, err := target(v, req.GetPublishContext(), s.HostNQN)
	if err != nil {
		return nil, err
	}
	t.HostID = s.HostID
	if t.Reconnect, err = ParseReconnect(req.GetVolumeContext(), s.Reconnect); err != nil {
		return nil, err
	}
	defer s.lock(v.String())()
	was, err := s.Connector.Connected(ctx, t.NQN)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "connections of %s: %v", t.NQN, err)
	}
	resp, err := s.stage(ctx, req, v, t)
	if err != nil && !was {
		// A stage that fails leaves the node as it found it: a connection
		// nobody unstages would hold the device (and the target's
		// controller) until the node reboots.
		if derr := s.Connector.Disconnect(context.WithoutCancel(ctx), t.NQN); derr != nil {
			s.Logger.Error("stage_disconnect_failed", "volume_id", v.String(), "error", derr.Error())
		}
	}
	return resp, err
}

func (s *Server) stage(ctx context.Context, req *csi.NodeStageVolumeRequest, v csiids.Volume, t Target) (*csi.NodeStageVolumeResponse, error) {
	dev, err := s.Connector.Connect(ctx, t)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "connect %s: %v", t.NQN, err)
	}
	if req.GetVolumeCapability().GetBlock() != nil {
		s.Logger.Info("volume_staged", "volume_id", v.String(), "device", dev, "mode", "block")
		return &csi.NodeStageVolumeResponse{}, nil
	}
	staging := req.GetStagingTargetPath()
	if err := os.MkdirAll(staging, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "staging path: %v", err)
	}
	notMnt, err := s.Mounter.IsLikelyNotMountPoint(staging)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "staging path: %v", err)
	}
	if !notMnt {
		// Already staged only when the volume's own device is mounted
		// there: anything else (another filesystem, a device that went
		// away and came back under another name) would hand pods the
		// wrong data.
		if err := s.stagedFrom(staging, dev); err != nil {
			return nil, err
		}
		return &csi.NodeStageVolumeResponse{}, nil
	}
	fs := req.GetVolumeCapability().GetMount().GetFsType()
	if fs == "" {
		fs = DefaultFS
	}
	copied := req.GetVolumeContext()[CtxCopyOf] != ""
	if fs == "ext4" && copied {
		changed, err := ownExt4UUID(s.Mounter.Exec, dev, v.String())
		if err != nil {
			return nil, status.Errorf(codes.Internal, "new filesystem UUID for copy %s: %v", v, err)
		}
		if changed {
			s.Logger.Info("filesystem_uuid_set", "volume_id", v.String(), "device", dev, "uuid", FilesystemUUID(v.String()))
		}
		grown, err := growExt4(s.Mounter.Exec, dev)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "grow the filesystem of copy %s to its volume: %v", v, err)
		}
		if grown {
			s.Logger.Info("filesystem_grown", "volume_id", v.String(), "device", dev, "fs_type", fs)
		}
	}
	opts := mountOptions(fs, req.GetVolumeCapability().GetMount().GetMountFlags())
	if err := s.Mounter.FormatAndMount(dev, staging, fs, opts); err != nil {
		return nil, status.Errorf(codes.Internal, "format and mount %s (%s) at %s: %v", dev, fs, staging, err)
	}
	if fs == "xfs" && copied {
		// XFS grows only mounted; a no-op when the copy is the source's size.
		if _, err := mountutils.NewResizeFs(s.Mounter.Exec).Resize(dev, staging); err != nil {
			// Unmounted again, so a retry grows it instead of finding it staged.
			if uerr := s.Mounter.Unmount(staging); uerr != nil {
				s.Logger.Error("stage_unmount_failed", "volume_id", v.String(), "error", uerr.Error())
			}
			return nil, status.Errorf(codes.Internal, "grow the filesystem of copy %s to its volume: %v", v, err)
		}
	}
	s.Logger.Info("volume_staged", "volume_id", v.String(), "device", dev, "fs_type", fs, "staging_path", staging)
	return &csi.NodeStageVolumeResponse{}, nil
}

// stagedFrom checks that the filesystem mounted at staging is dev's.
func (s *Server) stagedFrom(staging, dev string) error {
	mounted, _, err := mountutils.GetDeviceNameFromMount(s.Mounter, staging)
	if err != nil {
		return status.Errorf(codes.Internal, "staging path %s: %v", staging, err)
	}
	if sameDevice(mounted, dev) {
		return nil
	}
	return status.Errorf(codes.FailedPrecondition, "staging path %s holds a mount of %q, not the volume's device %s: unmount it (or unstage) first", staging, mounted, dev)
}

// sameDevice compares two device paths after resolving links (/dev/vg/lv,
// /dev/disk/by-id/…) and, for device nodes, by device number.
func sameDevice(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	ra, erra := filepath.EvalSymlinks(a)
	rb, errb := filepath.EvalSymlinks(b)
	if erra != nil || errb != nil {
		return false // a device that is gone is not alive
	}
	if ra == rb {
		return true
	}
	var sa, sb unix.Stat_t
	if unix.Stat(ra, &sa) != nil || unix.Stat(rb, &sb) != nil {
		return false
	}
	return sa.Mode&unix.S_IFMT == unix.S_IFBLK && sb.Mode&unix.S_IFMT == unix.S_IFBLK && sa.Rdev == sb.Rdev
}

// NodeUnstageVolume unmounts the staging path and disconnects.
func (s *Server) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if err := required(req.GetVolumeId(), "volume_id", req.GetStagingTargetPath(), "staging_target_path"); err != nil {
		return nil, err
	}
	v, err := parseVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer s.lock(v.String())()
	if err := mountutils.CleanupMountPoint(req.GetStagingTargetPath(), s.Mounter, true); err != nil {
		return nil, status.Errorf(codes.Internal, "unmount %s: %v", req.GetStagingTargetPath(), err)
	}
	if err := s.Connector.Disconnect(ctx, v.NQN()); err != nil {
		return nil, status.Errorf(codes.Internal, "disconnect %s: %v", v.NQN(), err)
	}
	s.Logger.Info("volume_unstaged", "volume_id", v.String())
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// NodePublishVolume bind-mounts the staged filesystem, or the block
// device, at the pod's target path.
func (s *Server) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	tp := req.GetTargetPath()
	if err := required(req.GetVolumeId(), "volume_id", tp, "target_path", req.GetStagingTargetPath(), "staging_target_path"); err != nil {
		return nil, err
	}
	if err := checkCap(req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	v, err := parseVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer s.lock(v.String())()
	// mount-utils turns "bind" with "ro" into a bind mount followed by a
	// read-only remount, as the kernel needs.
	opts := []string{"bind"}
	if req.GetReadonly() {
		opts = append(opts, "ro")
	}
	var source string
	if req.GetVolumeCapability().GetBlock() != nil {
		t, err := target(v, req.GetPublishContext(), s.HostNQN)
		if err != nil {
			return nil, err
		}
		if source, err = s.Connector.Connect(ctx, t); err != nil {
			return nil, status.Errorf(codes.Internal, "device of %s: %v", t.NQN, err)
		}
		if err := os.MkdirAll(filepath.Dir(tp), 0o750); err != nil {
			return nil, status.Errorf(codes.Internal, "target path: %v", err)
		}
		f, err := os.OpenFile(tp, os.O_CREATE, 0o640)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "target file: %v", err)
		}
		f.Close()
	} else {
		source = req.GetStagingTargetPath()
		if req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
			if other := s.publishedElsewhere(source, tp); other != "" {
				return nil, status.Errorf(codes.FailedPrecondition, "volume %s is single-writer and already published at %s", v, other)
			}
		}
		if err := os.MkdirAll(tp, 0o750); err != nil {
			return nil, status.Errorf(codes.Internal, "target path: %v", err)
		}
		opts = append(opts, req.GetVolumeCapability().GetMount().GetMountFlags()...)
	}
	notMnt, err := s.Mounter.IsLikelyNotMountPoint(tp)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "target path: %v", err)
	}
	if !notMnt {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := s.Mounter.Mount(source, tp, "", opts); err != nil {
		return nil, status.Errorf(codes.Internal, "bind mount %s at %s: %v", source, tp, err)
	}
	s.Logger.Info("volume_published", "volume_id", v.String(), "target_path", tp, "readonly", req.GetReadonly())
	return &csi.NodePublishVolumeResponse{}, nil
}

// publishedElsewhere returns a mount point, other than staging and
// target, of the filesystem mounted at staging.
func (s *Server) publishedElsewhere(staging, target string) string {
	mps, err := s.Mounter.List()
	if err != nil {
		return ""
	}
	var dev string
	for _, m := range mps {
		if m.Path == staging {
			dev = m.Device
		}
	}
	if dev == "" {
		return ""
	}
	for _, m := range mps {
		if m.Device == dev && m.Path != staging && m.Path != target {
			return m.Path
		}
	}
	return ""
}

// NodeUnpublishVolume unmounts and removes the target path.
func (s *Server) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if err := required(req.GetVolumeId(), "volume_id", req.GetTargetPath(), "target_path"); err != nil {
		return nil, err
	}
	v, err := parseVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	defer s.lock(v.String())()
	if err := mountutils.CleanupMountPoint(req.GetTargetPath(), s.Mounter, true); err != nil {
		return nil, status.Errorf(codes.Internal, "unmount %s: %v", req.GetTargetPath(), err)
	}
	s.Logger.Info("volume_unpublished", "volume_id", v.String(), "target_path", req.GetTargetPath())
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports a published volume's usage.
func (s *Server) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	p := req.GetVolumePath()
	if err := required(req.GetVolumeId(), "volume_id", p, "volume_path"); err != nil {
		return nil, err
	}
	if _, err := parseVolume(req.GetVolumeId()); err != nil {
		return nil, err
	}
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "volume path %s does not exist", p)
	}
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	if !fi.IsDir() {
		size, err := blockSize(p)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "size of %s: %v", p, err)
		}
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: size}}}, nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", p, err)
	}
	bs := int64(st.Bsize) //nolint:unconvert // int32 on some architectures
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}

// blockSize is the size of a block device (or file) by seeking to its end.
func blockSize(p string) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Seek(0, 2)
}

// NodeExpandVolume makes the new size visible and grows the filesystem.
func (s *Server) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	p := req.GetVolumePath()
	if err := required(req.GetVolumeId(), "volume_id", p, "volume_path"); err != nil {
		return nil, err
	}
	v, err := parseVolume(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.NotFound, "volume path %s does not exist", p)
	}
	defer s.lock(v.String())()
	if err := s.Connector.Rescan(ctx, v.NQN()); err != nil {
		return nil, status.Errorf(codes.Internal, "rescan %s: %v", v.NQN(), err)
	}
	if req.GetVolumeCapability().GetBlock() != nil {
		size, _ := blockSize(p)
		return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
	}
	dev, _, err := mountutils.GetDeviceNameFromMount(s.Mounter, p)
	if err != nil || dev == "" {
		return nil, status.Errorf(codes.Internal, "device mounted at %s: %v", p, err)
	}
	if _, err := mountutils.NewResizeFs(s.Mounter.Exec).Resize(dev, p); err != nil {
		return nil, status.Errorf(codes.Internal, "grow filesystem on %s: %v", dev, err)
	}
	size, _ := blockSize(dev)
	s.Logger.Info("volume_expanded", "volume_id", v.String(), "device", dev, "size_bytes", size)
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

// NodeGetCapabilities lists what the node does.
func (s *Server) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var caps []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		caps = append(caps, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

// NodeGetInfo names the node and its host NQN (the node id), and the
// node's topology segment.
func (s *Server) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	resp := &csi.NodeGetInfoResponse{NodeId: csiids.Node{Name: s.NodeName, HostNQN: s.HostNQN}.String()}
	if s.TopologyKey != "" {
		resp.AccessibleTopology = &csi.Topology{Segments: map[string]string{s.TopologyKey: s.NodeName}}
	}
	return resp, nil
}
