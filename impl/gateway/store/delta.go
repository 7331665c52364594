package store

import (
	"cmp"
	"errors"
	"slices"
	"strings"
)

// ErrDeltaUnavailable: the changes since a generation cannot be read
// exactly (the generation went backwards, jumped past what the change log
// still holds, was written by a version that keeps no change log, or a
// change is one the log cannot describe). The caller loads in full.
var ErrDeltaUnavailable = errors.New("configuration delta unavailable")

// ConfigDelta is what changed between two generations, read in one
// consistent transaction: applied to the Config of generation From it gives
// the Config of generation Generation (Config.Apply).
type ConfigDelta struct {
	From, Generation int64
	// Upstreams are the live upstreams the changes touched, at Generation;
	// RemovedUpstreams the touched ones that are gone. AllUpstreams: a
	// change touched every upstream, and Upstreams is the whole live list.
	Upstreams        []Upstream
	RemovedUpstreams []string
	AllUpstreams     bool
	// PrincipalIDs are the principals the changes touched. For each, its
	// row (in Principals, absent when deleted), its live keys (Keys) and
	// its chain entries (Chains) replace whatever the old Config held.
	PrincipalIDs []string
	Principals   []Principal
	Keys         []Key
	Chains       []ChainEntry
	// Plugins is the whole registry (a few rows; its reference counts move
	// with chain and warm-up bindings).
	Plugins []RegistryEntry
}

// Empty reports whether the delta changes nothing.
func (d *ConfigDelta) Empty() bool {
	return d.From == d.Generation
}

// UpstreamsChanged reports whether the delta touches any upstream.
func (d *ConfigDelta) UpstreamsChanged() bool {
	return d.AllUpstreams || len(d.Upstreams) > 0 || len(d.RemovedUpstreams) > 0
}

// Apply returns the configuration c with d applied. c is not modified, and
// the result shares with c the slices d does not touch: callers treat both
// as read-only.
func (c *Config) Apply(d *ConfigDelta) *Config {
	if c.KeysOmitted {
		panic("store: Apply on a configuration without its keys")
	}
	return c.apply(d, true)
}

// ApplyWithoutKeys is Apply for a holder that keeps the live keys
// elsewhere (the snapshot runtime: its snapshot holds them): the result
// has no Keys and KeysOmitted set. A change of a principal then costs no
// copy of every other key (50,000 at scaleseed.Scale).
func (c *Config) ApplyWithoutKeys(d *ConfigDelta) *Config {
	if d.Empty() {
		return c.WithoutKeys()
	}
	return c.apply(d, false)
}

// WithoutKeys is c with its keys left out (KeysOmitted set), sharing the
// rest.
func (c *Config) WithoutKeys() *Config {
	out := *c
	out.Keys, out.KeysOmitted = nil, true
	return &out
}

func (c *Config) apply(d *ConfigDelta, withKeys bool) *Config {
	if d.Empty() {
		return c
	}
	out := &Config{Generation: d.Generation, Upstreams: c.Upstreams, Principals: c.Principals, Keys: c.Keys, Chains: c.Chains, Plugins: d.Plugins}
	if !withKeys {
		out.Keys, out.KeysOmitted = nil, true
	}
	switch {
	case d.AllUpstreams:
		out.Upstreams = d.Upstreams
	case d.UpstreamsChanged():
		gone := make(map[string]bool, len(d.Upstreams)+len(d.RemovedUpstreams))
		for _, id := range d.RemovedUpstreams {
			gone[id] = true
		}
		for i := range d.Upstreams {
			gone[d.Upstreams[i].ID] = true
		}
		out.Upstreams = mergeSorted(c.Upstreams, d.Upstreams, func(u *Upstream) bool { return gone[u.ID] }, CompareUpstreams)
	}
	if len(d.PrincipalIDs) == 0 {
		return out
	}
	touched := make(map[string]bool, len(d.PrincipalIDs))
	for _, id := range d.PrincipalIDs {
		touched[id] = true
	}
	out.Principals = mergeSorted(c.Principals, d.Principals, func(p *Principal) bool { return touched[p.ID] }, ComparePrincipals)
	out.Chains = mergeSorted(c.Chains, d.Chains, func(e *ChainEntry) bool { return touched[e.PrincipalID] }, CompareChainEntries)
	if !withKeys {
		return out
	}
	// Keys are in no order: the untouched ones, then the touched
	// principals' live keys.
	keys := make([]Key, 0, len(c.Keys)+len(d.Keys))
	for i := range c.Keys {
		if !touched[c.Keys[i].PrincipalID] {
			keys = append(keys, c.Keys[i])
		}
	}
	out.Keys = append(keys, d.Keys...)
	return out
}

// mergeSorted returns old without the rows drop names, merged with add (in
// any order) into the order cmp defines; old is in that order already.
func mergeSorted[T any](old, add []T, drop func(*T) bool, cmp func(a, b *T) int) []T {
	add = slices.Clone(add)
	slices.SortFunc(add, func(a, b T) int { return cmp(&a, &b) })
	out := make([]T, 0, len(old)+len(add))
	j := 0
	for i := range old {
		if drop(&old[i]) {
			continue
		}
		for j < len(add) && cmp(&add[j], &old[i]) < 0 {
			out = append(out, add[j])
			j++
		}
		out = append(out, old[i])
	}
	return append(out, add[j:]...)
}

// CompareUpstreams orders upstreams by created time, then id (bytewise):
// the order of Config.Upstreams.
func CompareUpstreams(a, b *Upstream) int {
	return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
}

// ComparePrincipals orders principals as Config.Principals: by created
// time, then id (bytewise).
func ComparePrincipals(a, b *Principal) int {
	return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
}

// CompareChainEntries orders chain entries by principal, slot, position
// and id: the order of Config.Chains.
func CompareChainEntries(a, b *ChainEntry) int {
	return cmp.Or(strings.Compare(a.PrincipalID, b.PrincipalID), strings.Compare(a.Slot, b.Slot),
		cmp.Compare(a.Position, b.Position), strings.Compare(a.ID, b.ID))
}
