package kubecontroller

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/pillarhq/pillar/impl/pillar/crd"
	"github.com/pillarhq/pillar/impl/pillar/stores"
)

// Source is the CSI controller's view of PillarStore resources.
type Source struct{ *Config }

var _ stores.Source = Source{}

// Get resolves one store.
func (s Source) Get(ctx context.Context, name string) (stores.Store, error) {
	u := crd.New(s.Group, crd.KindStore)
	if err := s.Client.Get(ctx, types.NamespacedName{Name: name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return stores.Store{}, fmt.Errorf("%q: %w", name, stores.ErrNotFound)
		}
		return stores.Store{}, err
	}
	st := &crd.Store{}
	if err := crd.FromUnstructured(u, st); err != nil {
		return stores.Store{}, err
	}
	return s.toStore(ctx, st)
}

// List resolves every store whose agent can be resolved.
func (s Source) List(ctx context.Context) ([]stores.Store, error) {
	l := crd.NewList(s.Group, crd.KindStore)
	if err := s.Client.List(ctx, l); err != nil {
		return nil, err
	}
	var out []stores.Store
	for i := range l.Items {
		st := &crd.Store{}
		if err := crd.FromUnstructured(&l.Items[i], st); err != nil {
			continue
		}
		if r, err := s.toStore(ctx, st); err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// StorageClass parameters and PVC annotation of overrides.
const (
	ParamProfile = "profile"
	paramPVCName = "csi.storage.k8s.io/pvc/name"
	paramPVCNS   = "csi.storage.k8s.io/pvc/namespace"
)

// BackendAnnotation is the PVC annotation holding its backend document:
// the PillarVolumeProfile spec shape, YAML or JSON.
func (c *Config) BackendAnnotation() string { return c.Group + "/backend" }

// Overrides resolves a StorageClass's profile and the PVC's backend
// document (read through the provisioner's --extra-create-metadata
// parameters), the PVC winning.
type Overrides struct{ *Config }

// Resolve returns parameters in the controller's form ("zfs.<prop>",
// "provisioningMode").
func (o Overrides) Resolve(ctx context.Context, st stores.Store, params map[string]string) (map[string]string, error) {
	out := map[string]string{}
	apply := func(spec crd.ProfileSpec) {
		if spec.ZFS != nil {
			for k, v := range spec.ZFS.Properties {
				out["zfs."+k] = v
			}
		}
		if spec.LVM != nil && spec.LVM.ProvisioningMode != "" {
			out["provisioningMode"] = spec.LVM.ProvisioningMode
		}
	}
	if name := params[ParamProfile]; name != "" {
		u := crd.New(o.Group, crd.KindProfile)
		if err := o.Client.Get(ctx, types.NamespacedName{Name: name}, u); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, status.Errorf(codes.InvalidArgument, "parameters.profile names PillarVolumeProfile %q, which does not exist", name)
			}
			return nil, status.Errorf(codes.Unavailable, "profile %q: %v", name, err)
		}
		p := &crd.Profile{}
		if err := crd.FromUnstructured(u, p); err != nil {
			return nil, err
		}
		apply(p.Spec)
	}
	if name, ns := params[paramPVCName], params[paramPVCNS]; name != "" && ns != "" {
		var pvc corev1.PersistentVolumeClaim
		if err := o.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pvc); err != nil {
			return nil, status.Errorf(codes.Unavailable, "PVC %s/%s: %v", ns, name, err)
		}
		if doc := strings.TrimSpace(pvc.Annotations[o.BackendAnnotation()]); doc != "" {
			var spec crd.ProfileSpec
			if err := yaml.UnmarshalStrict([]byte(doc), &spec); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "PVC %s/%s annotation %s: %v", ns, name, o.BackendAnnotation(), err)
			}
			p := &crd.Profile{Spec: spec}
			if errs := crd.ValidateProfile(p); len(errs) > 0 {
				return nil, status.Errorf(codes.InvalidArgument, "PVC %s/%s annotation %s: %v", ns, name, o.BackendAnnotation(), errs.ToAggregate())
			}
			apply(spec)
		}
	}
	return out, nil
}
