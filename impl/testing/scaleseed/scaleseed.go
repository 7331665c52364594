// Package scaleseed fills a gateway store with a configuration of a given
// size (principals, keys, upstreams, custom router chains) for benchmarks
// of the snapshot rebuild and of replica propagation at scale. It writes
// rows in bulk, in one transaction, straight through the store's database:
// tens of thousands of admin-API creates would take minutes on PostgreSQL
// and measure nothing of interest.
package scaleseed

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Sizes of the configuration.
type Sizes struct {
	Principals int
	Keys       int // spread evenly over the principals
	Upstreams  int
	// Chains is how many principals get a custom router chain: a pinned
	// built-in router entry in front of the default one.
	Chains int
}

// Scale is the size a snapshot rebuild must handle in 50 ms
// (docs/benchmarks.md, "Snapshot rebuild at scale").
var Scale = Sizes{Principals: 10000, Keys: 50000, Upstreams: 1000, Chains: 100}

// Sealer seals an upstream credential bound to its upstream (secret.Box).
type Sealer interface {
	Seal(plaintext, associatedData []byte) ([]byte, error)
}

// Options of one seeding.
type Options struct {
	// Dialect is the store's driver name: "sqlite" or "postgres".
	Dialect string
	// BaseURL and APIKey are every upstream's; the key is sealed with Seal.
	BaseURL, APIKey string
	Seal            Sealer
	// Prefix keeps names unique when one store is seeded twice.
	Prefix string
	Now    time.Time
}

// KeyPlaintext is the plaintext of key i of a seeding with prefix, so a
// benchmark can send requests with any seeded key.
func KeyPlaintext(prefix string, i int) string {
	return "sk-seed-" + prefix + "-" + strconv.Itoa(i)
}

// Seed inserts the rows and bumps the configuration generation once.
func Seed(ctx context.Context, db *sql.DB, sz Sizes, o Options) error {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	pg := o.Dialect == "postgres"
	if !pg && o.Dialect != "sqlite" {
		return fmt.Errorf("scaleseed: unknown dialect %q", o.Dialect)
	}
	var t any = o.Now.Unix()
	if pg {
		t = o.Now.UTC().Truncate(time.Microsecond)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	ins := inserter{ctx: ctx, tx: tx, pg: pg}

	const upCols = "id, name, kind, base_url, enabled, warmup_enabled, credential, credential_kind, spec_revision, created_at, updated_at"
	upIDs := make([]string, sz.Upstreams)
	for i := range upIDs {
		id := fmt.Sprintf("up_seed%s_%d", o.Prefix, i)
		upIDs[i] = id
		var ct []byte
		if o.Seal != nil {
			if ct, err = o.Seal.Seal([]byte(o.APIKey), credential.AD(id, store.KindVendorAPIKey, o.BaseURL, "")); err != nil {
				return err
			}
		}
		ins.add(id, fmt.Sprintf("seed%s-%d", o.Prefix, i), store.KindVendorAPIKey, o.BaseURL, true, false, ct, credential.APIKey, 1, t, t)
		if err := ins.flushAt(upCols, "upstreams"); err != nil {
			return err
		}
	}
	if err := ins.flush("upstreams", upCols); err != nil {
		return err
	}

	const prCols = "id, name, kind, enabled, revision, allowed_models, default_limits, created_at, updated_at"
	models := `["*"]`
	prIDs := make([]string, sz.Principals)
	for i := range prIDs {
		id := fmt.Sprintf("pr_seed%s_%d", o.Prefix, i)
		prIDs[i] = id
		ins.add(id, fmt.Sprintf("seed%s-%d", o.Prefix, i), "machine", true, 1, models, "[]", t, t)
		if err := ins.flushAt(prCols, "principals"); err != nil {
			return err
		}
	}
	if err := ins.flush("principals", prCols); err != nil {
		return err
	}

	// Every principal has the built-in router at position 0, as
	// CreatePrincipal makes it; Chains of them a pinned one before it.
	const chainCols = "id, principal_id, slot, builtin, config, position, enabled, revision, created_at, updated_at"
	for i, p := range prIDs {
		ins.add(fmt.Sprintf("ce_seed%s_%d", o.Prefix, i), p, store.SlotRouter, store.BuiltinSubscriptionPreference, "{}", 0, true, 1, t, t)
		if err := ins.flushAt(chainCols, "plugin_chain_entries"); err != nil {
			return err
		}
	}
	for i := 0; i < sz.Chains && len(prIDs) > 0 && len(upIDs) > 0; i++ {
		pin, _ := json.Marshal(map[string]any{"upstream_ids": []string{upIDs[i%len(upIDs)], upIDs[(i+1)%len(upIDs)]}})
		ins.add(fmt.Sprintf("ce_seedpin%s_%d", o.Prefix, i), prIDs[i%len(prIDs)], store.SlotRouter, store.BuiltinSubscriptionPreference, string(pin), -1, true, 1, t, t)
	}
	if err := ins.flush("plugin_chain_entries", chainCols); err != nil {
		return err
	}

	const keyCols = "id, principal_id, name, prefix, hash, created_at"
	for i := 0; i < sz.Keys && len(prIDs) > 0; i++ {
		pt := KeyPlaintext(o.Prefix, i)
		h := sha256.Sum256([]byte(pt))
		ins.add(fmt.Sprintf("key_seed%s_%d", o.Prefix, i), prIDs[i%len(prIDs)], "seed", pt[:min(len(pt), 12)], h[:], t)
		if err := ins.flushAt(keyCols, "principal_keys"); err != nil {
			return err
		}
	}
	if err := ins.flush("principal_keys", keyCols); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE config_generation SET generation = generation + 1 WHERE id = 1"); err != nil {
		return err
	}
	return tx.Commit()
}

// inserter batches rows into multi-row INSERTs.
type inserter struct {
	ctx  context.Context
	tx   *sql.Tx
	pg   bool
	rows int
	args []any
}

// batch rows per INSERT: under both drivers' parameter limits.
const batch = 500

func (in *inserter) add(vals ...any) {
	in.args = append(in.args, vals...)
	in.rows++
}

// flushAt flushes when a batch is full.
func (in *inserter) flushAt(cols, table string) error {
	if in.rows < batch {
		return nil
	}
	return in.flush(table, cols)
}

func (in *inserter) flush(table, cols string) error {
	if in.rows == 0 {
		return nil
	}
	per := len(in.args) / in.rows
	var b strings.Builder
	b.WriteString("INSERT INTO " + table + " (" + cols + ") VALUES ")
	n := 0
	for r := 0; r < in.rows; r++ {
		if r > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for c := 0; c < per; c++ {
			if c > 0 {
				b.WriteByte(',')
			}
			n++
			if in.pg {
				b.WriteString("$" + strconv.Itoa(n))
			} else {
				b.WriteByte('?')
			}
		}
		b.WriteByte(')')
	}
	_, err := in.tx.ExecContext(in.ctx, b.String(), in.args...)
	in.rows, in.args = 0, in.args[:0]
	if err != nil {
		return fmt.Errorf("seed %s: %w", table, err)
	}
	return nil
}
