// Package crd holds the driver's custom resources (group = the driver
// domain, version v1alpha1): PillarAgent, PillarStore and
// PillarVolumeProfile, as plain structs converted to and from unstructured
// objects, because the API group is the chart's configurable driver
// domain and so is only known at run time. Validate* are the webhook's
// rules (the CRD schemas hold the structural ones).
package crd

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/pillarhq/pillar/impl/pillar/stores"
)

// Version is the resources' API version.
const Version = "v1alpha1"

// Kinds.
const (
	KindAgent   = "PillarAgent"
	KindStore   = "PillarStore"
	KindProfile = "PillarVolumeProfile"
)

// GVK is a kind of the group.
func GVK(group, kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: group, Version: Version, Kind: kind}
}

// New is an empty unstructured object of a kind, for clients and watches.
func New(group, kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(GVK(group, kind))
	return u
}

// NewList is an empty list of a kind.
func NewList(group, kind string) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(GVK(group, kind+"List"))
	return l
}

// Agent is a PillarAgent.
type Agent struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              AgentSpec   `json:"spec"`
	Status            AgentStatus `json:"status,omitempty"`
}

// AgentSpec says where an agent runs and how to reach it.
type AgentSpec struct {
	NodeName string `json:"nodeName"`
	Address  string `json:"address,omitempty"`
	Port     int    `json:"port,omitempty"`
}

// AgentStatus is what the controller saw.
type AgentStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	Pools      []AgentPool        `json:"pools,omitempty"`
}

// AgentPool is one pool an agent discovered.
type AgentPool struct {
	Name       string `json:"name"`
	Kind       string `json:"kind"`
	TotalBytes int64  `json:"totalBytes"`
	FreeBytes  int64  `json:"freeBytes"`
}

// Store is a PillarStore.
type Store struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              StoreSpec   `json:"spec"`
	Status            StoreStatus `json:"status,omitempty"`
}

// StoreSpec names the agent and the placement.
type StoreSpec struct {
	AgentRef string       `json:"agentRef"`
	Backend  StoreBackend `json:"backend"`
}

// StoreBackend is exactly one of ZFS and LVM: the same placement the
// standalone stores file holds.
type StoreBackend = stores.Backend

// StoreStatus is what the controller saw.
type StoreStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	Capacity   *Capacity          `json:"capacity,omitempty"`
}

// Capacity of a store.
type Capacity struct {
	TotalBytes int64 `json:"totalBytes"`
	FreeBytes  int64 `json:"freeBytes"`
}

// Profile is a PillarVolumeProfile: storage-class resource overrides.
type Profile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ProfileSpec `json:"spec"`
}

// ProfileSpec overrides a store's per-volume settings.
type ProfileSpec struct {
	ZFS *ProfileZFS `json:"zfs,omitempty"`
	LVM *ProfileLVM `json:"lvm,omitempty"`
}

// ProfileZFS sets ZFS properties of volumes.
type ProfileZFS struct {
	Properties map[string]string `json:"properties,omitempty"`
}

// ProfileLVM sets the LVM provisioning mode of volumes.
type ProfileLVM struct {
	ProvisioningMode string `json:"provisioningMode,omitempty"`
}

// FromUnstructured converts into one of the structs.
func FromUnstructured(u *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, into)
}

// ToUnstructured converts one of the structs.
func ToUnstructured(obj any) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// Condition types and reasons.
const (
	CondReady          = "Ready"
	CondAgentReachable = "AgentReachable"
	CondPoolDiscovered = "PoolDiscovered"
)

// reservedProperties are zvol properties the driver sets itself.
var reservedProperties = map[string]bool{"volsize": true, "name": true, "type": true, "mountpoint": true}

func validateProperties(p *field.Path, props map[string]string) field.ErrorList {
	var errs field.ErrorList
	for k := range props {
		switch {
		case reservedProperties[k]:
			errs = append(errs, field.Forbidden(p.Key(k), fmt.Sprintf("%q is set by the driver from the volume request", k)))
		case k == "" || strings.ContainsAny(k, " =\t\n"):
			errs = append(errs, field.Invalid(p.Key(k), k, "not a ZFS property name"))
		}
	}
	return errs
}

func validateMode(p *field.Path, mode string) field.ErrorList {
	if mode != "" && mode != "linear" && mode != "thin" {
		return field.ErrorList{field.NotSupported(p, mode, []string{"linear", "thin"})}
	}
	return nil
}

// ValidateAgent checks a PillarAgent.
func ValidateAgent(a *Agent) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if a.Spec.NodeName == "" {
		errs = append(errs, field.Required(spec.Child("nodeName"), "the node the agent runs on"))
	}
	if a.Spec.Port < 0 || a.Spec.Port > 65535 {
		errs = append(errs, field.Invalid(spec.Child("port"), a.Spec.Port, "must be a TCP port (1-65535), or 0 for the chart's agent.grpcPort"))
	}
	return errs
}

// ValidateStore checks a PillarStore.
func ValidateStore(s *Store) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	be := spec.Child("backend")
	if s.Spec.AgentRef == "" {
		errs = append(errs, field.Required(spec.Child("agentRef"), "the PillarAgent serving this store"))
	}
	switch {
	case s.Spec.Backend.ZFS == nil && s.Spec.Backend.LVM == nil:
		errs = append(errs, field.Required(be, "exactly one of zfs and lvm"))
	case s.Spec.Backend.ZFS != nil && s.Spec.Backend.LVM != nil:
		errs = append(errs, field.Forbidden(be, "exactly one of zfs and lvm, not both"))
	case s.Spec.Backend.ZFS != nil:
		z := s.Spec.Backend.ZFS
		if z.Pool == "" {
			errs = append(errs, field.Required(be.Child("zfs", "pool"), ""))
		}
		if strings.HasPrefix(z.ParentDataset, "/") || strings.HasSuffix(z.ParentDataset, "/") || strings.Contains(z.ParentDataset, "//") {
			errs = append(errs, field.Invalid(be.Child("zfs", "parentDataset"), z.ParentDataset, "a dataset path relative to the pool, like k8s/volumes"))
		}
		errs = append(errs, validateProperties(be.Child("zfs", "properties"), z.Properties)...)
	case s.Spec.Backend.LVM != nil:
		l := s.Spec.Backend.LVM
		if l.VolumeGroup == "" {
			errs = append(errs, field.Required(be.Child("lvm", "volumeGroup"), ""))
		}
		errs = append(errs, validateMode(be.Child("lvm", "provisioningMode"), l.ProvisioningMode)...)
		if l.ProvisioningMode == "thin" && l.ThinPool == "" {
			errs = append(errs, field.Required(be.Child("lvm", "thinPool"), "thin provisioning needs the thin pool"))
		}
	}
	return errs
}

// DefaultStore fills defaults: an LVM store names its mode.
func DefaultStore(s *Store) {
	if l := s.Spec.Backend.LVM; l != nil && l.ProvisioningMode == "" {
		l.ProvisioningMode = "linear"
	}
}

// ValidateProfile checks a PillarVolumeProfile.
func ValidateProfile(p *Profile) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if p.Spec.ZFS == nil && p.Spec.LVM == nil {
		errs = append(errs, field.Required(spec, "at least one of zfs and lvm"))
	}
	if p.Spec.ZFS != nil {
		errs = append(errs, validateProperties(spec.Child("zfs", "properties"), p.Spec.ZFS.Properties)...)
	}
	if p.Spec.LVM != nil {
		errs = append(errs, validateMode(spec.Child("lvm", "provisioningMode"), p.Spec.LVM.ProvisioningMode)...)
	}
	return errs
}
