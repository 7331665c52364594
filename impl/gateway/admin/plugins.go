package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// PluginCompiler validates and compiles an uploaded module.
type PluginCompiler interface {
	Compile(ctx context.Context, wasm []byte) (digest string, slots []string, err error)
}

// maxModule bounds an uploaded module.
const maxModule = 32 << 20

// RegistryEntryResponse is the wire form of a registry entry.
type RegistryEntryResponse struct {
	ID                string   `json:"id"`
	Name              string   `json:"name"`
	Version           *string  `json:"version"`
	Digest            string   `json:"digest"`
	Slots             []string `json:"slots"`
	SizeBytes         int64    `json:"size_bytes"`
	Revision          int64    `json:"revision"`
	Refcount          int64    `json:"refcount"`
	CreatedAtUnixSecs int64    `json:"created_at_unix_secs"`
	UpdatedAtUnixSecs int64    `json:"updated_at_unix_secs"`
}

func registryResponse(e *store.RegistryEntry) RegistryEntryResponse {
	return RegistryEntryResponse{ID: e.ID, Name: e.Name, Version: e.Version, Digest: "sha256:" + e.Digest, Slots: e.Slots,
		SizeBytes: e.SizeBytes, Revision: e.Revision, Refcount: e.Refcount,
		CreatedAtUnixSecs: unix(e.CreatedAt), UpdatedAtUnixSecs: unix(e.UpdatedAt)}
}

// RegistryListResponse is the body of GET /admin/v1/plugins/registry.
type RegistryListResponse struct {
	Entries []RegistryEntryResponse `json:"entries"`
}

// RegistryReferencesResponse lists what references an entry, with the
// fingerprint a cascade delete must present.
type RegistryReferencesResponse struct {
	RegistryID           string            `json:"registry_id"`
	ReferenceFingerprint string            `json:"reference_fingerprint"`
	References           []store.Reference `json:"references"`
}

// RegistryCascadeDeleteResponse is the body of a cascade delete.
type RegistryCascadeDeleteResponse struct {
	Deleted           string            `json:"deleted"`
	RemovedReferences []store.Reference `json:"removed_references"`
}

// PatchRegistryBody changes an entry's name or version (an empty version
// clears it).
type PatchRegistryBody struct {
	Name    *string `json:"name"`
	Version *string `json:"version"`
}

// InsertChainBody is the body of POST …/plugin-chain.
type InsertChainBody struct {
	Slot           string          `json:"slot"`
	WasmRegistryID string          `json:"wasm_registry_id"`
	Config         json.RawMessage `json:"config"`
	Position       *int64          `json:"position"`
}

// ReorderBody sets the order of a principal's slot chain: every entry,
// each with its current revision.
type ReorderBody struct {
	Slot  string           `json:"slot"`
	Order []store.ChainRef `json:"order"`
}

// PluginChainEntryUpdate is the body of PUT /admin/v1/plugin-chain-entries/{id}.
type PluginChainEntryUpdate struct {
	Config  json.RawMessage `json:"config"`
	Enabled *bool           `json:"enabled"`
}

func unknownEntry(id string) error {
	return newErr("unknown_registry_entry", "no plugin registry entry with id %q", id)
}

// pluginErr maps storage errors of the plugin endpoints.
func pluginErr(err error, id string) error {
	var se *store.SlotError
	var oe *store.OrderError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return unknownEntry(id)
	case errors.Is(err, store.ErrReferencesChanged):
		return newErr("references_changed", "the entry's references changed since the fingerprint was read; read GET …/references again and re-decide")
	case errors.As(err, &se) && se.Unknown:
		return unknownEntry(se.RegistryID)
	case errors.As(err, &se):
		return invalid("wasm_registry_id: the plugin does not support slot %q (its exports declare its slots)", se.Slot)
	case errors.As(err, &oe):
		return invalid("order: %s", oe.Message)
	case errors.Is(err, store.ErrConflict):
		return newErr("conflict", "that plugin is already bound in this chain slot")
	}
	return fromStore(err, "plugin registry entry", id)
}

// uploadPlugin is POST /admin/v1/plugins/wasm?name=N&version=V with the
// module as an application/wasm body.
func (a *api) uploadPlugin(w http.ResponseWriter, r *http.Request) error {
	if a.Plugins == nil {
		return newErr("plugins_not_configured", "this server runs without a plugin runtime")
	}
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/wasm" {
		return newErr("unsupported_media_type", "send the module as Content-Type application/wasm (got %q)", r.Header.Get("Content-Type"))
	}
	name := r.URL.Query().Get("name")
	if err := validName(name); err != nil {
		return invalid("name (query parameter): required, 1 to 128 characters without control characters or leading and trailing spaces")
	}
	var version *string
	if v, ok := r.URL.Query()["version"]; ok && v[0] != "" {
		if err := validName(v[0]); err != nil {
			return invalid("version (query parameter): 1 to 128 characters")
		}
		version = &v[0]
	}
	if r.ContentLength > maxModule {
		return newErr("request_too_large", "the module exceeds %d bytes", maxModule)
	}
	wasm, err := io.ReadAll(io.LimitReader(r.Body, maxModule+1))
	if err != nil {
		return invalid("cannot read the body: %v", err)
	}
	if len(wasm) > maxModule {
		return newErr("request_too_large", "the module exceeds %d bytes", maxModule)
	}
	if len(wasm) == 0 {
		return invalid("the body must be a WASM module")
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	digest, slots, err := a.Plugins.Compile(ctx, wasm)
	if err != nil {
		return newErr("invalid_plugin", "the module was refused: %v", err)
	}
	e, err := a.Store.CreateRegistryEntry(r.Context(), store.RegistryEntry{Name: name, Version: version, Digest: digest, Slots: slots}, wasm)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return newErr("conflict", "a plugin named %q with that version already exists", name)
		}
		return fromStore(err, "plugin registry entry", "")
	}
	a.changed(r.Context())
	w.Header().Set("Location", "/admin/v1/plugins/registry/"+e.ID)
	etag(w, e.Revision)
	writeJSON(w, http.StatusCreated, registryResponse(e))
	return nil
}

func (a *api) listRegistry(w http.ResponseWriter, r *http.Request) error {
	es, err := a.Store.ListRegistryEntries(r.Context())
	if err != nil {
		return fromStore(err, "plugin registry entry", "")
	}
	out := RegistryListResponse{Entries: make([]RegistryEntryResponse, 0, len(es))}
	for i := range es {
		out.Entries = append(out.Entries, registryResponse(&es[i]))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) getRegistry(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	e, err := a.Store.GetRegistryEntry(r.Context(), id)
	if err != nil {
		return pluginErr(err, id)
	}
	etag(w, e.Revision)
	writeJSON(w, http.StatusOK, registryResponse(e))
	return nil
}

func (a *api) registryReferences(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	refs, err := a.Store.RegistryReferences(r.Context(), id)
	if err != nil {
		return pluginErr(err, id)
	}
	writeJSON(w, http.StatusOK, RegistryReferencesResponse{RegistryID: id, ReferenceFingerprint: store.ReferenceFingerprint(refs), References: refs})
	return nil
}

func (a *api) patchRegistry(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	expect, err := ifMatch(r, false)
	if err != nil {
		return err
	}
	var b PatchRegistryBody
	if err := decode(r, &b); err != nil {
		return err
	}
	if b == (PatchRegistryBody{}) {
		return invalid("the body names no field to change (name, version)")
	}
	if b.Name != nil {
		if err := validName(*b.Name); err != nil {
			return err
		}
	}
	if b.Version != nil && *b.Version != "" && validName(*b.Version) != nil {
		return invalid("version: 1 to 128 characters without control characters or leading and trailing spaces (empty clears it)")
	}
	e, err := a.Store.PatchRegistryEntry(r.Context(), id, expect, b.Name, b.Version)
	if err != nil {
		if errors.Is(err, store.ErrStaleRevision) {
			return newErr("stale_revision", "the registry entry changed since you read it; read the latest revision and re-decide")
		}
		if errors.Is(err, store.ErrConflict) {
			return newErr("conflict", "a plugin with that name and version already exists")
		}
		return pluginErr(err, id)
	}
	a.changed(r.Context())
	etag(w, e.Revision)
	writeJSON(w, http.StatusOK, registryResponse(e))
	return nil
}

// deleteRegistry deletes an entry (If-Match required); with
// ?cascade=references it also removes its references, given the
// fingerprint of the impact list the operator saw.
func (a *api) deleteRegistry(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if r.Header.Get("If-Match") == "" {
		return newErr("precondition_required", "DELETE of a registry entry needs If-Match with its revision")
	}
	expect, err := ifMatch(r, true)
	if err != nil {
		return err
	}
	cascade := false
	switch c := r.URL.Query().Get("cascade"); c {
	case "":
	case "references":
		cascade = true
	default:
		return invalid("cascade: the only value is references")
	}
	fp := strings.TrimSpace(r.Header.Get("X-Reference-Fingerprint"))
	if cascade && fp == "" {
		return newErr("reference_fingerprint_required", "a cascade delete needs X-Reference-Fingerprint from GET /admin/v1/plugins/registry/%s/references", id)
	}
	removed, err := a.Store.DeleteRegistryEntry(r.Context(), id, expect, cascade, fp)
	if err != nil {
		var re *store.ReferencedError
		if errors.As(err, &re) {
			e := newErr("referenced_by", "the plugin is still referenced; remove the references, or delete with ?cascade=references")
			e.Details = map[string]any{"references": re.References}
			return e
		}
		if errors.Is(err, store.ErrStaleRevision) {
			return newErr("stale_revision", "the registry entry changed since you read it; read the latest revision and re-decide")
		}
		return pluginErr(err, id)
	}
	a.changed(r.Context())
	if !cascade {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if removed == nil {
		removed = []store.Reference{}
	}
	writeJSON(w, http.StatusOK, RegistryCascadeDeleteResponse{Deleted: id, RemovedReferences: removed})
	return nil
}

func (a *api) insertChain(w http.ResponseWriter, r *http.Request) error {
	pid := r.PathValue("principal_id")
	var b InsertChainBody
	if err := decode(r, &b); err != nil {
		return err
	}
	if b.Slot != store.SlotRouter {
		return invalid("slot: must be %q (the warm-up dialect is bound on the upstream)", store.SlotRouter)
	}
	if b.WasmRegistryID == "" {
		return invalid("wasm_registry_id: required")
	}
	if len(b.Config) > 0 && (b.Config[0] != '{') {
		return invalid("config: must be a JSON object")
	}
	if len(b.Config) > maxPluginConfig {
		return invalid("config: at most %d bytes", maxPluginConfig)
	}
	if b.Position != nil && *b.Position < 0 {
		return invalid("position: must be 0 or more, or null to append")
	}
	e, err := a.Store.InsertChainEntry(r.Context(), pid, store.ChainEntry{Slot: b.Slot, WasmRegistryID: &b.WasmRegistryID, Config: b.Config}, b.Position)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFound(resPrincipal, pid)
		}
		return pluginErr(err, b.WasmRegistryID)
	}
	a.changed(r.Context())
	etag(w, e.Revision)
	writeJSON(w, http.StatusCreated, chainEntry(e))
	return nil
}

func (a *api) reorderChain(w http.ResponseWriter, r *http.Request) error {
	pid := r.PathValue("principal_id")
	var b ReorderBody
	if err := decode(r, &b); err != nil {
		return err
	}
	if b.Slot == "" {
		b.Slot = store.SlotRouter
	}
	if _, err := a.Store.ReorderChain(r.Context(), pid, b.Slot, b.Order); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFound(resPrincipal, pid)
		}
		if errors.Is(err, store.ErrStaleRevision) {
			return newErr("stale_revision", "a chain entry changed since you read it; read the chain again and re-decide")
		}
		return pluginErr(err, "")
	}
	a.changed(r.Context())
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (a *api) rebalanceChain(w http.ResponseWriter, r *http.Request) error {
	pid := r.PathValue("principal_id")
	if err := decodeOptional(r, &struct{}{}); err != nil {
		return err
	}
	if _, err := a.Store.RebalanceChain(r.Context(), pid); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFound(resPrincipal, pid)
		}
		return fromStore(err, resPrincipal, pid)
	}
	a.changed(r.Context())
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func chainNotFound(id string) error {
	return newErr("not_found", "no plugin chain entry with id %q", id)
}

// chainEntryErr maps storage errors of the chain entry endpoints.
func chainEntryErr(err error, id string) error {
	switch {
	case errors.Is(err, store.ErrStaleRevision):
		return newErr("stale_revision", "the chain entry changed since you read it; read it again and re-decide")
	case errors.Is(err, store.ErrNotFound):
		return chainNotFound(id)
	}
	return fromStore(err, resPrincipal, "")
}

func (a *api) updateChainEntry(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	expect, err := ifMatch(r, false)
	if err != nil {
		return err
	}
	var b PluginChainEntryUpdate
	if err := decode(r, &b); err != nil {
		return err
	}
	cur, err := a.Store.GetChainEntry(r.Context(), id)
	if err != nil {
		return chainEntryErr(err, id)
	}
	cfg, enabled := cur.Config, cur.Enabled
	if b.Config != nil {
		if b.Config[0] != '{' {
			return invalid("config: must be a JSON object")
		}
		if len(b.Config) > maxPluginConfig {
			return invalid("config: at most %d bytes", maxPluginConfig)
		}
		cfg = b.Config
	}
	if b.Enabled != nil {
		enabled = *b.Enabled
	}
	e, err := a.Store.UpdateChainEntry(r.Context(), id, expect, cfg, enabled)
	if err != nil {
		return chainEntryErr(err, id)
	}
	a.changed(r.Context())
	etag(w, e.Revision)
	writeJSON(w, http.StatusOK, chainEntry(e))
	return nil
}

func (a *api) deleteChainEntry(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	expect, err := ifMatch(r, false)
	if err != nil {
		return err
	}
	if err := a.Store.DeleteChainEntry(r.Context(), id, expect); err != nil {
		return chainEntryErr(err, id)
	}
	a.changed(r.Context())
	w.WriteHeader(http.StatusNoContent)
	return nil
}
