package snapshot

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/waitfor"
)

type xorOpener struct{}

// Open "decrypts" by checking the associated data is embedded, standing in
// for the AEAD binding.
func (xorOpener) Open(ct, ad []byte) ([]byte, error) {
	if len(ct) < len(ad) || string(ct[:len(ad)]) != string(ad) {
		return nil, errors.New("bad binding")
	}
	return ct[len(ad):], nil
}

// sealed seals pt for upstream id of kind at base (the xorOpener's binding).
func sealed(id, kind, base, pt string) []byte {
	return append(credential.AD(id, kind, base, ""), pt...)
}

func strp(s string) *string { return &s }

func baseConfig(gen int64) *store.Config {
	h := sha256.Sum256([]byte("k1"))
	return &store.Config{
		Generation: gen,
		Upstreams: []store.Upstream{
			{ID: "up_key", Name: "key", Kind: store.KindVendorAPIKey, BaseURL: "http://a/", Enabled: true, Credential: sealed("up_key", store.KindVendorAPIKey, "http://a/", "sk"), CredentialKind: "api_key"},
			{ID: "up_oauth", Name: "oauth", Kind: store.KindVendorOAuth, BaseURL: "http://b", Enabled: true, Credential: sealed("up_oauth", store.KindVendorOAuth, "http://b", `{"access_token":"at"}`), CredentialKind: "oauth"},
			{ID: "up_off", Name: "off", Kind: store.KindVendorAPIKey, BaseURL: "http://c", Enabled: false, Credential: sealed("up_off", store.KindVendorAPIKey, "http://c", "sk"), CredentialKind: "api_key"},
			{ID: "up_nocred", Name: "nocred", Kind: store.KindVendorOAuth, BaseURL: "http://d", Enabled: true},
			{ID: "up_badcred", Name: "bad", Kind: store.KindVendorAPIKey, BaseURL: "http://e", Enabled: true, Credential: sealed("up_other", store.KindVendorAPIKey, "http://e", "sk"), CredentialKind: "api_key"},
		},
		Principals: []store.Principal{{ID: "pr_1", Name: "p", Kind: "machine", Enabled: true, AllowedModels: []string{"claude-3*", "exact-model"}}},
		Keys:       []store.Key{{ID: "key_1", PrincipalID: "pr_1", Hash: h[:]}},
		Chains: []store.ChainEntry{
			{ID: "ce_1", PrincipalID: "pr_1", Slot: "router", Builtin: strp(store.BuiltinSubscriptionPreference), Position: 0, Enabled: true},
		},
	}
}

// A credential sealed for one origin does not open once the upstream
// points at another (however its row came to name it): the upstream is
// reported and left out of routing, so nothing is sent there.
func TestCredentialLeftBehindByAMoveDoesNotOpen(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(3)
	for i := range cfg.Upstreams {
		if u := &cfg.Upstreams[i]; u.ID == "up_key" {
			u.BaseURL = "http://elsewhere.example/"
		}
		if u := &cfg.Upstreams[i]; u.ID == "up_oauth" {
			u.OAuthTokenURL = "http://elsewhere.example/token"
		}
	}
	s := Build(cfg, xorOpener{}, time.Unix(5, 0))
	for _, id := range []string{"up_key", "up_oauth"} {
		if s.Errors[id] == "" || s.Upstream(id).Credential != "" || s.Upstream(id).UsableIndex >= 0 {
			t.Errorf("%s: error %q, credential %q, usable %d", id, s.Errors[id], s.Upstream(id).Credential, s.Upstream(id).UsableIndex)
		}
	}
}

// P-PR-5 / routing: the built-in router prefers subscription upstreams, then
// API-key ones, skipping disabled and credential-less upstreams.
func TestBuildRoutesSubscriptionFirst(t *testing.T) {
	t.Parallel()
	s := Build(baseConfig(3), xorOpener{}, time.Unix(5, 0))
	p := s.KeyByHash(sha256.Sum256([]byte("k1"))).Principal
	var ids []string
	for _, u := range p.Candidates {
		ids = append(ids, u.ID)
	}
	if len(ids) != 2 || ids[0] != "up_oauth" || ids[1] != "up_key" {
		t.Fatalf("candidates %v", ids)
	}
	if p.Candidates[0].Credential != "at" || p.Candidates[1].Credential != "sk" {
		t.Fatal("credentials not opened")
	}
	if p.Candidates[1].MessagesURL != "http://a/v1/messages" {
		t.Fatalf("url %q", p.Candidates[1].MessagesURL)
	}
	if s.Errors["up_badcred"] == "" {
		t.Fatal("a credential bound to another upstream must not open")
	}
	if s.KeyByHash(sha256.Sum256([]byte("nope"))) != nil {
		t.Fatal("unknown key found")
	}
	for model, want := range map[string]bool{"claude-3-opus": true, "exact-model": true, "exact-model-2": false, "gpt": false} {
		if p.AllowsModel(model) != want {
			t.Errorf("AllowsModel(%q) != %v", model, want)
		}
	}
}

func TestBuildPinnedAndRemovedRouter(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(1)
	cfg.Chains[0].Config = []byte(`{"upstream_ids":["up_key"]}`)
	p := Build(cfg, xorOpener{}, time.Now()).Principal("pr_1")
	if len(p.Candidates) != 1 || p.Candidates[0].ID != "up_key" {
		t.Fatalf("pinned candidates %v", p.Candidates)
	}
	// P-PR-5: the built-in entry can be removed; the principal still routes.
	cfg.Chains = nil
	p = Build(cfg, xorOpener{}, time.Now()).Principal("pr_1")
	if len(p.Candidates) != 2 {
		t.Fatalf("without router entries: %v", p.Candidates)
	}
	// Revoked keys never enter the snapshot.
	now := time.Now()
	cfg.Keys[0].RevokedAt = &now
	if Build(cfg, xorOpener{}, now).KeyByHash(sha256.Sum256([]byte("k1"))) != nil {
		t.Fatal("revoked key present")
	}
}

type fakeLoader struct {
	mu       sync.Mutex
	cfg      *store.Config
	loads    atomic.Int64
	statuses map[string]store.UpstreamStatus
	block    chan struct{}
}

func (f *fakeLoader) LoadConfig(ctx context.Context) (*store.Config, error) {
	f.loads.Add(1)
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := *f.cfg
	return &c, nil
}

func (f *fakeLoader) ConfigGeneration(ctx context.Context) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cfg.Generation, nil
}

func (f *fakeLoader) SetUpstreamStatus(ctx context.Context, id string, st store.UpstreamStatus) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.statuses == nil {
		f.statuses = map[string]store.UpstreamStatus{}
	}
	f.statuses[id] = st
	return nil
}

func (f *fakeLoader) set(c *store.Config) {
	f.mu.Lock()
	f.cfg = c
	f.mu.Unlock()
}

// P-RUNTIME-2 / P-RUNTIME-4: refresh swaps atomically; readers holding the old
// snapshot keep a consistent view; the reconciler's poll only rebuilds on change.
func TestRuntimeRefreshAndReconcile(t *testing.T) {
	t.Parallel()
	l := &fakeLoader{cfg: baseConfig(1)}
	rt := NewRuntime(l, xorOpener{}, service.Options{})
	if rt.Current().Generation != 0 {
		t.Fatal("initial snapshot not empty")
	}
	if err := rt.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	old := rt.Current()
	if old.Generation != 1 || old.Principal("pr_1") == nil {
		t.Fatal("refresh did not install")
	}
	changed, err := rt.RefreshIfChanged(context.Background())
	if err != nil || changed || l.loads.Load() != 1 {
		t.Fatalf("unchanged generation rebuilt: %v %v loads=%d", changed, err, l.loads.Load())
	}
	next := baseConfig(2)
	next.Principals[0].Enabled = false
	l.set(next)
	changed, err = rt.RefreshIfChanged(context.Background())
	if err != nil || !changed || rt.Current().Principal("pr_1").Enabled {
		t.Fatalf("change not applied: %v %v", changed, err)
	}
	if !old.Principal("pr_1").Enabled {
		t.Fatal("the old snapshot was mutated")
	}
	// P-UP-7: the apply step (this rebuild) writes status; an undecryptable credential
	// shows as an apply error, the others as applied.
	l.mu.Lock()
	bad, good := l.statuses["up_badcred"], l.statuses["up_key"]
	l.mu.Unlock()
	if bad.LastApplyError == nil || good.LastApplyError != nil || good.LastApplyAt == nil {
		t.Fatalf("statuses bad=%+v good=%+v", bad, good)
	}
}

// Readers never wait for a rebuild: Current returns while a refresh is
// blocked inside the store.
func TestReadersDoNotWaitForRefresh(t *testing.T) {
	t.Parallel()
	l := &fakeLoader{cfg: baseConfig(1), block: make(chan struct{})}
	rt := NewRuntime(l, xorOpener{}, service.Options{})
	done := make(chan error)
	go func() { done <- rt.Refresh(context.Background()) }()
	waitfor.True(t, "the rebuild to read the store", func() bool { return l.loads.Load() > 0 })
	if rt.Current() == nil { // would deadlock if readers took the writer's lock
		t.Fatal("nil snapshot")
	}
	close(l.block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRefreshNeverGoesBackwards(t *testing.T) {
	t.Parallel()
	l := &fakeLoader{cfg: baseConfig(5)}
	rt := NewRuntime(l, xorOpener{}, service.Options{})
	rt.Refresh(context.Background())
	l.set(baseConfig(4))
	rt.Refresh(context.Background())
	if rt.Current().Generation != 5 {
		t.Fatalf("generation went back to %d", rt.Current().Generation)
	}
}

// Callers arriving while a rebuild runs share the next rebuild, which reads
// what they committed: five concurrent refreshes behind a running one cost
// one more configuration read, not five, and install the newest config.
func TestConcurrentRefreshesShareOneRebuild(t *testing.T) {
	t.Parallel()
	l := &fakeLoader{cfg: baseConfig(1), block: make(chan struct{})}
	rt := NewRuntime(l, xorOpener{}, service.Options{})
	first := make(chan error)
	go func() { first <- rt.Refresh(context.Background()) }()
	waitfor.True(t, "the rebuild to read the store", func() bool { return l.loads.Load() > 0 })
	// A change committed while the first rebuild is reading; its writers
	// then ask for a refresh.
	l.set(baseConfig(2))
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- rt.Refresh(context.Background()) }()
	}
	// Let the five queue on the lock before the first rebuild ends.
	waitfor.True(t, "five refreshes queued on the lock", func() bool { return rt.waiting.Load() >= 5 })
	close(l.block)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := l.loads.Load(); n != 2 {
		t.Fatalf("%d configuration reads for six refreshes; want 2 (the running one and one shared)", n)
	}
	if g := rt.Current().Generation; g != 2 {
		t.Fatalf("generation %d installed; want 2, committed before the five asked", g)
	}
	// A refresh alone still rebuilds.
	l.set(baseConfig(3))
	if err := rt.Refresh(context.Background()); err != nil || rt.Current().Generation != 3 || l.loads.Load() != 3 {
		t.Fatalf("lone refresh: %v, generation %d, %d reads", err, rt.Current().Generation, l.loads.Load())
	}
}

// A notification's refresh reads nothing when the snapshot has reached
// the announced generation: already, or through a rebuild that was
// running when it arrived (a replica's refresh after its own admin write,
// whose notification comes back to it too). A later generation rebuilds.
func TestRefreshPastReadsNothingOnceReached(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := &fakeLoader{cfg: baseConfig(1)}
	rt := NewRuntime(l, xorOpener{}, service.Options{})
	if err := rt.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := rt.RefreshPast(ctx, 1); err != nil || l.loads.Load() != 1 {
		t.Fatalf("generation reached: %v, %d reads; want none after the first", err, l.loads.Load())
	}
	l.set(baseConfig(2))
	l.block = make(chan struct{})
	first := make(chan error)
	go func() { first <- rt.Refresh(ctx) }()
	waitfor.True(t, "the second rebuild to read the store", func() bool { return l.loads.Load() >= 2 })
	past := make(chan error)
	go func() { past <- rt.RefreshPast(ctx, 2) }()
	waitfor.True(t, "a refresh queued on the lock", func() bool { return rt.waiting.Load() >= 1 })
	close(l.block)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-past; err != nil {
		t.Fatal(err)
	}
	if n, g := l.loads.Load(), rt.Current().Generation; n != 2 || g != 2 {
		t.Fatalf("%d reads, generation %d; want 2 reads (no second for the notification) and generation 2", n, g)
	}
	l.set(baseConfig(3))
	if err := rt.RefreshPast(ctx, 3); err != nil || l.loads.Load() != 3 || rt.Current().Generation != 3 {
		t.Fatalf("new generation: %v, %d reads, generation %d", err, l.loads.Load(), rt.Current().Generation)
	}
}

// chanGate is a gate of one slot.
type chanGate chan struct{}

func (g chanGate) Acquire(ctx context.Context) error {
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g chanGate) Release() { <-g }

// Gated refreshes rebuild only inside the gate; those that waited for it
// together share one rebuild; a caller that gives up waiting changes
// nothing; and a refresh without the gate is not held up by the callers
// waiting for it (a gate holder may call Refresh without deadlocking).
func TestRefreshInWaitsForTheGateAndShares(t *testing.T) {
	t.Parallel()
	l := &fakeLoader{cfg: baseConfig(1)}
	rt := NewRuntime(l, xorOpener{}, service.Options{})
	gate := make(chanGate, 1)
	ctx := context.Background()
	if err := gate.Acquire(ctx); err != nil { // an admin write holds the gate
		t.Fatal(err)
	}
	const n = 6
	errs := make(chan error, n)
	for range n {
		go func() { errs <- rt.RefreshIn(ctx, gate) }()
	}
	waitfor.True(t, "every caller waiting for the gate (or a rebuild that should not run)", func() bool { return rt.waiting.Load() >= n || l.loads.Load() != 0 })
	if got := l.loads.Load(); got != 0 {
		t.Fatalf("%d rebuilds ran while the gate was held", got)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := rt.RefreshIn(short, gate); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a caller whose context ended waiting for the gate got %v", err)
	}
	l.set(baseConfig(2))
	gate.Release()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := l.loads.Load(); got != 1 {
		t.Fatalf("%d reads for %d callers that waited for the gate together; want 1 shared", got, n)
	}
	if g := rt.Current().Generation; g != 2 {
		t.Fatalf("generation %d; want 2", g)
	}

	// The gate's holder refreshes without it while another caller waits
	// for the gate: it must not wait, and the waiter shares its rebuild.
	if err := gate.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { errs <- rt.RefreshIn(ctx, gate) }()
	waitfor.True(t, "a refresh queued on the lock", func() bool { return rt.waiting.Load() >= 1 })
	l.set(baseConfig(3))
	if err := rt.Refresh(ctx); err != nil || l.loads.Load() != 2 || rt.Current().Generation != 3 {
		t.Fatalf("ungated refresh beside a gated waiter: %v, %d reads, generation %d", err, l.loads.Load(), rt.Current().Generation)
	}
	gate.Release()
	if err := <-errs; err != nil || l.loads.Load() != 2 {
		t.Fatalf("the waiter: %v, %d reads; want the ungated rebuild shared", err, l.loads.Load())
	}
	if len(gate) != 0 {
		t.Fatal("the gate is still held")
	}
}

// A WASM router entry gets a Bound slot for the request path, and every
// usable upstream knows its index in Usable (what router plugins name).
func TestBuildPluginEntriesAndUsableIndexes(t *testing.T) {
	t.Parallel()
	cfg := baseConfig(1)
	reg := "wasm_1"
	cfg.Plugins = []store.RegistryEntry{{ID: reg, Name: "r", Digest: "d1", Slots: []string{"router"}}}
	cfg.Chains = append(cfg.Chains, store.ChainEntry{ID: "ce_2", PrincipalID: "pr_1", Slot: "router", WasmRegistryID: &reg, Position: 1, Enabled: true})
	s := Build(cfg, xorOpener{}, time.Now())
	for i, u := range s.Usable {
		if u.UsableIndex != i {
			t.Errorf("%s: index %d at %d", u.ID, u.UsableIndex, i)
		}
	}
	if len(s.Usable) != 2 || s.Upstream("up_off").UsableIndex != -1 {
		t.Fatalf("usable %v, up_off index %d", s.Usable, s.Upstream("up_off").UsableIndex)
	}
	p := s.Principal("pr_1")
	if !p.Dynamic || p.Routers[0].Bound != nil || p.Routers[1].Bound == nil || p.Routers[1].WasmDigest != "d1" {
		t.Fatalf("routers %+v", p.Routers)
	}
	b := p.Routers[1].Bound
	if v, won := b.Set("first"); !won || v != "first" || b.Load() != "first" {
		t.Fatal("first Set")
	}
	if v, won := b.Set("second"); won || v != "first" {
		t.Fatal("a second Set replaced the value")
	}
}

// routerConfig is baseConfig(1) with a WASM router (registry entry reg)
// after pr_1's built-in one, and a second principal pr_2 holding key_2,
// whose hash is h2.
func routerConfig() (cfg *store.Config, reg string, h2 [sha256.Size]byte) {
	cfg = baseConfig(1)
	reg = "wasm_1"
	cfg.Plugins = []store.RegistryEntry{{ID: reg, Name: "r", Digest: "d1", Slots: []string{"router"}}}
	cfg.Chains = append(cfg.Chains, store.ChainEntry{ID: "ce_2", PrincipalID: "pr_1", Slot: "router", WasmRegistryID: &reg, Position: 1, Enabled: true})
	cfg.Principals = append(cfg.Principals, store.Principal{ID: "pr_2", Name: "q", Kind: "machine", Enabled: true})
	h2 = sha256.Sum256([]byte("k2"))
	cfg.Keys = append(cfg.Keys, store.Key{ID: "key_2", PrincipalID: "pr_2", Hash: h2[:]})
	return cfg, reg, h2
}

// A WASM router's binding slot is bound to the snapshot's usable list: a
// delta that leaves upstreams alone shares an untouched principal (slot
// included) with the previous snapshot, one that changes upstreams gives
// every WASM entry a fresh slot, and a delta never writes to what the
// previous snapshot holds.
func TestApplyBindingSlots(t *testing.T) {
	t.Parallel()
	cfg, _, h2 := routerConfig()
	prev := Build(cfg, xorOpener{}, time.Now())
	before := Describe(prev)
	slot := prev.Principal("pr_1").Routers[1].Bound

	q := cfg.Principals[1]
	q.Enabled = false
	d := &store.ConfigDelta{From: 1, Generation: 2, PrincipalIDs: []string{"pr_2"}, Principals: []store.Principal{q},
		Keys: []store.Key{cfg.Keys[1]}, Plugins: cfg.Plugins}
	next := Apply(prev, cfg.Apply(d), d, xorOpener{}, time.Now())
	if next.Principal("pr_1") != prev.Principal("pr_1") || next.KeyByHash(h2).Principal.Enabled {
		t.Fatal("a principal-only delta re-derived an untouched principal, or missed the touched one")
	}

	u := cfg.Upstreams[0]
	u.Enabled = false
	d = &store.ConfigDelta{From: 1, Generation: 2, Upstreams: []store.Upstream{u}, Plugins: cfg.Plugins}
	next = Apply(prev, cfg.Apply(d), d, xorOpener{}, time.Now())
	p := next.Principal("pr_1")
	if p == prev.Principal("pr_1") || p.Routers[1].Bound == nil || p.Routers[1].Bound == slot {
		t.Fatal("after an upstream change the WASM entry kept the previous snapshot's binding slot")
	}
	if len(next.Usable) != len(prev.Usable)-1 || next.Upstream("up_oauth") == prev.Upstream("up_oauth") {
		t.Fatal("upstreams not rebuilt for the new snapshot")
	}
	if want := Describe(Build(cfg.Apply(d), xorOpener{}, next.BuiltAt)); Describe(next) != want {
		t.Fatalf("applied:\n%s\nbuilt:\n%s", Describe(next), want)
	}
	if Describe(prev) != before {
		t.Fatal("the previous snapshot changed")
	}
}

// A delta that renames a router's plugin is built in full; from a
// configuration kept without its keys (the runtime's), the keys come from
// the previous snapshot: those of untouched principals, then the delta's.
func TestApplyWithoutKeysBuildsInFull(t *testing.T) {
	t.Parallel()
	cfg, reg, h2 := routerConfig()
	h3 := sha256.Sum256([]byte("k3"))
	prev := Build(cfg, xorOpener{}, time.Now())
	bare := cfg.ApplyWithoutKeys(&store.ConfigDelta{From: 1, Generation: 1})
	if !bare.KeysOmitted || len(bare.Keys) != 0 || len(cfg.Keys) != 2 {
		t.Fatalf("without keys: omitted %v, %d keys; the original has %d", bare.KeysOmitted, len(bare.Keys), len(cfg.Keys))
	}
	// pr_2's key_2 revoked and key_3 issued, and the plugin renamed.
	renamed := []store.RegistryEntry{{ID: reg, Name: "r2", Digest: "d1", Slots: []string{"router"}}}
	d := &store.ConfigDelta{From: 1, Generation: 2, PrincipalIDs: []string{"pr_2"}, Principals: []store.Principal{cfg.Principals[1]},
		Keys: []store.Key{{ID: "key_3", PrincipalID: "pr_2", Hash: h3[:]}}, Plugins: renamed}
	next := Apply(prev, bare.ApplyWithoutKeys(d), d, xorOpener{}, time.Now())
	if want := Describe(Build(cfg.Apply(d), xorOpener{}, next.BuiltAt)); Describe(next) != want {
		t.Fatalf("applied:\n%s\nbuilt:\n%s", Describe(next), want)
	}
	if next.KeyByHash(h2) != nil || next.KeyByHash(h3) == nil || next.KeyByHash(sha256.Sum256([]byte("k1"))) == nil {
		t.Fatal("keys after the delta: want key_1 and key_3, not key_2")
	}
	if next.Principal("pr_1").Routers[1].WasmName != "r2" {
		t.Fatal("the renamed plugin did not reach the router")
	}
}

// leadOf renders a principal's precomputed pipeline start.
func leadOf(s *Snapshot, id string) string {
	l := s.Principal(id).Lead
	if l == nil {
		return "nil"
	}
	var ids []string
	for i, c := range l.Candidates {
		ids = append(ids, c.ID)
		if s.Upstream(c.ID) != c || s.Usable[l.Indexes[i]] != c {
			ids = append(ids, "(stale)")
		}
	}
	return fmt.Sprintf("%v %v next=%d", ids, l.Indexes, l.Next)
}

// A dynamic chain's leading built-in routers are run when the snapshot is
// built (the request path starts at the first WASM entry), and run again
// whenever a delta changes what they decide on: the upstreams or the
// principal's chain.
func TestDynamicChainLead(t *testing.T) {
	t.Parallel()
	cfg, reg, _ := routerConfig()
	prev := Build(cfg, xorOpener{}, time.Now())
	if got := leadOf(prev, "pr_1"); got != "[up_oauth up_key] [1 0] next=1" {
		t.Fatalf("lead %s", got)
	}
	if leadOf(prev, "pr_2") != "nil" {
		t.Fatal("a static chain has a lead")
	}

	// Upstreams change: up_oauth is disabled, up_key's index is still 0.
	u := cfg.Upstreams[1]
	u.Enabled = false
	d := &store.ConfigDelta{From: 1, Generation: 2, Upstreams: []store.Upstream{u}, Plugins: cfg.Plugins}
	next := Apply(prev, cfg.Apply(d), d, xorOpener{}, time.Now())
	if got := leadOf(next, "pr_1"); got != "[up_key] [0] next=1" {
		t.Fatalf("after an upstream change: lead %s", got)
	}
	if leadOf(prev, "pr_1") != "[up_oauth up_key] [1 0] next=1" {
		t.Fatal("the delta changed the previous snapshot's lead")
	}

	// The chain changes: the built-in is pinned to up_key and a second
	// built-in before the WASM entry; then the WASM entry moves first.
	pin := cfg.Chains[0]
	pin.Config = []byte(`{"upstream_id":"up_key"}`)
	second := pin
	second.ID, second.Position, second.Config = "ce_3", 0, nil
	wasm := store.ChainEntry{ID: "ce_2", PrincipalID: "pr_1", Slot: "router", WasmRegistryID: &reg, Position: 1, Enabled: true}
	d = &store.ConfigDelta{From: 1, Generation: 2, PrincipalIDs: []string{"pr_1"}, Principals: []store.Principal{cfg.Principals[0]},
		Keys: []store.Key{cfg.Keys[0]}, Chains: []store.ChainEntry{pin, second, wasm}, Plugins: cfg.Plugins}
	next = Apply(prev, cfg.Apply(d), d, xorOpener{}, time.Now())
	if got := leadOf(next, "pr_1"); got != "[up_key] [0] next=2" {
		t.Fatalf("after a chain change: lead %s", got)
	}
	if want := Describe(Build(cfg.Apply(d), xorOpener{}, next.BuiltAt)); Describe(next) != want {
		t.Fatalf("applied:\n%s\nbuilt:\n%s", Describe(next), want)
	}
	wasm.Position = -1
	d.Chains = []store.ChainEntry{pin, wasm}
	next = Apply(prev, cfg.Apply(d), d, xorOpener{}, time.Now())
	if got := leadOf(next, "pr_1"); got != "[up_key up_oauth] [0 1] next=0" {
		t.Fatalf("WASM entry first: lead %s", got)
	}
}
