package admin

import (
	"errors"
	"net/http"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// StatusResponse is the body of GET /admin/v1/status.
type StatusResponse struct {
	Status            string         `json:"status"`
	Version           string         `json:"version"`
	Driver            string         `json:"driver"`
	ReplicaID         string         `json:"replica_id"`
	ConfigGeneration  int64          `json:"config_generation"`
	Snapshot          SnapshotStatus `json:"snapshot"`
	StartedAtUnixSecs int64          `json:"started_at_unix_secs"`
}

// SnapshotStatus describes the snapshot this replica serves from.
type SnapshotStatus struct {
	Generation      int64 `json:"generation"`
	BuiltAtUnixSecs int64 `json:"built_at_unix_secs"`
	Upstreams       int   `json:"upstreams"`
	Principals      int   `json:"principals"`
	Keys            int   `json:"keys"`
}

// storageErr turns any storage failure of status/export into
// storage_unavailable: both exist to tell an operator whether the database
// answers.
func storageErr(err error) error {
	if errors.Is(err, store.ErrUnavailable) {
		return errStorageUnavailable
	}
	e := *errStorageUnavailable
	e.Message = "the database did not answer the query; retry later"
	return &e
}

func (a *api) status(w http.ResponseWriter, r *http.Request) error {
	if err := a.Store.Ping(r.Context()); err != nil {
		return storageErr(err)
	}
	gen, err := a.Store.ConfigGeneration(r.Context())
	if err != nil {
		return storageErr(err)
	}
	out := StatusResponse{Status: "ok", Version: a.Version, Driver: a.Store.Driver(), ReplicaID: a.ReplicaID,
		ConfigGeneration: gen, StartedAtUnixSecs: unix(a.StartedAt)}
	if a.Runtime != nil {
		i := a.Runtime.Info()
		out.Snapshot = SnapshotStatus{Generation: i.Generation, BuiltAtUnixSecs: unix(i.BuiltAt), Upstreams: i.Upstreams, Principals: i.Principals, Keys: i.Keys}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ExportPrincipal is a principal with its keys and plugin chain.
type ExportPrincipal struct {
	PrincipalResponse
	Keys        []KeyResponse      `json:"keys"`
	PluginChain []PluginChainEntry `json:"plugin_chain"`
}

// ExportResponse is the body of GET /admin/v1/export: the whole
// configuration without any secret, key hash or ciphertext.
type ExportResponse struct {
	ExportedAtUnixSecs int64              `json:"exported_at_unix_secs"`
	ConfigGeneration   int64              `json:"config_generation"`
	Upstreams          []UpstreamResponse `json:"upstreams"`
	Principals         []ExportPrincipal  `json:"principals"`
}

func (a *api) export(w http.ResponseWriter, r *http.Request) error {
	cfg, err := a.Store.LoadConfig(r.Context())
	if err != nil {
		return storageErr(err)
	}
	out := ExportResponse{ExportedAtUnixSecs: unix(a.Now()), ConfigGeneration: cfg.Generation,
		Upstreams: []UpstreamResponse{}, Principals: []ExportPrincipal{}}
	for i := range cfg.Upstreams {
		out.Upstreams = append(out.Upstreams, upstreamResponse(&cfg.Upstreams[i]))
	}
	for i := range cfg.Principals {
		p := &cfg.Principals[i]
		ep := ExportPrincipal{PrincipalResponse: principalResponse(p), Keys: []KeyResponse{}, PluginChain: []PluginChainEntry{}}
		keys, err := a.Store.ListKeys(r.Context(), p.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return storageErr(err)
		}
		for j := range keys {
			ep.Keys = append(ep.Keys, keyResponse(&keys[j]))
		}
		for j := range cfg.Chains {
			if cfg.Chains[j].PrincipalID == p.ID {
				ep.PluginChain = append(ep.PluginChain, chainEntry(&cfg.Chains[j]))
			}
		}
		out.Principals = append(out.Principals, ep)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
