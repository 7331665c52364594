package kubecontroller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/pillarhq/pillar/impl/pillar/crd"
)

// Validator is the /validate webhook: it refuses agents, stores and
// profiles the CSI controller could not act on, naming each bad field.
type Validator struct{ Group string }

// Handle validates one object.
func (v Validator) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Kind.Group != v.Group {
		return admission.Allowed("not a resource of this driver")
	}
	var errs field.ErrorList
	switch req.Kind.Kind {
	case crd.KindAgent:
		var a crd.Agent
		if err := json.Unmarshal(req.Object.Raw, &a); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		errs = crd.ValidateAgent(&a)
	case crd.KindStore:
		var s crd.Store
		if err := json.Unmarshal(req.Object.Raw, &s); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		errs = crd.ValidateStore(&s)
	case crd.KindProfile:
		var p crd.Profile
		if err := json.Unmarshal(req.Object.Raw, &p); err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		errs = crd.ValidateProfile(&p)
	default:
		return admission.Allowed("")
	}
	if len(errs) > 0 {
		return admission.Denied(fmt.Sprintf("%s %q is invalid: %v", req.Kind.Kind, req.Name, errs.ToAggregate()))
	}
	return admission.Allowed("")
}

// Defaulter is the /mutate webhook: an LVM store names its provisioning
// mode, so what a store does never depends on the agent's default.
type Defaulter struct{ Group string }

// Handle defaults one object.
func (d Defaulter) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Kind.Group != d.Group || req.Kind.Kind != crd.KindStore {
		return admission.Allowed("")
	}
	var raw map[string]any
	if err := json.Unmarshal(req.Object.Raw, &raw); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	var s crd.Store
	if err := json.Unmarshal(req.Object.Raw, &s); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if s.Spec.Backend.LVM == nil || s.Spec.Backend.LVM.ProvisioningMode != "" {
		return admission.Allowed("")
	}
	crd.DefaultStore(&s)
	spec, _ := raw["spec"].(map[string]any)
	be, _ := spec["backend"].(map[string]any)
	lvm, _ := be["lvm"].(map[string]any)
	if lvm == nil {
		return admission.Allowed("")
	}
	lvm["provisioningMode"] = s.Spec.Backend.LVM.ProvisioningMode
	patched, err := json.Marshal(raw)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, patched)
}
