package csisidecar

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
)

// Resizer expands the volumes of bound claims whose request grew past
// their capacity, as external-resizer does: ControllerExpandVolume, the PV's
// capacity raised, then either the claim's capacity set or the node step
// left to the kubelet (condition FileSystemResizePending, allocated
// resource status NodeResizePending, which the v1.37 kubelet reads).
type Resizer struct {
	Client   kubernetes.Interface
	Conn     *grpc.ClientConn
	Driver   string
	Events   record.EventRecorder
	Log      *slog.Logger
	Interval time.Duration // between passes over the claims; 1 s when zero
	Timeout  time.Duration // per CSI call; 2 min when zero

	controllerExpand bool
	retryAt          map[types.UID]time.Time
	failures         map[types.UID]int
}

// Run passes over the claims until ctx ends.
func (r *Resizer) Run(ctx context.Context) error {
	caps, err := csi.NewControllerClient(r.Conn).ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		return fmt.Errorf("ControllerGetCapabilities: %w", err)
	}
	for _, c := range caps.GetCapabilities() {
		if c.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_EXPAND_VOLUME {
			r.controllerExpand = true
		}
	}
	interval := r.Interval
	if interval == 0 {
		interval = time.Second
	}
	for {
		r.Sync(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// Sync makes one pass: every claim of the driver that needs it is resized.
func (r *Resizer) Sync(ctx context.Context) {
	if r.retryAt == nil {
		r.retryAt, r.failures = map[types.UID]time.Time{}, map[types.UID]int{}
	}
	pvcs, err := r.Client.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		r.Log.Warn("listing claims", "error", err)
		return
	}
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		if time.Now().Before(r.retryAt[pvc.UID]) {
			continue
		}
		if err := r.resize(ctx, pvc); err != nil {
			r.failures[pvc.UID]++
			backoff := min(time.Second<<min(r.failures[pvc.UID], 8), 5*time.Minute)
			r.retryAt[pvc.UID] = time.Now().Add(backoff)
			r.Log.Warn("resize failed", "pvc", pvc.Namespace+"/"+pvc.Name, "error", err, "retry_in", backoff)
		} else {
			delete(r.failures, pvc.UID)
			delete(r.retryAt, pvc.UID)
		}
	}
}

func storage(l corev1.ResourceList) resource.Quantity { return l[corev1.ResourceStorage] }

func (r *Resizer) resize(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil
	}
	want := storage(pvc.Spec.Resources.Requests)
	have := storage(pvc.Status.Capacity)
	if want.Cmp(have) <= 0 {
		return nil
	}
	pv, err := r.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != r.Driver {
		return nil
	}
	if pvSize := storage(pv.Spec.Capacity); pvSize.Cmp(want) >= 0 {
		// The controller step is done; the kubelet finishes the node step.
		return nil
	}
	r.Events.Event(pvc, corev1.EventTypeNormal, "Resizing", fmt.Sprintf("External resizer is resizing volume %s", pv.Name))
	pvc, err = r.setStatus(ctx, pvc, func(s *corev1.PersistentVolumeClaimStatus) {
		s.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: want}
		s.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: corev1.PersistentVolumeClaimControllerResizeInProgress}
		setCondition(s, corev1.PersistentVolumeClaimResizing, "")
	})
	if err != nil {
		return err
	}
	newSize, nodeExpand := want, true
	if r.controllerExpand {
		timeout := r.Timeout
		if timeout == 0 {
			timeout = 2 * time.Minute
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := csi.NewControllerClient(r.Conn).ControllerExpandVolume(cctx, &csi.ControllerExpandVolumeRequest{
			VolumeId:         pv.Spec.CSI.VolumeHandle,
			CapacityRange:    &csi.CapacityRange{RequiredBytes: want.Value()},
			VolumeCapability: capability(pv),
		})
		cancel()
		if err != nil {
			infeasible := status.Code(err) == codes.InvalidArgument || status.Code(err) == codes.OutOfRange || status.Code(err) == codes.NotFound
			_, _ = r.setStatus(ctx, pvc, func(s *corev1.PersistentVolumeClaimStatus) {
				// A retryable failure stays in progress; the API has no
				// other state for it.
				st := corev1.PersistentVolumeClaimControllerResizeInProgress
				if infeasible {
					st = corev1.PersistentVolumeClaimControllerResizeInfeasible
				}
				s.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: st}
				s.Conditions = withoutResizeConditions(s.Conditions)
				s.Conditions = append(s.Conditions, corev1.PersistentVolumeClaimCondition{
					Type: corev1.PersistentVolumeClaimControllerResizeError, Status: corev1.ConditionTrue,
					LastTransitionTime: metav1.Now(), Message: "resize volume " + pv.Name + " failed: " + err.Error()})
			})
			r.Events.Event(pvc, corev1.EventTypeWarning, "VolumeResizeFailed", err.Error())
			return err
		}
		if resp.GetCapacityBytes() > 0 {
			newSize = *resource.NewQuantity(resp.GetCapacityBytes(), resource.BinarySI)
		}
		nodeExpand = resp.GetNodeExpansionRequired()
	}
	pvCopy := pv.DeepCopy()
	pvCopy.Spec.Capacity[corev1.ResourceStorage] = newSize
	if _, err := r.Client.CoreV1().PersistentVolumes().Update(ctx, pvCopy, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating the PV's capacity: %w", err)
	}
	if nodeExpand {
		_, err = r.setStatus(ctx, pvc, func(s *corev1.PersistentVolumeClaimStatus) {
			s.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizePending}
			setCondition(s, corev1.PersistentVolumeClaimFileSystemResizePending, "Waiting for user to (re-)start a pod to finish file system resize of volume on node.")
		})
		if err == nil {
			r.Events.Event(pvc, corev1.EventTypeNormal, "FileSystemResizeRequired", "Require file system resize of volume on node")
		}
		return err
	}
	_, err = r.setStatus(ctx, pvc, func(s *corev1.PersistentVolumeClaimStatus) {
		s.Capacity = corev1.ResourceList{corev1.ResourceStorage: newSize}
		s.AllocatedResourceStatuses = nil
		s.Conditions = withoutResizeConditions(s.Conditions)
	})
	if err == nil {
		r.Events.Event(pvc, corev1.EventTypeNormal, "VolumeResizeSuccessful", "Resize volume succeeded")
	}
	return err
}

func (r *Resizer) setStatus(ctx context.Context, pvc *corev1.PersistentVolumeClaim, f func(*corev1.PersistentVolumeClaimStatus)) (*corev1.PersistentVolumeClaim, error) {
	c := pvc.DeepCopy()
	f(&c.Status)
	return r.Client.CoreV1().PersistentVolumeClaims(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
}

func withoutResizeConditions(in []corev1.PersistentVolumeClaimCondition) []corev1.PersistentVolumeClaimCondition {
	var out []corev1.PersistentVolumeClaimCondition
	for _, c := range in {
		switch c.Type {
		case corev1.PersistentVolumeClaimResizing, corev1.PersistentVolumeClaimFileSystemResizePending, corev1.PersistentVolumeClaimControllerResizeError:
		default:
			out = append(out, c)
		}
	}
	return out
}

func setCondition(s *corev1.PersistentVolumeClaimStatus, t corev1.PersistentVolumeClaimConditionType, msg string) {
	s.Conditions = append(withoutResizeConditions(s.Conditions), corev1.PersistentVolumeClaimCondition{
		Type: t, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now(), Message: msg})
}

// capability describes the PV as the plugin was asked to provision it.
func capability(pv *corev1.PersistentVolume) *csi.VolumeCapability {
	mode := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	for _, m := range pv.Spec.AccessModes {
		switch m {
		case corev1.ReadWriteOncePod:
			mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		case corev1.ReadOnlyMany:
			mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		case corev1.ReadWriteMany:
			mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		}
	}
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: pv.Spec.CSI.FSType, MountFlags: pv.Spec.MountOptions}}
	}
	return c
}
