// Package agent is the pillar agent's gRPC service: it routes volume
// requests to the configured backend by pool name, exports volumes through
// the kernel NVMe-oF target, and maps every failure to a status code the
// CSI controller can act on (see agentapi/v1/agent.proto).
package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/keylock"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

// Server implements agentv1.AgentServiceServer.
type Server struct {
	agentv1.UnimplementedAgentServiceServer

	backends backend.Set
	exporter *nvmet.Exporter
	log      *slog.Logger
	version  string
	devWait  time.Duration

	// locks serialises the calls on one volume, so a retried create racing
	// the original, or an export racing a delete, see each other's result.
	locks keylock.Set

	// gens are the exports' generations by subsystem NQN (see
	// checkGeneration); changed under the volume's lock.
	gens *generations
	// fences counts hosts cut off from an export they could reach;
	// stale counts requests refused for an old generation, by method.
	fences atomic.Uint64
	staleM sync.Mutex
	stale  map[string]uint64
}

// Options configure a Server.
type Options struct {
	Backends backend.Set
	Exporter *nvmet.Exporter
	Logger   *slog.Logger
	Version  string
	// DeviceWait bounds the wait for a new volume's device node before it
	// is exported (zvol links appear asynchronously through udev); 10 s
	// when zero.
	DeviceWait time.Duration
	// StateDir keeps what must outlive a restart of the agent: the
	// exports' generations. Empty keeps them in memory only.
	StateDir string
}

// New returns a server over the configured backends and exporter, with
// the generations StateDir recorded.
func New(o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DeviceWait == 0 {
		o.DeviceWait = 10 * time.Second
	}
	gens, err := loadGenerations(o.StateDir)
	if err != nil {
		return nil, err
	}
	return &Server{backends: o.Backends, exporter: o.Exporter, log: o.Logger, version: o.Version, devWait: o.DeviceWait, gens: gens}, nil
}

func (s *Server) lock(pool, name string) func() {
	return s.locks.Lock(nvmet.ExportID(pool, name))
}

// volumeArgs checks the (pool, name) of a request and finds the backend.
func (s *Server) volumeArgs(pool, name string) (backend.Backend, error) {
	if pool == "" {
		return nil, status.Error(codes.InvalidArgument, "pool is required")
	}
	if err := backend.ValidateVolumeName(name); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	b, err := s.backends.Lookup(pool)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "pool %q is not configured on this agent (configured: %s)", pool, strings.Join(s.backends.Names(), ", "))
	}
	return b, nil
}

func positive(size int64) error {
	if size <= 0 {
		return status.Errorf(codes.InvalidArgument, "size_bytes %d must be positive", size)
	}
	return nil
}

// statusOf maps an error to the status the controller acts on.
func (s *Server) statusOf(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	//nolint:errorlint // Classify returns the sentinel itself
	switch backend.Classify(err) {
	case backend.ErrNotFound:
		code = codes.NotFound
	case backend.ErrAlreadyExists:
		code = codes.AlreadyExists
	case backend.ErrResourceExhausted:
		code = codes.ResourceExhausted
	case backend.ErrInvalid:
		code = codes.InvalidArgument
	case backend.ErrUnavailable:
		code = codes.Unavailable
	case backend.ErrInUse, backend.ErrNotOwned:
		code = codes.FailedPrecondition
	case backend.ErrOutOfRange:
		code = codes.OutOfRange
	default:
		switch {
		case errors.Is(err, context.Canceled):
			code = codes.Canceled
		case errors.Is(err, context.DeadlineExceeded):
			code = codes.DeadlineExceeded
		case errors.Is(err, nvmet.ErrPortConflict), errors.Is(err, syscall.EBUSY):
			code = codes.FailedPrecondition
		case !s.targetReady():
			code = codes.Unavailable
			err = fmt.Errorf("kernel NVMe target not available at %s (nvmet loaded and configfs mounted?): %w", s.exporter.Root, err)
		}
	}
	return status.Error(code, err.Error())
}

func (s *Server) targetReady() bool {
	return s.exporter != nil && s.exporter.FS.Exists(s.exporter.Root)
}

func kindOf(k backend.Kind) agentv1.BackendKind {
	switch k {
	case backend.KindZFS:
		return agentv1.BackendKind_BACKEND_KIND_ZFS
	case backend.KindLVM:
		return agentv1.BackendKind_BACKEND_KIND_LVM
	}
	return agentv1.BackendKind_BACKEND_KIND_UNSPECIFIED
}

// defaultModer is what LVM backends say about their default mode.
type defaultModer interface{ DefaultProvisioningMode() string }

func (s *Server) pools(ctx context.Context) []*agentv1.Pool {
	names := s.backends.Names()
	// Each backend's tools are asked at once: the controller lists pools
	// before every create, and backends share nothing.
	found := make([]backend.Pool, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { found[i] = s.backends[n].Discover(ctx) })
	}
	wg.Wait()
	var out []*agentv1.Pool
	for i, n := range names {
		b, p := s.backends[n], found[i]
		ap := &agentv1.Pool{
			Name: p.Name, Kind: kindOf(p.Kind),
			Layout:     &agentv1.Layout{ParentDataset: p.Layout.ParentDataset, ThinPool: p.Layout.ThinPool},
			Discovered: p.Discovered, Healthy: p.Healthy, Reason: p.Reason,
			TotalBytes: p.Capacity.TotalBytes, FreeBytes: p.Capacity.FreeBytes,
		}
		if m, ok := b.(defaultModer); ok {
			ap.DefaultProvisioningMode = m.DefaultProvisioningMode()
		}
		if p.Capacity.ThinPool {
			ap.ThinMetadataUsed = &p.Capacity.ThinMetadataUsed
		}
		out = append(out, ap)
	}
	return out
}

// GetHealth reports every pool and the target.
func (s *Server) GetHealth(ctx context.Context, _ *agentv1.GetHealthRequest) (*agentv1.GetHealthResponse, error) {
	resp := &agentv1.GetHealthResponse{Pools: s.pools(ctx), TargetReady: s.targetReady(), Version: s.version}
	resp.Healthy = resp.TargetReady
	if !resp.TargetReady {
		resp.Reasons = append(resp.Reasons, fmt.Sprintf("kernel NVMe target not available: %s is missing (load nvmet and nvmet_tcp)", s.exporter.Root))
	}
	for _, p := range resp.Pools {
		if !p.Healthy {
			resp.Healthy = false
			resp.Reasons = append(resp.Reasons, fmt.Sprintf("pool %s: %s", p.Name, p.Reason))
		}
	}
	return resp, nil
}

// ListPools reports every configured pool.
func (s *Server) ListPools(ctx context.Context, _ *agentv1.ListPoolsRequest) (*agentv1.ListPoolsResponse, error) {
	return &agentv1.ListPoolsResponse{Pools: s.pools(ctx)}, nil
}

// GetCapacity is one pool's capacity.
func (s *Server) GetCapacity(ctx context.Context, req *agentv1.GetCapacityRequest) (*agentv1.GetCapacityResponse, error) {
	b, err := s.backends.Lookup(req.GetPool())
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "pool %q is not configured on this agent", req.GetPool())
	}
	c, err := b.Capacity(ctx, req.GetParameters())
	if err != nil {
		return nil, s.statusOf(err)
	}
	return &agentv1.GetCapacityResponse{TotalBytes: c.TotalBytes, FreeBytes: c.FreeBytes}, nil
}

func (s *Server) volume(pool string, v backend.Volume, t *nvmet.Target) *agentv1.Volume {
	out := &agentv1.Volume{Pool: pool, Name: v.Name, SizeBytes: v.SizeBytes, DevicePath: v.DevicePath, ProvisioningMode: v.Mode, Native: v.Native}
	if t != nil {
		out.Export = s.export(t)
	}
	return out
}

func (s *Server) export(t *nvmet.Target) *agentv1.Export {
	return &agentv1.Export{
		Nqn: t.NQN, Uuid: t.UUID, Nguid: t.NGUID, Transport: "tcp",
		Address: t.Address, Port: int32(t.Service), AddressFamily: s.exporter.Port.Family,
		AllowedHosts: t.Hosts, Generation: s.generation(t.NQN),
	}
}

func (s *Server) generation(nqn string) uint64 { return s.gens.get(nqn) }

// checkGeneration refuses a request decided on an older generation of the
// volume's export than the agent holds: it was overtaken by a later
// publication (a deposed leader's call, a retry arriving late) and would
// undo it. Called under the volume's lock, before anything changes.
func (s *Server) checkGeneration(id, method string, gen uint64) error {
	cur := s.generation(nvmet.NQN(id))
	if gen == 0 || gen >= cur {
		return nil
	}
	s.staleM.Lock()
	if s.stale == nil {
		s.stale = map[string]uint64{}
	}
	s.stale[method]++
	s.staleM.Unlock()
	s.log.Warn("stale_request_refused", "method", method, "export", id, "generation", gen, "current", cur)
	return status.Errorf(codes.Aborted, "stale request: volume %s's export is at generation %d, the request was decided at %d (read the export again and decide anew)", id, cur, gen)
}

// advance records a change of the export before it is made: one past
// the larger of the agent's generation and the caller's (an agent
// without a state directory starts at 0 after a restart and takes up the
// callers' count). When the record cannot be written the change is not
// made (UNAVAILABLE).
func (s *Server) advance(id string, gen uint64) error {
	if err := s.gens.advance(nvmet.NQN(id), gen); err != nil {
		s.log.Error("generation_not_recorded", "export", id, "error", err.Error())
		return status.Errorf(codes.Unavailable, "volume %s: %v", id, err)
	}
	return nil
}

// FenceCounts are the counters of the fence metric: hosts cut off, and
// stale requests refused by method.
func (s *Server) FenceCounts() (fences uint64, stale map[string]uint64) {
	s.staleM.Lock()
	defer s.staleM.Unlock()
	out := make(map[string]uint64, len(s.stale))
	for k, v := range s.stale {
		out[k] = v
	}
	return s.fences.Load(), out
}

// exported is a volume's target, nil when it is not exported.
func (s *Server) exported(pool, name string) (*nvmet.Target, error) {
	t, err := s.exporter.Get(nvmet.ExportID(pool, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return t, err
}

// CreateVolume creates a volume, or returns the matching existing one.
func (s *Server) CreateVolume(ctx context.Context, req *agentv1.CreateVolumeRequest) (*agentv1.CreateVolumeResponse, error) {
	b, err := s.volumeArgs(req.GetPool(), req.GetName())
	if err == nil && req.GetSource() == nil {
		err = positive(req.GetSizeBytes())
	}
	if err != nil {
		return nil, err
	}
	defer s.lock(req.GetPool(), req.GetName())()
	var v backend.Volume
	if src := req.GetSource(); src != nil {
		// Snapshots and clones (snapshots.go).
		v, err = b.CreateVolumeFrom(ctx, req.GetName(), req.GetSizeBytes(), backend.Source{Snapshot: src.GetSnapshot(), Volume: src.GetVolume()}, req.GetParameters())
	} else {
		v, err = b.CreateVolume(ctx, req.GetName(), req.GetSizeBytes(), req.GetParameters())
	}
	if err != nil {
		return nil, s.statusOf(err)
	}
	t, err := s.exported(req.GetPool(), req.GetName())
	if err != nil {
		return nil, s.statusOf(err)
	}
	s.log.Info("volume_created", "pool", req.GetPool(), "volume", v.Name, "size_bytes", v.SizeBytes, "mode", v.Mode)
	return &agentv1.CreateVolumeResponse{Volume: s.volume(req.GetPool(), v, t)}, nil
}

// DeleteVolume unexports and deletes a volume.
func (s *Server) DeleteVolume(ctx context.Context, req *agentv1.DeleteVolumeRequest) (*agentv1.DeleteVolumeResponse, error) {
	b, err := s.volumeArgs(req.GetPool(), req.GetName())
	if err != nil {
		return nil, err
	}
	defer s.lock(req.GetPool(), req.GetName())()
	if err := s.exporter.Unexport(nvmet.ExportID(req.GetPool(), req.GetName())); err != nil {
		return nil, s.statusOf(fmt.Errorf("unexport before delete: %w", err))
	}
	if err := b.DeleteVolume(ctx, req.GetName()); err != nil {
		return nil, s.statusOf(err)
	}
	// A deleted volume's generation guards nothing; a failure to drop it
	// only leaves an entry behind.
	if err := s.gens.forget(nvmet.NQN(nvmet.ExportID(req.GetPool(), req.GetName()))); err != nil {
		s.log.Warn("generation_not_forgotten", "pool", req.GetPool(), "volume", req.GetName(), "error", err.Error())
	}
	s.log.Info("volume_deleted", "pool", req.GetPool(), "volume", req.GetName())
	return &agentv1.DeleteVolumeResponse{}, nil
}

// ExpandVolume grows a volume and has the target re-read its size.
func (s *Server) ExpandVolume(ctx context.Context, req *agentv1.ExpandVolumeRequest) (*agentv1.ExpandVolumeResponse, error) {
	b, err := s.volumeArgs(req.GetPool(), req.GetName())
	if err == nil {
		err = positive(req.GetSizeBytes())
	}
	if err != nil {
		return nil, err
	}
	defer s.lock(req.GetPool(), req.GetName())()
	v, err := b.ExpandVolume(ctx, req.GetName(), req.GetSizeBytes())
	if err != nil {
		return nil, s.statusOf(err)
	}
	if err := s.exporter.Revalidate(nvmet.ExportID(req.GetPool(), req.GetName())); err != nil {
		return nil, s.statusOf(err)
	}
	t, err := s.exported(req.GetPool(), req.GetName())
	if err != nil {
		return nil, s.statusOf(err)
	}
	s.log.Info("volume_expanded", "pool", req.GetPool(), "volume", v.Name, "size_bytes", v.SizeBytes)
	return &agentv1.ExpandVolumeResponse{Volume: s.volume(req.GetPool(), v, t)}, nil
}

// ListVolumes lists the volumes of one pool or all, with their exports.
func (s *Server) ListVolumes(ctx context.Context, req *agentv1.ListVolumesRequest) (*agentv1.ListVolumesResponse, error) {
	names := s.backends.Names()
	if req.GetPool() != "" {
		if _, err := s.backends.Lookup(req.GetPool()); err != nil {
			return nil, status.Errorf(codes.NotFound, "pool %q is not configured on this agent", req.GetPool())
		}
		names = []string{req.GetPool()}
	}
	targets, err := s.exporter.List()
	if err != nil && s.targetReady() {
		return nil, s.statusOf(err)
	}
	byID := map[string]*nvmet.Target{}
	for i := range targets {
		byID[targets[i].VolumeID] = &targets[i]
	}
	resp := &agentv1.ListVolumesResponse{}
	for _, n := range names {
		vols, err := s.backends[n].ListVolumes(ctx)
		if err != nil {
			return nil, s.statusOf(fmt.Errorf("pool %s: %w", n, err))
		}
		for _, v := range vols {
			resp.Volumes = append(resp.Volumes, s.volume(n, v, byID[nvmet.ExportID(n, v.Name)]))
		}
	}
	sort.SliceStable(resp.Volumes, func(i, j int) bool {
		a, b := resp.Volumes[i], resp.Volumes[j]
		return a.Pool < b.Pool || (a.Pool == b.Pool && a.Name < b.Name)
	})
	return resp, nil
}

// validHostNQN is the NVMe spec's shape of an NQN: "nqn." and at most 223
// bytes; configfs names cannot hold '/'.
func validHostNQN(nqn string) error {
	if !strings.HasPrefix(nqn, "nqn.") || len(nqn) > 223 || strings.ContainsAny(nqn, "/ \t\n") {
		return status.Errorf(codes.InvalidArgument, "host NQN %q is not an NQN (\"nqn.\" prefix, at most 223 bytes, no '/' or spaces)", nqn)
	}
	return nil
}

// ExportVolume exports a volume for the listed hosts.
func (s *Server) ExportVolume(ctx context.Context, req *agentv1.ExportVolumeRequest) (*agentv1.ExportVolumeResponse, error) {
	b, err := s.volumeArgs(req.GetPool(), req.GetName())
	if err != nil {
		return nil, err
	}
	for _, h := range req.GetAllowedHosts() {
		if err := validHostNQN(h); err != nil {
			return nil, err
		}
	}
	defer s.lock(req.GetPool(), req.GetName())()
	v, err := b.GetVolume(ctx, req.GetName())
	if err != nil {
		return nil, s.statusOf(err)
	}
	if err := waitDevice(ctx, v.DevicePath, s.devWait); err != nil {
		return nil, err
	}
	id := nvmet.ExportID(req.GetPool(), req.GetName())
	if err := s.checkGeneration(id, "ExportVolume", req.GetGeneration()); err != nil {
		return nil, err
	}
	if req.GetSingleHost() {
		if err := s.onlyHosts(id, req.GetAllowedHosts()); err != nil {
			return nil, err
		}
	}
	if err := s.advance(id, req.GetGeneration()); err != nil {
		return nil, err
	}
	if _, err := s.exporter.Export(id, v.DevicePath); err != nil {
		return nil, s.statusOf(err)
	}
	for _, h := range req.GetAllowedHosts() {
		if err := s.exporter.AllowHost(id, h); err != nil {
			return nil, s.statusOf(err)
		}
	}
	t, err := s.exporter.Get(id)
	if err != nil {
		return nil, s.statusOf(err)
	}
	s.log.Info("volume_exported", "pool", req.GetPool(), "volume", req.GetName(), "nqn", t.NQN, "hosts", len(t.Hosts))
	return &agentv1.ExportVolumeResponse{Export: s.export(t)}, nil
}

// onlyHosts refuses a single-host export when the volume already allows
// a host outside hosts. It runs under the volume's lock, so of two
// exports racing for different hosts the second sees the first's host.
func (s *Server) onlyHosts(id string, hosts []string) error {
	t, err := s.exporter.Get(id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return s.statusOf(err)
	}
	for _, h := range t.Hosts {
		if !slices.Contains(hosts, h) {
			return status.Errorf(codes.FailedPrecondition, "volume %s is served to one host at a time and already allows host %s (unpublish it there first)", id, h)
		}
	}
	return nil
}

// waitDevice waits until a volume's device node exists.
func waitDevice(ctx context.Context, path string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return status.Errorf(codes.Unavailable, "device %s of the volume did not appear within %s", path, limit)
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// UnexportVolume removes a volume's export.
func (s *Server) UnexportVolume(ctx context.Context, req *agentv1.UnexportVolumeRequest) (*agentv1.UnexportVolumeResponse, error) {
	if _, err := s.volumeArgs(req.GetPool(), req.GetName()); err != nil {
		return nil, err
	}
	defer s.lock(req.GetPool(), req.GetName())()
	id := nvmet.ExportID(req.GetPool(), req.GetName())
	if err := s.checkGeneration(id, "UnexportVolume", req.GetGeneration()); err != nil {
		return nil, err
	}
	if err := s.advance(id, req.GetGeneration()); err != nil {
		return nil, err
	}
	if err := s.exporter.Unexport(id); err != nil {
		return nil, s.statusOf(err)
	}
	s.log.Info("volume_unexported", "pool", req.GetPool(), "volume", req.GetName())
	return &agentv1.UnexportVolumeResponse{}, nil
}

// AllowHost lets one more host reach an exported volume.
func (s *Server) AllowHost(ctx context.Context, req *agentv1.AllowHostRequest) (*agentv1.AllowHostResponse, error) {
	if _, err := s.volumeArgs(req.GetPool(), req.GetName()); err != nil {
		return nil, err
	}
	if err := validHostNQN(req.GetHostNqn()); err != nil {
		return nil, err
	}
	defer s.lock(req.GetPool(), req.GetName())()
	id := nvmet.ExportID(req.GetPool(), req.GetName())
	if err := s.checkGeneration(id, "AllowHost", req.GetGeneration()); err != nil {
		return nil, err
	}
	if t, err := s.exported(req.GetPool(), req.GetName()); err != nil {
		return nil, s.statusOf(err)
	} else if t == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s/%s is not exported", req.GetPool(), req.GetName())
	}
	if err := s.advance(id, req.GetGeneration()); err != nil {
		return nil, err
	}
	if err := s.exporter.AllowHost(id, req.GetHostNqn()); errors.Is(err, fs.ErrNotExist) {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s/%s is not exported", req.GetPool(), req.GetName())
	} else if err != nil {
		return nil, s.statusOf(err)
	}
	t, err := s.exporter.Get(id)
	if err != nil {
		return nil, s.statusOf(err)
	}
	s.log.Info("host_allowed", "pool", req.GetPool(), "volume", req.GetName(), "host", req.GetHostNqn())
	return &agentv1.AllowHostResponse{Export: s.export(t)}, nil
}

// DenyHost removes a host's access; a volume that is not exported has no
// hosts, so that is no error.
func (s *Server) DenyHost(ctx context.Context, req *agentv1.DenyHostRequest) (*agentv1.DenyHostResponse, error) {
	if _, err := s.volumeArgs(req.GetPool(), req.GetName()); err != nil {
		return nil, err
	}
	if err := validHostNQN(req.GetHostNqn()); err != nil {
		return nil, err
	}
	defer s.lock(req.GetPool(), req.GetName())()
	id := nvmet.ExportID(req.GetPool(), req.GetName())
	if err := s.checkGeneration(id, "DenyHost", req.GetGeneration()); err != nil {
		return nil, err
	}
	before, err := s.exported(req.GetPool(), req.GetName())
	if err != nil {
		return nil, s.statusOf(err)
	}
	fence := before != nil && slices.Contains(before.Hosts, req.GetHostNqn())
	if fence {
		if err := s.advance(id, req.GetGeneration()); err != nil {
			return nil, err
		}
	}
	if err := s.exporter.DenyHost(id, req.GetHostNqn()); err != nil {
		return nil, s.statusOf(err)
	}
	if fence {
		s.fences.Add(1)
	}
	resp := &agentv1.DenyHostResponse{}
	t, err := s.exporter.Get(id)
	if err == nil {
		resp.Export = s.export(t)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, s.statusOf(err)
	}
	s.log.Info("host_denied", "pool", req.GetPool(), "volume", req.GetName(), "host", req.GetHostNqn())
	return resp, nil
}

// LogCalls is a unary interceptor logging every call with its outcome.
func LogCalls(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		lvl := slog.LevelDebug
		if err != nil {
			lvl = slog.LevelWarn
		}
		log.Log(ctx, lvl, "grpc_call", "method", info.FullMethod, "code", status.Code(err).String(), "duration_ms", float64(time.Since(start).Microseconds())/1000, "error", errString(err))
		return resp, err
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return status.Convert(err).Message()
}
