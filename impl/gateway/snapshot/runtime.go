package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
)

// Loader is the part of the store the runtime reads.
type Loader interface {
	LoadConfig(ctx context.Context) (*store.Config, error)
	ConfigGeneration(ctx context.Context) (int64, error)
	SetUpstreamStatus(ctx context.Context, id string, status store.UpstreamStatus) error
}

// DeltaLoader is the store's change-log read: what changed after a
// generation (store.ErrDeltaUnavailable when that cannot be told exactly).
// A loader without it is always read in full.
type DeltaLoader interface {
	LoadConfigDelta(ctx context.Context, since int64) (*store.ConfigDelta, error)
}

// FullRebuildEvery bounds how long snapshots are built from deltas alone:
// a rebuild at least this long after the last full one reads everything,
// and the reconciler forces one when none ran for that long. It repairs
// what no change log shows (rows edited by hand, a database restored to a
// generation past the snapshot's).
const FullRebuildEvery = 5 * time.Minute

// Runtime holds the current snapshot. Refresh is the single rebind step: it
// reads configuration, builds a snapshot (routing tables included) and swaps
// it in. Writers serialise on a mutex; readers only load the pointer.
type Runtime struct {
	service.Base
	loader Loader
	opener Opener

	cur atomic.Pointer[Snapshot]
	mu  sync.Mutex // serialises rebuilds, never taken by readers
	// started counts rebuilds that began reading configuration (changed
	// under mu, read before taking it); lastErr is the latest one's
	// outcome (under mu). See Refresh.
	started atomic.Uint64
	lastErr error
	// waiting counts callers between arriving and taking mu (their gate
	// included), so a test can tell when they are queued.
	waiting atomic.Int32
	// cfg is the configuration cur was built from, the base the next delta
	// applies to; nil when no trusted base exists (a full load is next).
	// lastFull is when the last full load was read. Both under mu.
	cfg      *store.Config
	lastFull time.Time
	// deltas and fulls count the rebuilds of each kind.
	deltas, fulls atomic.Uint64

	// FullEvery overrides FullRebuildEvery when positive (tests).
	FullEvery time.Duration

	// Stage, when set, runs before every build with the configuration read:
	// it commits what the new snapshot needs beyond configuration (compiled
	// plugin modules), so the swap that follows is the single rebind step.
	Stage func(ctx context.Context, cfg *store.Config)
	// OnSwap, when set, is called after every swap with the new snapshot
	// (metrics, subscribers). It runs on the refreshing goroutine.
	OnSwap func(*Snapshot)
}

// NewRuntime returns a runtime with an empty snapshot; call Refresh to load.
func NewRuntime(loader Loader, opener Opener, o service.Options) *Runtime {
	r := service.Init(o, &Runtime{loader: loader, opener: opener})
	r.cur.Store(Build(&store.Config{}, nil, r.Clock.Now()))
	return r
}

// Current returns the snapshot in force. It never blocks.
func (r *Runtime) Current() *Snapshot { return r.cur.Load() }

// Refresh rebuilds the snapshot from storage and swaps it in. Callers that
// arrive while a rebuild runs share the next one: a rebuild that began
// reading after a caller arrived has seen every change the caller
// committed before calling, so the caller returns with its outcome instead
// of reading the whole configuration again. Concurrent admin writes then
// cost about two rebuilds rather than one each: serial rebuilds, one per
// writer, starved the proxy path of CPU on SQLite (docs/benchmarks.md,
// "Why the scale targets stand where they do").
func (r *Runtime) Refresh(ctx context.Context) error { return r.RefreshIn(ctx, nil) }

// Gate bounds how many goroutines run CPU-heavy work at once (the server's
// admin lane on SQLite).
type Gate interface {
	Acquire(ctx context.Context) error
	Release()
}

// RefreshIn is Refresh with the rebuild run inside gate when it is not
// nil. The gate is taken before the rebuild lock, as a write would take
// it, so a caller waiting for it holds nothing a gate holder might need;
// callers that arrived while the gate was busy still share one rebuild.
func (r *Runtime) RefreshIn(ctx context.Context, gate Gate) error { return r.refresh(ctx, gate, 0) }

// RefreshPast is Refresh for a change announced at generation gen (a
// notification): nothing is read when the snapshot has reached gen, also
// when it got there through a rebuild that ran while this call waited
// (the refresh after a replica's own admin write, whose notification
// comes back to it too).
func (r *Runtime) RefreshPast(ctx context.Context, gen int64) error {
	if r.Current().Generation >= gen {
		return nil
	}
	return r.refresh(ctx, nil, gen)
}

// refresh is RefreshIn, returning without a rebuild once the snapshot has
// reached generation past when past is positive.
func (r *Runtime) refresh(ctx context.Context, gate Gate, past int64) error {
	arrived := r.started.Load()
	r.waiting.Add(1)
	if gate != nil {
		if err := gate.Acquire(ctx); err != nil {
			r.waiting.Add(-1)
			return err
		}
		defer gate.Release()
	}
	r.mu.Lock()
	r.waiting.Add(-1)
	defer r.mu.Unlock()
	if r.started.Load() > arrived && r.lastErr == nil {
		return nil // a failed one is retried: its error may be another caller's context
	}
	if past > 0 && r.Current().Generation >= past {
		return nil
	}
	r.started.Add(1)
	r.lastErr = r.rebuild(ctx, false)
	return r.lastErr
}

// RefreshFull is Refresh reading the whole configuration, whatever the
// change log says.
func (r *Runtime) RefreshFull(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started.Add(1)
	r.lastErr = r.rebuild(ctx, true)
	return r.lastErr
}

// Rebuilds counts the rebuilds so far that applied a delta and that read
// the configuration in full.
func (r *Runtime) Rebuilds() (delta, full uint64) { return r.deltas.Load(), r.fulls.Load() }

func (r *Runtime) fullEvery() time.Duration {
	if r.FullEvery > 0 {
		return r.FullEvery
	}
	return FullRebuildEvery
}

// rebuild applies the changes since the snapshot's generation when the
// store can tell them exactly, else reads everything. A delta is never
// trusted without a base read in full: the first load, any failure and
// the periodic full load reset it.
func (r *Runtime) rebuild(ctx context.Context, full bool) error {
	dl, ok := r.loader.(DeltaLoader)
	if !full && ok && r.cfg != nil && r.Clock.Now().Sub(r.lastFull) < r.fullEvery() {
		err := r.rebuildDelta(ctx, dl)
		if err == nil {
			return nil
		}
		if errors.Is(err, store.ErrDeltaUnavailable) {
			r.Logger.Info("configuration delta unavailable; loading in full", "reason", err)
		} else {
			r.Logger.Warn("configuration delta failed; loading in full", "error", err)
		}
	}
	return r.rebuildFull(ctx)
}

func (r *Runtime) rebuildDelta(ctx context.Context, dl DeltaLoader) error {
	d, err := dl.LoadConfigDelta(ctx, r.cfg.Generation)
	if err != nil {
		return err
	}
	if d.From != r.cfg.Generation || d.Generation < d.From {
		return fmt.Errorf("%w: delta from %d to %d asked from %d", store.ErrDeltaUnavailable, d.From, d.Generation, r.cfg.Generation)
	}
	if d.Empty() {
		return nil
	}
	// The snapshot holds the live keys: the base keeps none, so a change
	// of a principal copies no list of every key.
	cfg := r.cfg.ApplyWithoutKeys(d)
	if r.Stage != nil {
		r.Stage(ctx, cfg)
	}
	s := Apply(r.cur.Load(), cfg, d, r.opener, r.Clock.Now())
	r.deltas.Add(1)
	// Upstreams the delta did not touch keep their apply outcome, already
	// recorded; the touched ones come with their stored status.
	r.install(ctx, cfg, s, d.Upstreams)
	return nil
}

func (r *Runtime) rebuildFull(ctx context.Context) error {
	// Until this read succeeds there is no base a delta may trust.
	r.cfg = nil
	read := r.Clock.Now()
	cfg, err := r.loader.LoadConfig(ctx)
	if err != nil {
		return fmt.Errorf("load configuration: %w", err)
	}
	r.fulls.Add(1)
	if old := r.cur.Load(); old != nil && old.Generation > cfg.Generation {
		// The stored generation went backwards (a database restored from
		// a backup): the snapshot stays, as before, until the store moves
		// past it; and no delta is applied to a history that diverged,
		// so the next rebuild reads in full again.
		r.Logger.Warn("stored configuration generation is behind the snapshot's; keeping the snapshot",
			"stored", cfg.Generation, "snapshot", old.Generation)
		return nil
	}
	if r.Stage != nil {
		r.Stage(ctx, cfg)
	}
	s := Build(cfg, r.opener, r.Clock.Now())
	r.lastFull = read
	// The base the next delta applies to keeps no keys (see rebuildDelta).
	r.install(ctx, cfg.WithoutKeys(), s, cfg.Upstreams)
	return nil
}

// install swaps s in as built from cfg, then records the apply outcome of
// upstreams (rows with their stored status).
func (r *Runtime) install(ctx context.Context, cfg *store.Config, s *Snapshot, upstreams []store.Upstream) {
	r.cur.Store(s)
	r.cfg = cfg
	r.Logger.Debug("snapshot swapped", "generation", s.Generation)
	r.recordApply(ctx, upstreams, s)
	if r.OnSwap != nil {
		r.OnSwap(s)
	}
}

// RefreshIfChanged rebuilds only when the stored generation differs from the
// snapshot's; it is the reconciler's cheap poll.
func (r *Runtime) RefreshIfChanged(ctx context.Context) (bool, error) {
	gen, err := r.loader.ConfigGeneration(ctx)
	if err != nil {
		return false, err
	}
	if gen == r.Current().Generation {
		return false, nil
	}
	return true, r.Refresh(ctx)
}

func (r *Runtime) fullDue() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.Clock.Now().Sub(r.lastFull) >= r.fullEvery()
}

// recordApply writes each upstream's apply outcome into its status when it
// changed. Status writes are background writes: they bump neither the spec
// revision nor the config generation, so they cannot trigger a rebuild loop.
func (r *Runtime) recordApply(ctx context.Context, upstreams []store.Upstream, s *Snapshot) {
	now := r.Clock.Now().Truncate(time.Second)
	for _, u := range upstreams {
		msg, failed := s.Errors[u.ID]
		st := u.Status
		prev := ""
		if st.LastApplyError != nil {
			prev = *st.LastApplyError
		}
		applied := st.LastApplyAt != nil && !st.LastApplyAt.Before(u.UpdatedAt.Truncate(time.Second))
		if prev == msg && (failed || applied) {
			continue
		}
		if failed {
			st.LastApplyError = &msg
		} else {
			st.LastApplyError = nil
			st.LastApplyAt = &now
		}
		if err := r.loader.SetUpstreamStatus(ctx, u.ID, st); err != nil {
			r.Logger.Warn("record upstream apply status", "upstream_id", u.ID, "error", err)
		}
	}
}

// Reconcile polls storage every interval and refreshes when the generation
// moved, repairing any missed change notification; when no full load ran
// for FullRebuildEvery it forces one. It returns when ctx ends.
func (r *Runtime) Reconcile(ctx context.Context, interval time.Duration) {
	service.Every(ctx, r.Clock, interval, func(ctx context.Context) {
		if r.fullDue() {
			if err := r.RefreshFull(ctx); err != nil {
				r.Logger.Warn("reconcile: full rebuild", "error", err)
			}
			return
		}
		changed, err := r.RefreshIfChanged(ctx)
		if err != nil {
			r.Logger.Warn("reconcile", "error", err)
		} else if changed {
			r.Logger.Info("reconciler applied a missed change", "generation", r.Current().Generation)
		}
	})
}
