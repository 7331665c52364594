package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"

	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/warmup"
)

// stagePlugins compiles every registry module a configuration binds (chain
// entries and warm-up dialects) before the snapshot that uses them is
// swapped in: the swap is then the single rebind step. A module that fails
// to load leaves its routers failing closed, and is logged.
func stagePlugins(st store.Store, rt *plugins.Runtime, log *slog.Logger) func(context.Context, *store.Config) {
	return func(ctx context.Context, cfg *store.Config) {
		bound := map[string]bool{}
		for _, c := range cfg.Chains {
			if c.WasmRegistryID != nil {
				bound[*c.WasmRegistryID] = true
			}
		}
		for _, u := range cfg.Upstreams {
			if u.WarmupDialectPlugin != nil {
				bound[*u.WarmupDialectPlugin] = true
			}
		}
		for _, e := range cfg.Plugins {
			if !bound[e.ID] || rt.Loaded(e.Digest) {
				continue
			}
			if err := loadModule(ctx, st, rt, e); err != nil {
				log.Error("plugin module not loaded; its routers fail closed", "registry_id", e.ID, "name", e.Name, "error", err)
			}
		}
	}
}

func loadModule(ctx context.Context, st store.Store, rt *plugins.Runtime, e store.RegistryEntry) error {
	wasm, err := st.RegistryModule(ctx, e.ID)
	if err != nil {
		return err
	}
	_, _, err = rt.Compile(ctx, wasm)
	return err
}

// shapeWarmup applies an upstream's warm-up dialect plugin.
func shapeWarmup(st store.Store, rt *plugins.Runtime) warmup.Shaper {
	return func(ctx context.Context, pluginID string, u *store.Upstream, body []byte, h http.Header) ([]byte, error) {
		e, err := st.GetRegistryEntry(ctx, pluginID)
		if err != nil {
			return nil, err
		}
		if !rt.Loaded(e.Digest) {
			if err := loadModule(ctx, st, rt, *e); err != nil {
				return nil, err
			}
		}
		hdr := map[string]string{}
		for k := range h {
			hdr[k] = h.Get(k)
		}
		out, set, err := rt.ShapeWarmup(ctx, e.Digest, plugins.Candidate{ID: u.ID, Name: u.Name, Kind: u.Kind, Healthy: u.Enabled}, json.RawMessage(body), hdr)
		if err != nil {
			return nil, err
		}
		for k, v := range set {
			h.Set(k, v)
		}
		return out, nil
	}
}
