package csicontroller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/csiids"
	"github.com/pillarhq/pillar/impl/pillar/stores"
)

// Snapshots and clones: a snapshot lives in its volume's pool and is named
// by "<store>/<pool>/<name>" like a volume; a volume from a snapshot or
// from another volume is created in that same pool (ZFS clones and LVM
// thin snapshots cannot leave it). docs/decisions.md, "Snapshots and
// clones", has the backends' semantics.

// SnapshotName maps a CSI snapshot name to the backend's like VolumeName,
// and also hashes names LVM reserves (Kubernetes' "snapshot-<uid>": LVM
// keeps LV names starting "snapshot" for itself) or the backends keep for
// their own snapshots.
func SnapshotName(csiName string) string {
	if nameRE.MatchString(csiName) && !strings.HasPrefix(csiName, "snapshot") && !strings.HasPrefix(csiName, backend.HiddenSnapshotPrefix) {
		return csiName
	}
	h := sha256.Sum256([]byte(csiName))
	return "sn-" + hex.EncodeToString(h[:16])
}

// samePool checks that a source named by id (store/pool/name) lives where
// the new volume is placed.
func (s *Server) samePool(ctx context.Context, st stores.Store, what, id, store, pool string) error {
	if store != st.Name {
		other, err := s.Stores.Get(ctx, store)
		if err != nil {
			return status.Errorf(codes.NotFound, "%s %s: store %q: %v", what, id, store, err)
		}
		if other.Pool() != st.Pool() || other.Agent != st.Agent {
			return status.Errorf(codes.InvalidArgument, "%s %s is in store %q; a volume with its content is created in the same pool, so parameters.%s must name a store of pool %q on agent %s, not %q", what, id, store, ParamStore, other.Pool(), other.Agent, st.Name)
		}
	}
	if pool != st.Pool() {
		return status.Errorf(codes.NotFound, "%s %s: store %q now places volumes in pool %q", what, id, st.Name, st.Pool())
	}
	return nil
}

// contentSource resolves a CreateVolume content source for the agent.
func (s *Server) contentSource(ctx context.Context, st stores.Store, cs *csi.VolumeContentSource) (*agentv1.VolumeSource, error) {
	switch {
	case cs == nil:
		return nil, nil
	case cs.GetSnapshot() != nil:
		id := cs.GetSnapshot().GetSnapshotId()
		sn, err := csiids.ParseSnapshot(id)
		if err != nil {
			return nil, status.Error(codes.NotFound, err.Error())
		}
		if err := s.samePool(ctx, st, "snapshot", id, sn.Store, sn.Pool); err != nil {
			return nil, err
		}
		return &agentv1.VolumeSource{Source: &agentv1.VolumeSource_Snapshot{Snapshot: sn.Name}}, nil
	case cs.GetVolume() != nil:
		id := cs.GetVolume().GetVolumeId()
		v, err := csiids.ParseVolume(id)
		if err != nil {
			return nil, status.Error(codes.NotFound, err.Error())
		}
		if err := s.samePool(ctx, st, "volume", id, v.Store, v.Pool); err != nil {
			return nil, err
		}
		return &agentv1.VolumeSource{Source: &agentv1.VolumeSource_Volume{Volume: v.Name}}, nil
	}
	return nil, status.Error(codes.InvalidArgument, "volume_content_source names neither a snapshot nor a volume")
}

func csiSnapshot(store string, sn *agentv1.Snapshot) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     csiids.Snapshot{Store: store, Pool: sn.GetPool(), Name: sn.GetName()}.String(),
		SourceVolumeId: csiids.Volume{Store: store, Pool: sn.GetPool(), Name: sn.GetSourceVolume()}.String(),
		SizeBytes:      sn.GetSizeBytes(),
		CreationTime:   timestamppb.New(time.Unix(sn.GetCreationUnix(), 0)),
		// Both backends' snapshots are complete when the command returns.
		ReadyToUse: true,
	}
}

// CreateSnapshot snapshots a volume in its pool. The same name and source
// return the existing snapshot; the same name of another volume of the
// pool is ALREADY_EXISTS (the agent checks).
func (s *Server) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if req.GetSourceVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "source_volume_id is required")
	}
	v, st, c, err := s.volume(ctx, req.GetSourceVolumeId())
	if err != nil {
		return nil, err
	}
	r, err := c.CreateSnapshot(ctx, &agentv1.CreateSnapshotRequest{Pool: v.Pool, Name: SnapshotName(req.GetName()), SourceVolume: v.Name})
	if err != nil {
		return nil, agentError("create snapshot", err)
	}
	snap := csiSnapshot(st.Name, r.GetSnapshot())
	s.Logger.Info("snapshot_created", "snapshot_id", snap.SnapshotId, "source_volume_id", snap.SourceVolumeId, "size_bytes", snap.SizeBytes)
	return &csi.CreateSnapshotResponse{Snapshot: snap}, nil
}

// DeleteSnapshot deletes a snapshot; unknown ids succeed, and a snapshot
// a ZFS clone still depends on is FAILED_PRECONDITION.
func (s *Server) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot_id is required")
	}
	sn, err := csiids.ParseSnapshot(req.GetSnapshotId())
	if err != nil {
		return &csi.DeleteSnapshotResponse{}, nil // not one of ours
	}
	st, c, err := s.agentOf(ctx, sn.Store)
	if status.Code(err) == codes.NotFound {
		// As for volumes: claiming it deleted would leak it silently.
		return nil, status.Errorf(codes.FailedPrecondition, "cannot delete %s: %s", req.GetSnapshotId(), status.Convert(err).Message())
	}
	if err != nil {
		return nil, err
	}
	if st.Pool() != sn.Pool {
		return nil, status.Errorf(codes.FailedPrecondition, "cannot delete %s: store %q now places volumes in pool %q", req.GetSnapshotId(), st.Name, st.Pool())
	}
	if _, err := c.DeleteSnapshot(ctx, &agentv1.DeleteSnapshotRequest{Pool: sn.Pool, Name: sn.Name}); err != nil {
		return nil, agentError("delete snapshot", err)
	}
	s.Logger.Info("snapshot_deleted", "snapshot_id", sn.String())
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists every store's snapshots, or those of one snapshot id
// or source volume id, paginated by position like ListVolumes.
func (s *Server) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	start, err := startingToken(req.GetStartingToken())
	if err != nil {
		return nil, err
	}
	var only []string
	switch {
	case req.GetSnapshotId() != "":
		sn, err := csiids.ParseSnapshot(req.GetSnapshotId())
		if err != nil {
			return &csi.ListSnapshotsResponse{}, nil
		}
		only = []string{sn.Store}
	case req.GetSourceVolumeId() != "":
		v, err := csiids.ParseVolume(req.GetSourceVolumeId())
		if err != nil {
			return &csi.ListSnapshotsResponse{}, nil
		}
		only = []string{v.Store}
	}
	var list []stores.Store
	if only != nil {
		st, err := s.Stores.Get(ctx, only[0])
		if err != nil {
			return &csi.ListSnapshotsResponse{}, nil // no such store, no such snapshots
		}
		list = []stores.Store{st}
	} else {
		if list, err = s.Stores.List(ctx); err != nil {
			return nil, status.Errorf(codes.Unavailable, "stores: %v", err)
		}
	}
	var all []*csi.ListSnapshotsResponse_Entry
	for _, st := range list {
		c, err := s.Agents.Client(st.Agent)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "agent of store %q: %v", st.Name, err)
		}
		r, err := c.ListSnapshots(ctx, &agentv1.ListSnapshotsRequest{Pool: st.Pool()})
		if err != nil {
			return nil, agentError("list snapshots of store "+st.Name, err)
		}
		for _, sn := range r.GetSnapshots() {
			snap := csiSnapshot(st.Name, sn)
			if (req.GetSnapshotId() != "" && snap.SnapshotId != req.GetSnapshotId()) ||
				(req.GetSourceVolumeId() != "" && snap.SourceVolumeId != req.GetSourceVolumeId()) {
				continue
			}
			all = append(all, &csi.ListSnapshotsResponse_Entry{Snapshot: snap})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Snapshot.SnapshotId < all[j].Snapshot.SnapshotId })
	entries, next, err := page(all, start, req.GetMaxEntries(), "snapshots")
	if err != nil {
		return nil, err
	}
	return &csi.ListSnapshotsResponse{Entries: entries, NextToken: next}, nil
}
