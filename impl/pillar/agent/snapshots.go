package agent

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/backend"
)

// snapshotArgs checks the (pool, name) of a snapshot request.
func (s *Server) snapshotArgs(pool, name string) (backend.Backend, error) {
	if err := backend.ValidateSnapshotName(name); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return s.volumeArgs(pool, name)
}

func snapshotOf(pool string, sn backend.Snapshot) *agentv1.Snapshot {
	return &agentv1.Snapshot{Pool: pool, Name: sn.Name, SourceVolume: sn.SourceVolume, SizeBytes: sn.SizeBytes, CreationUnix: sn.CreatedAt.Unix(), Native: sn.Native}
}

// CreateSnapshot snapshots a volume, or returns the same existing snapshot.
// Snapshot and volume names share one lock space, as they share LVM's.
func (s *Server) CreateSnapshot(ctx context.Context, req *agentv1.CreateSnapshotRequest) (*agentv1.CreateSnapshotResponse, error) {
	b, err := s.snapshotArgs(req.GetPool(), req.GetName())
	if err != nil {
		return nil, err
	}
	if err := backend.ValidateVolumeName(req.GetSourceVolume()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "source_volume: %v", err)
	}
	defer s.lock(req.GetPool(), req.GetName())()
	sn, err := b.CreateSnapshot(ctx, req.GetName(), req.GetSourceVolume())
	if err != nil {
		return nil, s.statusOf(err)
	}
	s.log.Info("snapshot_created", "pool", req.GetPool(), "snapshot", sn.Name, "source", sn.SourceVolume, "size_bytes", sn.SizeBytes)
	return &agentv1.CreateSnapshotResponse{Snapshot: snapshotOf(req.GetPool(), sn)}, nil
}

// DeleteSnapshot deletes a snapshot; a missing one is not an error.
func (s *Server) DeleteSnapshot(ctx context.Context, req *agentv1.DeleteSnapshotRequest) (*agentv1.DeleteSnapshotResponse, error) {
	b, err := s.snapshotArgs(req.GetPool(), req.GetName())
	if err != nil {
		return nil, err
	}
	defer s.lock(req.GetPool(), req.GetName())()
	if err := b.DeleteSnapshot(ctx, req.GetName()); err != nil {
		return nil, s.statusOf(err)
	}
	s.log.Info("snapshot_deleted", "pool", req.GetPool(), "snapshot", req.GetName())
	return &agentv1.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists the snapshots of one pool or all, by pool and name.
func (s *Server) ListSnapshots(ctx context.Context, req *agentv1.ListSnapshotsRequest) (*agentv1.ListSnapshotsResponse, error) {
	names := s.backends.Names()
	if req.GetPool() != "" {
		if _, err := s.backends.Lookup(req.GetPool()); err != nil {
			return nil, status.Errorf(codes.NotFound, "pool %q is not configured on this agent", req.GetPool())
		}
		names = []string{req.GetPool()}
	}
	resp := &agentv1.ListSnapshotsResponse{}
	for _, n := range names {
		snaps, err := s.backends[n].ListSnapshots(ctx)
		if err != nil {
			return nil, s.statusOf(fmt.Errorf("pool %s: %w", n, err))
		}
		for _, sn := range snaps {
			resp.Snapshots = append(resp.Snapshots, snapshotOf(n, sn))
		}
	}
	return resp, nil
}
