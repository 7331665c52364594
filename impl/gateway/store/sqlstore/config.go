package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	err := s.pool.QueryRowContext(ctx, generationQuery).Scan(&g)
	return g, s.d.classify(err)
}

// LoadConfig reads the whole configuration as of one generation. The keys
// and the chain entries, most of the rows, are read on connections of
// their own at the same time as the rest, when the store can show that
// every read sees one state (beside).
func (s *Store) LoadConfig(ctx context.Context) (*store.Config, error) {
	cfg := &store.Config{}
	hint := s.loaded.Load()
	if hint == nil {
		hint = &configSizes{}
	}
	// Only what the request path needs of a key, in no order: the
	// snapshot hashes them into a map, and sorting and decoding every
	// column of 50,000 rows was most of a rebuild at scale.
	var keyParts [2][]store.Key
	readKeys := func(part, n int, where string, args ...any) func(querier) error {
		return func(tx querier) (err error) {
			keyParts[part], err = s.fullKeys(ctx, tx, n, where, args...)
			return err
		}
	}
	readChains := func(tx querier) (err error) {
		cfg.Chains, err = s.queryChainSized(ctx, tx, chainJoin, grown(hint.chains), "")
		return err
	}
	readPrincipals := func(tx querier) (err error) {
		var pc principalScan
		cfg.Principals, err = fullList(ctx, s, tx, principalJoin, pc.scan, grown(hint.principals), principalTable.sel, "")
		return err
	}
	err := s.read(ctx, func(tx *txn) error {
		if err := tx.QueryRowContext(ctx, generationQuery).Scan(&cfg.Generation); err != nil {
			return err
		}
		// Read beside the rest when it can be, else in its transaction;
		// the keys in two halves where rows have a storage order.
		reads := []func(querier) error{readKeys(0, grown(hint.keys), ""), readChains}
		// With a native row reader (on a connection of their own only),
		// the principals too.
		beside := s.d.RawQuery != nil
		if beside {
			reads = append(reads, readPrincipals)
		}
		if s.d.RowID != "" {
			var last int64
			if err := tx.QueryRowContext(ctx, "SELECT coalesce(max("+s.d.RowID+"), 0) FROM principal_keys").Scan(&last); err != nil {
				return err
			}
			// The halves cover every row whatever the middle: a key
			// issued since is not in this generation's state. The first
			// has room for the second, appended to it.
			reads[0] = readKeys(0, grown(hint.keys), "AND "+s.d.RowID+" <= ?", last/2)
			reads = append(reads, readKeys(1, grown(hint.keys/2), "AND "+s.d.RowID+" > ?", last/2))
		}
		aside := s.beside(ctx, tx, cfg.Generation, reads...)
		defer aside.stop()
		var err error
		// No ORDER BY: the rows are sorted here, where ties on the created
		// time are broken bytewise by id on both drivers (PostgreSQL's
		// collation may order ids otherwise, and sorting 10,000 principals
		// by it took the server longer than reading them), so a
		// configuration a delta was applied to equals a full load.
		if cfg.Upstreams, err = listSized(ctx, s.d, tx, scanUpstream, grown(hint.upstreams), upstreamTable.sel+"WHERE deleted_at IS NULL"); err != nil {
			return err
		}
		if !beside {
			if err := readPrincipals(tx); err != nil {
				return err
			}
		}
		sortRows(cfg.Upstreams, store.CompareUpstreams)
		if cfg.Plugins, err = registryTable.list(ctx, s.d, tx, ""); err != nil {
			return err
		}
		// What could not be read beside is read here.
		for i, err := range aside.wait() {
			if err == nil {
				besideUsed.Add(1)
				continue
			}
			if err := reads[i](tx); err != nil {
				return err
			}
		}
		sortRows(cfg.Principals, store.ComparePrincipals)
		return nil
	})
	if err != nil {
		return nil, err
	}
	cfg.Keys = append(keyParts[0], keyParts[1]...)
	s.loaded.Store(&configSizes{upstreams: len(cfg.Upstreams), principals: len(cfg.Principals), keys: len(cfg.Keys), chains: len(cfg.Chains)})
	return cfg, nil
}

// besideReads are reads running in transactions of their own.
type besideReads struct {
	wg     sync.WaitGroup
	errs   []error
	cancel context.CancelFunc
	// release gives up the store's besideMu, when these reads took it.
	release func()
}

// errNotBeside: no transaction of its own was started for the read.
var errNotBeside = errors.New("no read transaction beside")

// besideHook, when set (tests), runs before each transaction beside
// begins.
var besideHook func()

// besideUsed counts the reads done in a transaction beside (tests).
var besideUsed atomic.Int64

// wait returns, for each read, nil when it was done beside, or why not
// (the caller then does it in its own transaction).
func (b *besideReads) wait() []error {
	b.wg.Wait()
	return b.errs
}

// stop cancels the reads still running and waits for them, so none
// outlives the transaction they share a state with; then the next full
// read may read beside again (released here, not by a goroutine, so a
// read right after this one finds it free).
func (b *besideReads) stop() {
	b.cancel()
	b.wg.Wait()
	if b.release != nil {
		b.release()
		b.release = nil
	}
}

// beside starts each read in a read-only transaction of its own, on
// another connection, while tx, whose first statement read generation gen,
// reads the rest. All of them must see one state:
//   - where the dialect can share a snapshot (PostgreSQL exports tx's and
//     the others import it), they see the very same one;
//   - otherwise (SQLite: each WAL read transaction has its own) each other
//     transaction reads the generation first as well, and its read is used
//     only if it equals gen. Every configuration change bumps the
//     generation in its own transaction, so equal generations are the
//     same configuration rows.
//
// It starts nothing when the pool has a single connection (in-memory
// SQLite) or another full read is using more than one; the caller then
// does every read in tx.
func (s *Store) beside(ctx context.Context, tx *txn, gen int64, reads ...func(querier) error) *besideReads {
	ctx, cancel := context.WithCancel(ctx)
	b := &besideReads{errs: make([]error, len(reads)), cancel: cancel}
	none := func(err error) *besideReads {
		for i := range b.errs {
			b.errs[i] = err
		}
		return b
	}
	if s.db.Stats().MaxOpenConnections == 1 || !s.besideMu.TryLock() {
		return none(errNotBeside)
	}
	var snap string
	if s.d.ExportSnapshot != "" {
		if err := tx.QueryRowContext(ctx, s.d.ExportSnapshot).Scan(&snap); err != nil || !snapshotID(snap) {
			s.besideMu.Unlock()
			return none(fmt.Errorf("export snapshot %q: %v", snap, err))
		}
	}
	b.release = s.besideMu.Unlock
	b.wg.Add(len(reads))
	for i, read := range reads {
		go func() {
			defer b.wg.Done()
			if besideHook != nil {
				besideHook()
			}
			b.errs[i] = s.readBeside(ctx, snap, gen, read)
		}()
	}
	return b
}

// readBeside runs read in a read-only transaction that sees snapshot snap
// (when not empty) and must be at generation gen.
func (s *Store) readBeside(ctx context.Context, snap string, gen int64, read func(querier) error) error {
	// On a connection of its own where the read may reach it through
	// RawQuery.
	tx, err := s.begin(ctx, snapshot, s.d.RawQuery != nil)
	if err != nil {
		return err
	}
	defer s.end(ctx, tx)
	if snap != "" {
		// A utility statement: no parameters; snapshotID vetted the id.
		// Each text is new, so it is never kept prepared.
		if _, err := tx.Tx.ExecContext(ctx, fmt.Sprintf(s.d.ImportSnapshot, snap)); err != nil {
			return err
		}
	}
	var g int64
	if err := tx.QueryRowContext(ctx, generationQuery).Scan(&g); err != nil {
		return err
	}
	if g != gen {
		return fmt.Errorf("read transaction beside at generation %d, not %d", g, gen)
	}
	if err := read(tx); err != nil {
		return err
	}
	return tx.Commit()
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
