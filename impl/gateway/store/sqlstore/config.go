package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// configSizes counts the rows of a full configuration read.
type configSizes struct{ upstreams, principals, keys, chains int }

// grown is a slice size for n rows read last time, with room for a few
// more created since.
func grown(n int) int { return n + n/16 }

func (s *Store) ConfigGeneration(ctx context.Context) (int64, error) {
	var g int64
	err := s.db.QueryRowContext(ctx, "SELECT generation FROM config_generation WHERE id = 1").Scan(&g)
	return g, s.d.classify(err)
}

// LoadConfig reads the whole configuration as of one generation. The keys,
// most of the rows, are read on a second connection at the same time as
// the rest when the store can show both reads see one state (keysBeside).
func (s *Store) LoadConfig(ctx context.Context) (*store.Config, error) {
	cfg := &store.Config{}
	hint := s.loaded.Load()
	if hint == nil {
		hint = &configSizes{}
	}
	err := s.read(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, "SELECT generation FROM config_generation WHERE id = 1").Scan(&cfg.Generation); err != nil {
			return err
		}
		keys := s.keysBeside(ctx, tx, cfg.Generation, grown(hint.keys))
		defer keys.stop()
		var err error
		// No ORDER BY: the rows are sorted here, where ties on the created
		// time are broken bytewise by id on both drivers (PostgreSQL's
		// collation may order ids otherwise, and sorting 10,000 principals
		// by it took the server longer than reading them), so a
		// configuration a delta was applied to equals a full load.
		if cfg.Upstreams, err = listSized(ctx, s.d, tx, scanUpstream, grown(hint.upstreams), upstreamTable.sel+"WHERE deleted_at IS NULL"); err != nil {
			return err
		}
		if cfg.Principals, err = listSized(ctx, s.d, tx, scanPrincipal, grown(hint.principals), principalTable.sel); err != nil {
			return err
		}
		sortRows(cfg.Upstreams, store.CompareUpstreams)
		sortRows(cfg.Principals, store.ComparePrincipals)
		if cfg.Chains, err = s.queryChainSized(ctx, tx, grown(hint.chains), ""); err != nil {
			return err
		}
		if cfg.Plugins, err = registryTable.list(ctx, s.d, tx, ""); err != nil {
			return err
		}
		// Only what the request path needs of a key, in no order: the
		// snapshot hashes them into a map, and sorting and decoding every
		// column of 50,000 rows was most of a rebuild at scale (issue 22).
		// Read here when the second transaction could not be used.
		if cfg.Keys, err = keys.wait(); err != nil {
			cfg.Keys, err = s.liveKeys(ctx, tx, grown(hint.keys), "")
		} else {
			besideUsed.Add(1)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	s.loaded.Store(&configSizes{upstreams: len(cfg.Upstreams), principals: len(cfg.Principals), keys: len(cfg.Keys), chains: len(cfg.Chains)})
	return cfg, nil
}

// besideRead is the keys being read in a second transaction.
type besideRead struct {
	done   chan struct{}
	keys   []store.Key
	err    error
	cancel context.CancelFunc
}

// besideHook, when set (tests), runs before the second transaction begins.
var besideHook func()

// besideUsed counts full reads whose keys came from the second
// transaction (tests).
var besideUsed atomic.Int64

// errNotBeside: no second transaction was started.
var errNotBeside = fmt.Errorf("no second read transaction")

// wait returns the keys read, or why they were not.
func (b *besideRead) wait() ([]store.Key, error) {
	if b.done == nil {
		return nil, b.err
	}
	<-b.done
	return b.keys, b.err
}

// stop ends the second transaction if still running and waits for it, so
// it never outlives the first.
func (b *besideRead) stop() {
	if b.done != nil {
		b.cancel()
		<-b.done
	}
}

// keysBeside starts reading the live keys in a second read-only
// transaction on another connection, while tx, whose first statement read
// generation gen, reads the rest. The two reads must see one state:
//   - where the dialect can share a snapshot (PostgreSQL exports tx's and
//     the second transaction imports it), they see the very same one;
//   - otherwise (SQLite: each WAL read transaction has its own) the second
//     reads the generation first as well, and its keys are used only if it
//     equals gen. Every change of keys bumps the generation in its own
//     transaction, so equal generations are the same keys.
//
// It starts nothing when the pool has a single connection (in-memory
// SQLite) or another full read is using a second one; the caller then
// reads the keys in tx.
func (s *Store) keysBeside(ctx context.Context, tx *sql.Tx, gen int64, n int) *besideRead {
	if s.db.Stats().MaxOpenConnections == 1 || !s.beside.TryLock() {
		return &besideRead{err: errNotBeside}
	}
	var snap string
	if s.d.ExportSnapshot != "" {
		if err := tx.QueryRowContext(ctx, s.d.ExportSnapshot).Scan(&snap); err != nil || !snapshotID(snap) {
			s.beside.Unlock()
			return &besideRead{err: fmt.Errorf("export snapshot %q: %v", snap, err)}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	b := &besideRead{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(b.done)
		defer s.beside.Unlock()
		if besideHook != nil {
			besideHook()
		}
		b.keys, b.err = s.readKeysBeside(ctx, snap, gen, n)
	}()
	return b
}

func (s *Store) readKeysBeside(ctx context.Context, snap string, gen int64, n int) ([]store.Key, error) {
	tx, err := s.db.BeginTx(ctx, snapshot)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if snap != "" {
		// A utility statement: no parameters; snapshotID vetted the id.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(s.d.ImportSnapshot, snap)); err != nil {
			return nil, err
		}
	}
	var g int64
	if err := tx.QueryRowContext(ctx, "SELECT generation FROM config_generation WHERE id = 1").Scan(&g); err != nil {
		return nil, err
	}
	if g != gen {
		return nil, fmt.Errorf("second read transaction at generation %d, not %d", g, gen)
	}
	keys, err := s.liveKeys(ctx, tx, n, "")
	if err != nil {
		return nil, err
	}
	return keys, tx.Commit()
}

// snapshotID reports whether id looks like an exported snapshot's name
// (hexadecimal groups and dashes), safe to quote into a statement.
func snapshotID(id string) bool {
	if id == "" {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'F' || c >= 'a' && c <= 'f' || c == '-') {
			return false
		}
	}
	return true
}
