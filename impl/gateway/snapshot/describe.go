package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
)

// Describe renders everything the request path can read from s, in a
// canonical order, so two snapshots of one configuration describe alike
// however they were built (Build or Apply). Credentials appear as a hash
// prefix, never in clear. It also checks the sharing Apply relies on: each
// key points at the principal the snapshot holds under its id, and each
// principal's key list names exactly its keys; a break is written into the
// description, so a comparison fails on it.
func Describe(s *Snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "generation %d\n", s.Generation)
	for _, u := range s.Upstreams {
		cred := sha256.Sum256([]byte(u.Credential))
		fmt.Fprintf(&b, "upstream %s name=%q kind=%s base=%s enabled=%v credkind=%s cred=%x exp=%d msg=%s ct=%s rev=%d usable=%d targets=%v\n",
			u.ID, u.Name, u.Kind, u.BaseURL, u.Enabled, u.CredentialKind, cred[:4], u.CredentialExpiresAt.Unix(), u.MessagesURL,
			u.CountTokensURL, u.SpecRevision, u.UsableIndex, u.MessagesTarget != nil && u.CountTokensTarget != nil)
		if s.upstreamID[u.ID] != u {
			fmt.Fprintf(&b, "  BROKEN: upstream %s not indexed by id\n", u.ID)
		}
	}
	if len(s.upstreamID) != len(s.Upstreams) {
		fmt.Fprintf(&b, "BROKEN: %d upstreams indexed, %d listed\n", len(s.upstreamID), len(s.Upstreams))
	}
	for i, u := range s.Usable {
		fmt.Fprintf(&b, "usable %d %s\n", i, u.ID)
	}
	for _, id := range sortedKeys(s.Errors) {
		fmt.Fprintf(&b, "error %s %q\n", id, s.Errors[id])
	}
	for _, id := range sortedKeys(s.Plugins) {
		p := s.Plugins[id]
		fmt.Fprintf(&b, "plugin %s name=%q digest=%s refs=%d rev=%d\n", id, p.Name, p.Digest, p.Refcount, p.Revision)
	}
	owned := map[*Principal][]string{}
	var keys []string
	for _, m := range s.keys {
		for h, k := range m {
			keys = append(keys, fmt.Sprintf("key %x id=%s principal=%s", h[:8], k.ID, k.Principal.ID))
			if s.principals[k.Principal.ID] != k.Principal {
				keys = append(keys, fmt.Sprintf("  BROKEN: key %s points at a principal %s the snapshot does not hold", k.ID, k.Principal.ID))
			}
			owned[k.Principal] = append(owned[k.Principal], hex.EncodeToString(h[:]))
		}
	}
	for _, id := range sortedKeys(s.principals) {
		p := s.principals[id]
		fmt.Fprintf(&b, "principal %s name=%q kind=%s enabled=%v any=%v exact=%v prefixes=%v keepalive=%s kaon=%v dynamic=%v limits=%+v capture=%v\n",
			p.ID, p.Name, p.Kind, p.Enabled, p.models.any, sortedKeys(p.models.exact), p.models.prefixes, p.CacheKeepalive,
			p.KeepAliveEnabled, p.Dynamic, p.Limits, p.Capture)
		for _, r := range p.Routers {
			fmt.Fprintf(&b, "  router %s builtin=%s wasm=%s digest=%s name=%q config=%s pinned=%v bound=%v\n",
				r.EntryID, r.Builtin, r.WasmRegistryID, r.WasmDigest, r.WasmName, r.Config, r.Pinned, r.Bound != nil)
		}
		var cands []string
		for _, c := range p.Candidates {
			cands = append(cands, c.ID)
			if s.upstreamID[c.ID] != c {
				cands = append(cands, "(BROKEN: not this snapshot's upstream)")
			}
		}
		fmt.Fprintf(&b, "  candidates %v\n", cands)
		if l := p.Lead; l != nil {
			var ids []string
			for i, c := range l.Candidates {
				ids = append(ids, c.ID)
				if s.upstreamID[c.ID] != c || (l.Indexes != nil && (int(l.Indexes[i]) != c.UsableIndex || s.Usable[c.UsableIndex] != c)) {
					ids = append(ids, "(BROKEN: not this snapshot's usable upstream)")
				}
			}
			fmt.Fprintf(&b, "  lead %v indexes=%v next=%d\n", ids, l.Indexes, l.Next)
		}
		var hs []string
		for _, h := range p.keyHashes {
			hs = append(hs, hex.EncodeToString(h[:]))
		}
		slices.Sort(hs)
		own := owned[p]
		slices.Sort(own)
		if !slices.Equal(hs, own) {
			fmt.Fprintf(&b, "  BROKEN: key list %v, keys pointing here %v\n", hs, own)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString(k + "\n")
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
