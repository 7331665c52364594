package storetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseDelta(t *testing.T, open Opener) {
	t.Run("DeltaEqualsFullLoad", func(t *testing.T) { run(t, open, testDeltaEqualsFullLoad) })
	t.Run("DeltaRevocationAndDeletion", func(t *testing.T) { run(t, open, testDeltaRevocationAndDeletion) })
	t.Run("DeltaRefusesWhatItCannotTell", func(t *testing.T) { run(t, open, testDeltaRefuses) })
}

// deltaSteps is the length of the random mutation sequence (per driver).
const deltaSteps = 150

// DeltaSeedEnv names the variable that replays DeltaEqualsFullLoad's random
// sequence: a failure prints the seed to set it to. Unset, the seed comes
// from the clock, so each run tries another sequence.
const DeltaSeedEnv = "STORETEST_DELTA_SEED"

func deltaSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(DeltaSeedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", DeltaSeedEnv, v, err)
		}
		seed = s
	}
	t.Logf("seed %d", seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay this sequence with %s=%d", DeltaSeedEnv, seed)
		}
	})
	return seed
}

// P-RUNTIME-1 (incremental): after every one of a random sequence of admin
// mutations (upstreams, principals, keys with revocations, chains,
// plugins, limits), the previous configuration with the delta since its
// generation applied equals a full load; so does a base that lags several
// generations behind (a replica that missed notifications).
func testDeltaEqualsFullLoad(t *testing.T, open Opener) {
	b := setup(t, open)
	seed := deltaSeed(t)
	m := &mutator{b: b, rng: rand.New(rand.NewPCG(seed, seed>>1))}
	prev := must(b.st.LoadConfig(b.ctx))
	lagging := prev
	at := time.Unix(1, 0)
	prevSnap := snapshot.Build(prev, plainOpener{}, at)
	prevDesc := snapshot.Describe(prevSnap)
	// What the runtime keeps: the configuration without its keys
	// (ApplyWithoutKeys), and the snapshot applied from it.
	bare := prev.ApplyWithoutKeys(&store.ConfigDelta{From: prev.Generation, Generation: prev.Generation})
	bareSnap := prevSnap
	for step := 0; step < deltaSteps; step++ {
		op := m.step()
		full := must(b.st.LoadConfig(b.ctx))
		d := must(b.st.LoadConfigDelta(b.ctx, prev.Generation))
		if d.From != prev.Generation || d.Generation != full.Generation {
			t.Fatalf("step %d (%s): delta from %d to %d, want %d to %d", step, op, d.From, d.Generation, prev.Generation, full.Generation)
		}
		if diff := configDiff(prev.Apply(d), full); diff != "" {
			t.Fatalf("step %d (%s, seed %d): delta-applied configuration differs from a full load: %s", step, op, seed, diff)
		}
		if step%7 == 6 {
			d := must(b.st.LoadConfigDelta(b.ctx, lagging.Generation))
			if diff := configDiff(lagging.Apply(d), full); diff != "" {
				t.Fatalf("step %d (%s, seed %d): delta over generations %d..%d differs from a full load: %s", step, op, seed, lagging.Generation, full.Generation, diff)
			}
			lagging = full
		}
		// The snapshot applied from the previous one describes what a
		// snapshot built from the full load does.
		cfg := prev.Apply(d)
		snap := snapshot.Apply(prevSnap, cfg, d, plainOpener{}, at)
		if got, want := snapshot.Describe(snap), snapshot.Describe(snapshot.Build(full, plainOpener{}, at)); got != want {
			t.Fatalf("step %d (%s, seed %d): applied snapshot differs from a full build:\n%s", step, op, seed, lineDiff(got, want))
		}
		bareCfg := bare.ApplyWithoutKeys(d)
		withKeys := *bareCfg
		withKeys.Keys, withKeys.KeysOmitted = full.Keys, false
		if diff := configDiff(&withKeys, full); diff != "" || !bareCfg.KeysOmitted || len(bareCfg.Keys) != 0 {
			t.Fatalf("step %d (%s, seed %d): the configuration without keys differs from a full load (omitted %v, %d keys): %s",
				step, op, seed, bareCfg.KeysOmitted, len(bareCfg.Keys), diff)
		}
		bareSnap = snapshot.Apply(bareSnap, bareCfg, d, plainOpener{}, at)
		if got, want := snapshot.Describe(bareSnap), snapshot.Describe(snapshot.Build(full, plainOpener{}, at)); got != want {
			t.Fatalf("step %d (%s, seed %d): snapshot applied from the configuration without keys differs from a full build:\n%s", step, op, seed, lineDiff(got, want))
		}
		bare = bareCfg
		// Readers may still hold the previous snapshot: it is unchanged.
		if now := snapshot.Describe(prevSnap); now != prevDesc {
			t.Fatalf("step %d (%s): applying a delta changed the previous snapshot:\n%s", step, op, lineDiff(now, prevDesc))
		}
		prev, prevSnap, prevDesc = cfg, snap, snapshot.Describe(snap)
	}
	t.Logf("ops: %v", m.done)
}

// A revoked key and a deleted principal's keys leave the configuration
// through the delta; the principal's chain goes with it.
func testDeltaRevocationAndDeletion(t *testing.T, open Opener) {
	b := setup(t, open)
	p := must(b.st.CreatePrincipal(b.ctx, principal("p")))
	q := must(b.st.CreatePrincipal(b.ctx, principal("q")))
	k1 := must(b.st.CreateKey(b.ctx, store.Key{PrincipalID: p.ID, Prefix: "a", Hash: hash("k1")}))
	k2 := must(b.st.CreateKey(b.ctx, store.Key{PrincipalID: p.ID, Prefix: "b", Hash: hash("k2")}))
	kq := must(b.st.CreateKey(b.ctx, store.Key{PrincipalID: q.ID, Prefix: "c", Hash: hash("kq")}))
	base := must(b.st.LoadConfig(b.ctx))

	must(b.st.RevokeKey(b.ctx, p.ID, k1.ID))
	d := must(b.st.LoadConfigDelta(b.ctx, base.Generation))
	cfg := base.Apply(d)
	if hasKey(cfg, k1.ID) || !hasKey(cfg, k2.ID) || !hasKey(cfg, kq.ID) {
		t.Fatalf("after revoking %s: keys %v", k1.ID, keyIDs(cfg))
	}
	if err := b.st.DeletePrincipal(b.ctx, p.ID, store.AnyRevision); err != nil {
		t.Fatal(err)
	}
	d = must(b.st.LoadConfigDelta(b.ctx, cfg.Generation))
	cfg = cfg.Apply(d)
	if hasKey(cfg, k2.ID) || !hasKey(cfg, kq.ID) {
		t.Fatalf("after deleting %s: keys %v", p.ID, keyIDs(cfg))
	}
	for _, pr := range cfg.Principals {
		if pr.ID == p.ID {
			t.Fatal("deleted principal still in the configuration")
		}
	}
	for _, c := range cfg.Chains {
		if c.PrincipalID == p.ID {
			t.Fatal("deleted principal's chain entry still in the configuration")
		}
	}
	if diff := configDiff(cfg, must(b.st.LoadConfig(b.ctx))); diff != "" {
		t.Fatal(diff)
	}
}

// The delta is refused, never guessed, when the change log cannot tell
// what changed: a generation behind the caller's, a generation some other
// writer bumped without logging (an older version of the proxy), and a
// change logged as "*".
func testDeltaRefuses(t *testing.T, open Opener) {
	b := setup(t, open)
	p := must(b.st.CreatePrincipal(b.ctx, principal("p")))
	gen := must(b.st.ConfigGeneration(b.ctx))
	if d := must(b.st.LoadConfigDelta(b.ctx, gen)); !d.Empty() {
		t.Fatalf("delta at the current generation: %+v", d)
	}
	_, err := b.st.LoadConfigDelta(b.ctx, gen+1)
	wantErr(t, err, store.ErrDeltaUnavailable)

	db, ok := b.st.(interface{ DB() *sql.DB })
	if !ok {
		t.Fatalf("%T exposes no database handle", b.st)
	}
	// What a version without the change log does: the row and the
	// generation, nothing else.
	if _, err := db.DB().ExecContext(b.ctx, "UPDATE principals SET enabled = false WHERE id = '"+p.ID+"'"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.DB().ExecContext(b.ctx, "UPDATE config_generation SET generation = generation + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	_, err = b.st.LoadConfigDelta(b.ctx, gen)
	wantErr(t, err, store.ErrDeltaUnavailable)
	// Later changes, logged, do not hide the gap.
	must(b.st.CreatePrincipal(b.ctx, principal("q")))
	_, err = b.st.LoadConfigDelta(b.ctx, gen)
	wantErr(t, err, store.ErrDeltaUnavailable)
	// From past the gap the delta is exact again.
	after := must(b.st.LoadConfig(b.ctx))
	must(b.st.PatchPrincipal(b.ctx, p.ID, store.AnyRevision, store.PrincipalPatch{Name: ptr("p2")}))
	if diff := configDiff(after.Apply(must(b.st.LoadConfigDelta(b.ctx, after.Generation))), must(b.st.LoadConfig(b.ctx))); diff != "" {
		t.Fatal(diff)
	}
	// A change the log cannot describe.
	g := must(b.st.ConfigGeneration(b.ctx))
	if _, err := db.DB().ExecContext(b.ctx, "UPDATE config_generation SET generation = generation + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.DB().ExecContext(b.ctx, fmt.Sprintf("INSERT INTO config_changes (generation, kind, id) VALUES (%d, '*', '*')", g+1)); err != nil {
		t.Fatal(err)
	}
	_, err = b.st.LoadConfigDelta(b.ctx, g)
	wantErr(t, err, store.ErrDeltaUnavailable)
}

func ptr[T any](v T) *T { return &v }

// plainOpener opens a credential as its own bytes (this suite stores
// plain test bytes where the proxy stores ciphertext).
type plainOpener struct{}

func (plainOpener) Open(ct, _ []byte) ([]byte, error) { return ct, nil }

// lineDiff lists the lines only one of two descriptions has.
func lineDiff(got, want string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	g, w := in(got), in(want)
	var b strings.Builder
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	return b.String()
}

func hasKey(c *store.Config, id string) bool {
	return slices.ContainsFunc(c.Keys, func(k store.Key) bool { return k.ID == id })
}

func keyIDs(c *store.Config) []string {
	var out []string
	for _, k := range c.Keys {
		out = append(out, k.ID)
	}
	return out
}

// configDiff compares two configurations as a snapshot reads them: keys
// in no order, upstream status left out (background writes: they bump no
// generation and no snapshot reads them).
func configDiff(got, want *store.Config) string {
	g, w := normalConfig(got), normalConfig(want)
	if reflect.DeepEqual(g, w) {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "generation %d / %d", g.Generation, w.Generation)
	field := func(name string, a, c any) {
		if !reflect.DeepEqual(a, c) {
			ja, _ := json.Marshal(a)
			jc, _ := json.Marshal(c)
			fmt.Fprintf(&b, "\n%s:\n got  %s\n want %s", name, ja, jc)
		}
	}
	field("upstreams", g.Upstreams, w.Upstreams)
	field("principals", g.Principals, w.Principals)
	field("keys", g.Keys, w.Keys)
	field("chains", g.Chains, w.Chains)
	field("plugins", g.Plugins, w.Plugins)
	return b.String()
}

func normalConfig(c *store.Config) store.Config {
	out := store.Config{Generation: c.Generation,
		Upstreams: slices.Clone(c.Upstreams), Principals: slices.Clone(c.Principals), Keys: slices.Clone(c.Keys),
		Chains: slices.Clone(c.Chains), Plugins: slices.Clone(c.Plugins)}
	for i := range out.Upstreams {
		out.Upstreams[i].Status = store.UpstreamStatus{}
	}
	slices.SortFunc(out.Keys, func(a, b store.Key) int { return strings.Compare(a.ID, b.ID) })
	// Empty and nil lists are the same configuration.
	if out.Upstreams == nil {
		out.Upstreams = []store.Upstream{}
	}
	if out.Principals == nil {
		out.Principals = []store.Principal{}
	}
	if out.Keys == nil {
		out.Keys = []store.Key{}
	}
	if out.Chains == nil {
		out.Chains = []store.ChainEntry{}
	}
	if out.Plugins == nil {
		out.Plugins = []store.RegistryEntry{}
	}
	return out
}

// mutator applies random admin mutations, as the admin API would issue
// them; refusals (a stale revision, a referenced upstream) are part of the
// sequence: they must leave no trace in the delta either.
type mutator struct {
	b    *bundle
	rng  *rand.Rand
	n    int
	done map[string]int
}

func (m *mutator) pick(ids []string) string { return ids[m.rng.IntN(len(ids))] }

func (m *mutator) ctx() context.Context { return m.b.ctx }

func (m *mutator) step() string {
	m.n++
	if m.done == nil {
		m.done = map[string]int{}
	}
	// The clock moves now and then, so created times tie and differ.
	if m.rng.IntN(3) == 0 {
		m.b.clk.Advance(time.Second)
	}
	st, ctx := m.b.st, m.ctx()
	ups := must(st.ListUpstreams(ctx))
	prs := must(st.ListPrincipals(ctx))
	regs := must(st.ListRegistryEntries(ctx))
	var upIDs, prIDs, regIDs []string
	for _, u := range ups {
		upIDs = append(upIDs, u.ID)
	}
	for _, p := range prs {
		prIDs = append(prIDs, p.ID)
	}
	for _, e := range regs {
		regIDs = append(regIDs, e.ID)
	}
	type op struct {
		name string
		ok   bool
		do   func() error
	}
	ops := []op{
		{"create upstream", true, func() error {
			spec := apiKeySpec(fmt.Sprintf("u%d", m.n))
			if m.rng.IntN(3) == 0 {
				spec.Kind, spec.CredentialKind = store.KindVendorOAuth, "oauth"
				spec.WarmupEnabled = true
			}
			if m.rng.IntN(4) == 0 {
				spec.Credential, spec.CredentialKind = nil, ""
			}
			_, err := st.CreateUpstream(ctx, spec)
			return err
		}},
		{"patch upstream", len(upIDs) > 0, func() error {
			en := m.rng.IntN(2) == 0
			_, err := st.PatchUpstream(ctx, m.pick(upIDs), store.AnyRevision, store.UpstreamPatch{Enabled: &en, BaseURL: ptr(fmt.Sprintf("https://api.example/h%d/", m.n))}) // same origin: a stored credential may stay
			return err
		}},
		{"put upstream", len(upIDs) > 0, func() error {
			u := must(st.GetUpstream(ctx, m.pick(upIDs)))
			spec := store.UpstreamSpec{Name: u.Name, Kind: u.Kind, BaseURL: u.BaseURL, Enabled: !u.Enabled, Credential: []byte(fmt.Sprintf("ct-%d", m.n)), CredentialKind: "api_key"}
			// Sometimes with the wrong revision: refused, no change.
			rev := u.SpecRevision
			if m.rng.IntN(4) == 0 {
				rev++
			}
			_, err := st.UpdateUpstream(ctx, u.ID, rev, spec)
			return err
		}},
		{"set upstream credential", len(upIDs) > 0, func() error {
			_, err := st.SetUpstreamCredential(ctx, m.pick(upIDs), "oauth", []byte(fmt.Sprintf("tok-%d", m.n)))
			return err
		}},
		{"upstream warm-up dialect", len(upIDs) > 0 && len(regIDs) > 0, func() error {
			p := store.UpstreamPatch{SetWarmupDialect: true}
			if m.rng.IntN(3) > 0 {
				p.WarmupDialectPlugin = ptr(m.pick(regIDs))
			}
			_, err := st.PatchUpstream(ctx, m.pick(upIDs), store.AnyRevision, p)
			return err
		}},
		{"delete upstream", len(upIDs) > 0, func() error { return st.DeleteUpstream(ctx, m.pick(upIDs), store.AnyRevision) }},
		{"disable oauth warm-up", true, func() error { _, err := st.DisableWarmupForOAuthUpstreams(ctx); return err }},
		{"background status", len(upIDs) > 0, func() error {
			msg := "boom"
			return st.SetUpstreamStatus(ctx, m.pick(upIDs), store.UpstreamStatus{LastApplyError: &msg})
		}},
		{"create principal", true, func() error {
			_, err := st.CreatePrincipal(ctx, principal(fmt.Sprintf("p%d", m.n)))
			return err
		}},
		{"patch principal", len(prIDs) > 0, func() error {
			pa := store.PrincipalPatch{}
			switch m.rng.IntN(4) {
			case 0:
				pa.Enabled = ptr(m.rng.IntN(2) == 0)
			case 1:
				pa.AllowedModels = ptr([]string{fmt.Sprintf("claude-%d", m.n), "x-*"})
			case 2:
				pa.DefaultLimits = ptr(json.RawMessage(fmt.Sprintf(`[{"kind":"requests","window":"1m","max":%d}]`, m.n)))
			default:
				pa.SetCacheKeepalive, pa.CacheKeepalive = true, json.RawMessage(`{"enabled":true}`)
			}
			_, err := st.PatchPrincipal(ctx, m.pick(prIDs), store.AnyRevision, pa)
			return err
		}},
		{"delete principal", len(prIDs) > 0, func() error { return st.DeletePrincipal(ctx, m.pick(prIDs), store.AnyRevision) }},
		{"create key", len(prIDs) > 0, func() error {
			_, err := st.CreateKey(ctx, store.Key{PrincipalID: m.pick(prIDs), Prefix: "k", Hash: hash(fmt.Sprintf("key-%d", m.n))})
			return err
		}},
		{"revoke key", len(prIDs) > 0, func() error {
			pid := m.pick(prIDs)
			ks := must(st.ListKeys(ctx, pid))
			if len(ks) == 0 {
				return nil
			}
			_, err := st.RevokeKey(ctx, pid, ks[m.rng.IntN(len(ks))].ID)
			return err
		}},
		{"create plugin", true, func() error {
			v := fmt.Sprintf("1.%d", m.n)
			_, err := st.CreateRegistryEntry(ctx, store.RegistryEntry{Name: fmt.Sprintf("r%d", m.n), Version: &v, Digest: fmt.Sprintf("d%d", m.n),
				Slots: []string{store.SlotRouter, store.SlotWarmupDialect}}, []byte("m"))
			return err
		}},
		{"rename plugin", len(regIDs) > 0, func() error {
			_, err := st.PatchRegistryEntry(ctx, m.pick(regIDs), store.AnyRevision, ptr(fmt.Sprintf("n%d", m.n)), nil)
			return err
		}},
		{"delete plugin", len(regIDs) > 0, func() error {
			id := m.pick(regIDs)
			refs := must(st.RegistryReferences(ctx, id))
			_, err := st.DeleteRegistryEntry(ctx, id, store.AnyRevision, m.rng.IntN(3) > 0, store.ReferenceFingerprint(refs))
			return err
		}},
		{"bind chain entry", len(prIDs) > 0 && len(regIDs) > 0, func() error {
			cfg := json.RawMessage(`{}`)
			if len(upIDs) > 0 && m.rng.IntN(2) == 0 {
				cfg = json.RawMessage(fmt.Sprintf(`{"upstream_id":%q}`, m.pick(upIDs)))
			}
			var pos *int64
			if m.rng.IntN(2) == 0 {
				pos = ptr(int64(0))
			}
			_, err := st.InsertChainEntry(ctx, m.pick(prIDs), store.ChainEntry{Slot: store.SlotRouter, WasmRegistryID: ptr(m.pick(regIDs)), Config: cfg}, pos)
			return err
		}},
		{"update chain entry", len(prIDs) > 0, func() error {
			ch := must(st.ListChain(ctx, m.pick(prIDs)))
			if len(ch) == 0 {
				return nil
			}
			cfg := json.RawMessage(`{}`)
			if len(upIDs) > 0 && m.rng.IntN(2) == 0 {
				cfg = json.RawMessage(fmt.Sprintf(`{"upstream_ids":[%q]}`, m.pick(upIDs)))
			}
			_, err := st.UpdateChainEntry(ctx, ch[m.rng.IntN(len(ch))].ID, store.AnyRevision, cfg, m.rng.IntN(3) > 0)
			return err
		}},
		{"delete chain entry", len(prIDs) > 0, func() error {
			ch := must(st.ListChain(ctx, m.pick(prIDs)))
			if len(ch) == 0 {
				return nil
			}
			return st.DeleteChainEntry(ctx, ch[m.rng.IntN(len(ch))].ID, store.AnyRevision)
		}},
		{"reorder chain", len(prIDs) > 0, func() error {
			pid := m.pick(prIDs)
			ch := must(st.ListChain(ctx, pid))
			var order []store.ChainRef
			for _, c := range ch {
				if c.Slot == store.SlotRouter {
					order = append(order, store.ChainRef{ID: c.ID, Revision: c.Revision})
				}
			}
			m.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			_, err := st.ReorderChain(ctx, pid, store.SlotRouter, order)
			return err
		}},
		{"rebalance chain", len(prIDs) > 0, func() error { _, err := st.RebalanceChain(ctx, m.pick(prIDs)); return err }},
	}
	// Principals, keys and chains are most of a configuration and of its
	// changes: they are drawn more often.
	weight := map[string]int{"create principal": 3, "create key": 4, "revoke key": 3, "patch principal": 2, "bind chain entry": 2, "update chain entry": 2}
	var live []op
	for _, o := range ops {
		for i := 0; o.ok && i < max(1, weight[o.name]); i++ {
			live = append(live, o)
		}
	}
	o := live[m.rng.IntN(len(live))]
	err := o.do()
	var ref *store.ReferencedError
	var slot *store.SlotError
	var order *store.OrderError
	switch {
	case err == nil:
		m.done[o.name]++
	case errors.Is(err, store.ErrStaleRevision), errors.Is(err, store.ErrConflict), errors.As(err, &ref),
		errors.As(err, &slot), errors.As(err, &order), errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrReferencesChanged):
		m.done[o.name+" (refused)"]++
	default:
		panic(failure(fmt.Sprintf("%s: %v", o.name, err)))
	}
	return o.name
}
