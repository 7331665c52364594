package snapshot

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Loader is the part of the store the runtime reads.
type Loader interface {
	LoadConfig(ctx context.Context) (*store.Config, error)
	ConfigGeneration(ctx context.Context) (int64, error)
	SetUpstreamStatus(ctx context.Context, id string, status store.UpstreamStatus) error
}

// Runtime holds the current snapshot. Refresh is the single rebind step: it
// reads configuration, builds a snapshot (routing tables included) and swaps
// it in. Writers serialise on a mutex; readers only load the pointer.
type Runtime struct {
	loader Loader
	opener Opener
	log    *slog.Logger
	now    func() time.Time

	cur atomic.Pointer[Snapshot]
	mu  sync.Mutex // serialises rebuilds, never taken by readers
	// started counts rebuilds that began reading configuration (changed
	// under mu, read before taking it); lastErr is the latest one's
	// outcome (under mu). See Refresh.
	started atomic.Uint64
	lastErr error
	// waiting counts callers between arriving and taking mu, so a test can
	// tell when they are queued behind a running rebuild.
	waiting atomic.Int32

	// Stage, when set, runs before every build with the configuration read:
	// it commits what the new snapshot needs beyond configuration (compiled
	// plugin modules), so the swap that follows is the single rebind step.
	Stage func(ctx context.Context, cfg *store.Config)
	// OnSwap, when set, is called after every swap with the new snapshot
	// (metrics, subscribers). It runs on the refreshing goroutine.
	OnSwap func(*Snapshot)
}

// NewRuntime returns a runtime with an empty snapshot; call Refresh to load.
func NewRuntime(loader Loader, opener Opener, log *slog.Logger, now func() time.Time) *Runtime {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{loader: loader, opener: opener, log: log, now: now}
	r.cur.Store(Build(&store.Config{}, nil, now()))
	return r
}

// Current returns the snapshot in force. It never blocks.
func (r *Runtime) Current() *Snapshot { return r.cur.Load() }

// Refresh rebuilds the snapshot from storage and swaps it in. Callers that
// arrive while a rebuild runs share the next one: a rebuild that began
// reading after a caller arrived has seen every change the caller
// committed before calling, so the caller returns with its outcome instead
// of reading the whole configuration again. Concurrent admin writes then
// cost about two rebuilds rather than one each (issue 22: on SQLite eight
// writers' serial rebuilds starved the proxy path of CPU).
func (r *Runtime) Refresh(ctx context.Context) error {
	arrived := r.started.Load()
	r.waiting.Add(1)
	r.mu.Lock()
	r.waiting.Add(-1)
	defer r.mu.Unlock()
	if r.started.Load() > arrived && r.lastErr == nil {
		return nil // a failed one is retried: its error may be another caller's context
	}
	r.started.Add(1)
	r.lastErr = r.rebuild(ctx)
	return r.lastErr
}

func (r *Runtime) rebuild(ctx context.Context) error {
	cfg, err := r.loader.LoadConfig(ctx)
	if err != nil {
		return fmt.Errorf("load configuration: %w", err)
	}
	// A concurrent refresh may already have installed a newer generation;
	// never go backwards.
	if old := r.cur.Load(); old != nil && old.Generation > cfg.Generation {
		return nil
	}
	if r.Stage != nil {
		r.Stage(ctx, cfg)
	}
	s := Build(cfg, r.opener, r.now())
	r.cur.Store(s)
	r.log.Debug("snapshot swapped", "generation", s.Generation)
	r.recordApply(ctx, cfg, s)
	if r.OnSwap != nil {
		r.OnSwap(s)
	}
	return nil
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

// recordApply writes each upstream's apply outcome into its status when it
// changed. Status writes are background writes: they bump neither the spec
// revision nor the config generation, so they cannot trigger a rebuild loop.
func (r *Runtime) recordApply(ctx context.Context, cfg *store.Config, s *Snapshot) {
	now := r.now().Truncate(time.Second)
	for _, u := range cfg.Upstreams {
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
			r.log.Warn("record upstream apply status", "upstream_id", u.ID, "error", err)
		}
	}
}

// Reconcile polls storage every interval and refreshes when the generation
// moved, repairing any missed change notification. It returns when ctx ends.
func (r *Runtime) Reconcile(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			changed, err := r.RefreshIfChanged(ctx)
			if err != nil {
				r.log.Warn("reconcile", "error", err)
			} else if changed {
				r.log.Info("reconciler applied a missed change", "generation", r.Current().Generation)
			}
		}
	}
}
