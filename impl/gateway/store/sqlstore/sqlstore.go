package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Store implements store.Store over database/sql.
type Store struct {
	db   *sql.DB
	d    *Dialect
	now  func() time.Time
	log  *slog.Logger
	conn string
}

var _ store.Store = (*Store)(nil)

// New wraps an open, migrated database.
func New(db *sql.DB, d *Dialect, now func() time.Time, log *slog.Logger) *Store {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{db: db, d: d, now: now, log: log}
}

// DB exposes the handle (the scheduler shares the database).
func (s *Store) DB() *sql.DB { return s.db }

func (s *Store) Driver() string { return s.d.Name }

func (s *Store) Close() error { return s.db.Close() }

func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var one int
	if err := s.db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	return nil
}

// change describes a configuration change for the audit log. The function
// run by tx fills in the resulting revision, or marks the change as none
// when it turned out to change nothing (an idempotent repeat).
type change struct {
	action, kind, id string
	revision         int64 // 0: the resource has no revision (or is gone)
	none             bool
}

func audit(action, kind, id string) *change { return &change{action: action, kind: kind, id: id} }

// snapshot reads see one consistent state across several statements:
// PostgreSQL's default READ COMMITTED takes a new snapshot per statement,
// and a read-only SQLite transaction starts deferred, so it takes no write
// lock and still reads one WAL snapshot.
var snapshot = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}

// read runs fn in one snapshot transaction.
func (s *Store) read(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, snapshot)
	if err != nil {
		return s.d.classify(err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return s.d.classify(err)
	}
	return s.d.classify(tx.Commit())
}

// tx runs fn in a transaction. A configuration change (ch != nil) also
// bumps the config generation, appends an audit row and notifies, all in
// the same transaction: no change is visible without its audit entry.
func (s *Store) tx(ctx context.Context, ch *change, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.d.classify(err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return s.d.classify(err)
	}
	if ch != nil && !ch.none {
		var rev any
		if ch.revision != 0 {
			rev = ch.revision
		}
		if _, err := s.exec(ctx, tx, "INSERT INTO audit_log (id, at, actor, action, resource_kind, resource_id, revision) VALUES (?, ?, ?, ?, ?, ?, ?)",
			store.NewID("au"), s.d.t(s.nowT()), store.ActorFrom(ctx), ch.action, ch.kind, ch.id, rev); err != nil {
			return s.d.classify(err)
		}
		var gen int64
		if err := tx.QueryRowContext(ctx, "UPDATE config_generation SET generation = generation + 1 WHERE id = 1 RETURNING generation").Scan(&gen); err != nil {
			return s.d.classify(err)
		}
		if s.d.Notify != nil {
			if err := s.d.Notify(ctx, tx, gen); err != nil {
				return s.d.classify(err)
			}
		}
	}
	return s.d.classify(tx.Commit())
}

func (s *Store) exec(ctx context.Context, tx *sql.Tx, q string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, s.d.rebind(q), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s *Store) nowT() time.Time { return s.now().UTC().Truncate(time.Second) }

// ---------------------------------------------------------------- config

func (s *Store) ConfigGeneration(ctx context.Context) (int64, error) {
	var g int64
	err := s.db.QueryRowContext(ctx, "SELECT generation FROM config_generation WHERE id = 1").Scan(&g)
	return g, s.d.classify(err)
}

func (s *Store) LoadConfig(ctx context.Context) (*store.Config, error) {
	cfg := &store.Config{}
	err := s.read(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, "SELECT generation FROM config_generation WHERE id = 1").Scan(&cfg.Generation); err != nil {
			return err
		}
		var err error
		if cfg.Upstreams, err = s.queryUpstreams(ctx, tx, "WHERE deleted_at IS NULL"); err != nil {
			return err
		}
		if cfg.Principals, err = s.queryPrincipals(ctx, tx, ""); err != nil {
			return err
		}
		if cfg.Keys, err = s.queryKeys(ctx, tx, "WHERE revoked_at IS NULL"); err != nil {
			return err
		}
		if cfg.Chains, err = s.queryChain(ctx, tx, ""); err != nil {
			return err
		}
		cfg.Plugins, err = s.queryRegistry(ctx, tx, "")
		return err
	})
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// ------------------------------------------------------------- upstreams

const upstreamCols = `id, name, kind, base_url, enabled, warmup_enabled, warmup_dialect_plugin, credential,
	credential_kind, credential_version, spec_revision, last_apply_error, last_apply_at, last_warmup_at, created_at, updated_at,
	oauth_authorize_url, oauth_token_url, refresh_error, refresh_error_at, refresh_refused`

type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func (s *Store) queryUpstreams(ctx context.Context, q querier, where string, args ...any) ([]store.Upstream, error) {
	rows, err := q.QueryContext(ctx, s.d.rebind("SELECT "+upstreamCols+" FROM upstreams "+where+" ORDER BY created_at, id"), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Upstream{}
	for rows.Next() {
		var u store.Upstream
		var dialect, applyErr, refreshErr sql.NullString
		if err := rows.Scan(&u.ID, &u.Name, &u.Kind, &u.BaseURL, &u.Enabled, &u.WarmupEnabled, &dialect, &u.Credential,
			&u.CredentialKind, &u.CredentialVersion, &u.SpecRevision, &applyErr, timeCol{&u.Status.LastApplyAt},
			timeCol{&u.Status.LastWarmupAt}, reqTime{&u.CreatedAt}, reqTime{&u.UpdatedAt}, &u.OAuthAuthorizeURL, &u.OAuthTokenURL,
			&refreshErr, timeCol{&u.Status.RefreshErrorAt}, &u.Status.RefreshRefused); err != nil {
			return nil, err
		}
		if refreshErr.Valid {
			u.Status.RefreshError = &refreshErr.String
		}
		if dialect.Valid {
			u.WarmupDialectPlugin = &dialect.String
		}
		if applyErr.Valid {
			u.Status.LastApplyError = &applyErr.String
		}
		if len(u.Credential) == 0 {
			u.Credential = nil
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

func (s *Store) getUpstream(ctx context.Context, q querier, id string) (*store.Upstream, error) {
	us, err := s.queryUpstreams(ctx, q, "WHERE id = ? AND deleted_at IS NULL", id)
	if err != nil {
		return nil, s.d.classify(err)
	}
	if len(us) == 0 {
		return nil, store.ErrNotFound
	}
	return &us[0], nil
}

func (s *Store) GetUpstream(ctx context.Context, id string) (*store.Upstream, error) {
	return s.getUpstream(ctx, s.db, id)
}

func (s *Store) ListUpstreams(ctx context.Context) ([]store.Upstream, error) {
	us, err := s.queryUpstreams(ctx, s.db, "WHERE deleted_at IS NULL")
	return us, s.d.classify(err)
}

func (s *Store) CreateUpstream(ctx context.Context, spec store.UpstreamSpec) (*store.Upstream, error) {
	id := spec.ID
	if id == "" {
		id = store.NewID("up")
	}
	now := s.nowT()
	var out *store.Upstream
	ch := audit("create", "upstream", id)
	err := s.tx(ctx, ch, func(tx *sql.Tx) error {
		var cred any
		if spec.Credential != nil {
			cred = spec.Credential
		}
		version := 0
		if spec.Credential != nil {
			version = 1
		}
		_, err := s.exec(ctx, tx, `INSERT INTO upstreams (id, name, kind, base_url, enabled, warmup_enabled, credential,
			credential_kind, credential_version, spec_revision, created_at, updated_at, oauth_authorize_url, oauth_token_url)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)`,
			id, spec.Name, spec.Kind, spec.BaseURL, spec.Enabled, spec.WarmupEnabled, cred, spec.CredentialKind, version, s.d.t(now), s.d.t(now),
			spec.OAuthAuthorizeURL, spec.OAuthTokenURL)
		if err != nil {
			return err
		}
		if out, err = s.getUpstream(ctx, tx, id); err == nil {
			ch.revision = out.SpecRevision
		}
		return err
	})
	return out, err
}

// checkRevision distinguishes a missing row from a stale revision after an
// optimistic update touched no row.
func (s *Store) checkRevision(ctx context.Context, tx *sql.Tx, table, revCol, live, id string) error {
	var rev int64
	err := tx.QueryRowContext(ctx, s.d.rebind("SELECT "+revCol+" FROM "+table+" WHERE id = ?"+live), id).Scan(&rev)
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	if err != nil {
		return err
	}
	return store.ErrStaleRevision
}

// optimistic applies set to one row when its revision matches expect (or
// expect is AnyRevision), incrementing the revision and the updated time in
// the same statement; a miss is told apart as not found or stale.
func (s *Store) optimistic(ctx context.Context, tx *sql.Tx, table, revCol, live, id string, expect int64, set string, args []any) error {
	all := append(append([]any{}, args...), s.d.t(s.nowT()), id, expect, expect)
	n, err := s.exec(ctx, tx, "UPDATE "+table+" SET "+set+", "+revCol+" = "+revCol+" + 1, updated_at = ? "+
		"WHERE id = ?"+live+" AND (? = 0 OR "+revCol+" = ?)", all...)
	if err != nil {
		return err
	}
	if n == 0 {
		return s.checkRevision(ctx, tx, table, revCol, live, id)
	}
	return nil
}

func (s *Store) updateUpstream(ctx context.Context, id string, expect int64, set string, args ...any) (*store.Upstream, error) {
	return s.updateUpstreamChecked(ctx, id, expect, nil, set, args...)
}

func (s *Store) updateUpstreamChecked(ctx context.Context, id string, expect int64, check func(*sql.Tx) error, set string, args ...any) (*store.Upstream, error) {
	var out *store.Upstream
	ch := audit("update", "upstream", id)
	err := s.tx(ctx, ch, func(tx *sql.Tx) error {
		if check != nil {
			if err := check(tx); err != nil {
				return err
			}
		}
		if err := s.optimistic(ctx, tx, "upstreams", "spec_revision", " AND deleted_at IS NULL", id, expect, set, args); err != nil {
			return err
		}
		var err error
		if out, err = s.getUpstream(ctx, tx, id); err == nil {
			ch.revision = out.SpecRevision
		}
		return err
	})
	return out, err
}

func (s *Store) UpdateUpstream(ctx context.Context, id string, expect int64, spec store.UpstreamSpec) (*store.Upstream, error) {
	set := "name = ?, base_url = ?, enabled = ?, warmup_enabled = ?, oauth_authorize_url = ?, oauth_token_url = ?"
	args := []any{spec.Name, spec.BaseURL, spec.Enabled, spec.WarmupEnabled, spec.OAuthAuthorizeURL, spec.OAuthTokenURL}
	if spec.Credential != nil {
		set += ", credential = ?, credential_kind = ?, credential_version = credential_version + 1"
		args = append(args, spec.Credential, spec.CredentialKind)
	}
	return s.updateUpstream(ctx, id, expect, set, args...)
}

func (s *Store) PatchUpstream(ctx context.Context, id string, expect int64, p store.UpstreamPatch) (*store.Upstream, error) {
	set := "id = id"
	var args []any
	add := func(col string, v any) {
		set += ", " + col + " = ?"
		args = append(args, v)
	}
	if p.Name != nil {
		add("name", *p.Name)
	}
	if p.BaseURL != nil {
		add("base_url", *p.BaseURL)
	}
	if p.Enabled != nil {
		add("enabled", *p.Enabled)
	}
	if p.WarmupEnabled != nil {
		add("warmup_enabled", *p.WarmupEnabled)
	}
	if p.SetWarmupDialect {
		var v any
		if p.WarmupDialectPlugin != nil {
			v = *p.WarmupDialectPlugin
		}
		add("warmup_dialect_plugin", v)
	}
	var check func(*sql.Tx) error
	if p.SetWarmupDialect && p.WarmupDialectPlugin != nil {
		// The binding is checked in the update's transaction, so a plugin
		// deleted meanwhile cannot end up bound.
		check = func(tx *sql.Tx) error { return s.checkSlot(ctx, tx, *p.WarmupDialectPlugin, store.SlotWarmupDialect) }
	}
	return s.updateUpstreamChecked(ctx, id, expect, check, set, args...)
}

func (s *Store) DeleteUpstream(ctx context.Context, id string, expect int64) error {
	ch := audit("delete", "upstream", id)
	return s.tx(ctx, ch, func(tx *sql.Tx) error {
		u, err := s.getUpstream(ctx, tx, id)
		if err != nil {
			return err
		}
		if expect != store.AnyRevision && u.SpecRevision != expect {
			return store.ErrStaleRevision
		}
		ch.revision = u.SpecRevision
		// The entries are read under a share lock (PostgreSQL) so a chain
		// update still in flight is waited for and seen, and none can
		// start until this delete commits.
		chains, err := s.queryChain(ctx, tx, s.d.ForShare)
		if err != nil {
			return err
		}
		var refs []store.Reference
		for _, e := range chains {
			if configNamesUpstream(e.Config, id) {
				refs = append(refs, store.Reference{Kind: "plugin_chain_entry", ID: e.ID, Owner: e.PrincipalID})
			}
		}
		if len(refs) > 0 {
			return &store.ReferencedError{References: refs}
		}
		n, err := s.exec(ctx, tx, "UPDATE upstreams SET deleted_at = ?, updated_at = ? WHERE id = ? AND deleted_at IS NULL AND spec_revision = ?",
			s.d.t(s.nowT()), s.d.t(s.nowT()), id, u.SpecRevision)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrStaleRevision
		}
		return nil
	})
}

func configNamesUpstream(cfg json.RawMessage, id string) bool {
	var c struct {
		UpstreamID  string   `json:"upstream_id"`
		UpstreamIDs []string `json:"upstream_ids"`
	}
	if json.Unmarshal(cfg, &c) != nil {
		return false
	}
	if c.UpstreamID == id {
		return true
	}
	for _, u := range c.UpstreamIDs {
		if u == id {
			return true
		}
	}
	return false
}

// SetUpstreamStatus writes the apply columns only: a rebuild holding a
// stale read must not undo a warm-up stamp or a refresh failure written
// meanwhile by their own writers.
func (s *Store) SetUpstreamStatus(ctx context.Context, id string, st store.UpstreamStatus) error {
	var applyErr any
	if st.LastApplyError != nil {
		applyErr = *st.LastApplyError
	}
	res, err := s.db.ExecContext(ctx, s.d.rebind("UPDATE upstreams SET last_apply_error = ?, last_apply_at = ? WHERE id = ? AND deleted_at IS NULL"),
		applyErr, s.d.tp(st.LastApplyAt), id)
	if err != nil {
		return s.d.classify(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// RecordRefreshFailure writes the refresh columns only, and only while
// the failed credential version is still the stored one.
func (s *Store) RecordRefreshFailure(ctx context.Context, id string, credentialVersion int64, msg string, refused bool, at time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.d.rebind(`UPDATE upstreams SET refresh_error = ?, refresh_error_at = ?, refresh_refused = ?
		WHERE id = ? AND credential_version = ? AND deleted_at IS NULL`), msg, s.d.t(at), refused, id, credentialVersion)
	if err != nil {
		return false, s.d.classify(err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

func (s *Store) SetUpstreamCredential(ctx context.Context, id, kind string, ciphertext []byte) (*store.Upstream, error) {
	var out *store.Upstream
	ch := audit("set_credential", "upstream", id)
	err := s.tx(ctx, ch, func(tx *sql.Tx) error {
		var cred any
		if ciphertext != nil {
			cred = ciphertext
		}
		// A new credential starts with a clean refresh record.
		n, err := s.exec(ctx, tx, `UPDATE upstreams SET credential = ?, credential_kind = ?, credential_version = credential_version + 1,
			refresh_error = NULL, refresh_error_at = NULL, refresh_refused = ? WHERE id = ? AND deleted_at IS NULL`,
			cred, kind, false, id)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound
		}
		if out, err = s.getUpstream(ctx, tx, id); err == nil {
			ch.revision = out.SpecRevision
		}
		return err
	})
	return out, err
}

func (s *Store) DisableWarmupForOAuthUpstreams(ctx context.Context) (int64, error) {
	var n int64
	ch := audit("disable_oauth_warmup", "upstream", "*")
	err := s.tx(ctx, ch, func(tx *sql.Tx) error {
		var err error
		n, err = s.exec(ctx, tx, `UPDATE upstreams SET warmup_enabled = ?, spec_revision = spec_revision + 1, updated_at = ?
			WHERE kind = ? AND deleted_at IS NULL AND warmup_enabled = ?`, false, s.d.t(s.nowT()), store.KindVendorOAuth, true)
		ch.none = n == 0 // nothing to disable: no new generation, no audit row
		return err
	})
	return n, err
}

// ------------------------------------------------------------ principals

const principalCols = `id, name, kind, enabled, revision, allowed_models, default_limits, cache_keepalive, created_at, updated_at`

func (s *Store) queryPrincipals(ctx context.Context, q querier, where string, args ...any) ([]store.Principal, error) {
	rows, err := q.QueryContext(ctx, s.d.rebind("SELECT "+principalCols+" FROM principals "+where+" ORDER BY created_at, id"), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Principal{}
	for rows.Next() {
		var p store.Principal
		var models, limits string
		var ka sql.NullString
		if err := rows.Scan(&p.ID, &p.Name, &p.Kind, &p.Enabled, &p.Revision, &models, &limits, &ka,
			reqTime{&p.CreatedAt}, reqTime{&p.UpdatedAt}); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(models), &p.AllowedModels); err != nil {
			return nil, fmt.Errorf("principal %s allowed_models: %w", p.ID, err)
		}
		if p.AllowedModels == nil {
			p.AllowedModels = []string{}
		}
		p.DefaultLimits = json.RawMessage(limits)
		if ka.Valid && ka.String != "" && ka.String != "null" {
			p.CacheKeepalive = json.RawMessage(ka.String)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

func (s *Store) getPrincipal(ctx context.Context, q querier, id string) (*store.Principal, error) {
	ps, err := s.queryPrincipals(ctx, q, "WHERE id = ?", id)
	if err != nil {
		return nil, s.d.classify(err)
	}
	if len(ps) == 0 {
		return nil, store.ErrNotFound
	}
	return &ps[0], nil
}

func (s *Store) GetPrincipal(ctx context.Context, id string) (*store.Principal, error) {
	return s.getPrincipal(ctx, s.db, id)
}

func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	ps, err := s.queryPrincipals(ctx, s.db, "")
	return ps, s.d.classify(err)
}

func jsonModels(m []string) string {
	if m == nil {
		m = []string{}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func jsonLimits(l json.RawMessage) string {
	if len(l) == 0 || string(l) == "null" {
		return "[]"
	}
	return string(l)
}

func jsonOptional(v json.RawMessage) any {
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return string(v)
}

func (s *Store) CreatePrincipal(ctx context.Context, p store.Principal) (*store.Principal, error) {
	id := p.ID
	if id == "" {
		id = store.NewID("pr")
	}
	now := s.nowT()
	var out *store.Principal
	ch := audit("create", "principal", id)
	err := s.tx(ctx, ch, func(tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, `INSERT INTO principals (id, name, kind, enabled, revision, allowed_models, default_limits,
			cache_keepalive, created_at, updated_at) VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?)`,
			id, p.Name, p.Kind, p.Enabled, jsonModels(p.AllowedModels), jsonLimits(p.DefaultLimits),
			jsonOptional(p.CacheKeepalive), s.d.t(now), s.d.t(now)); err != nil {
			return err
		}
		// Every principal starts with the built-in router at order 0.
		if _, err := s.exec(ctx, tx, `INSERT INTO plugin_chain_entries (id, principal_id, slot, builtin, wasm_registry_id,
			config, position, enabled, revision, created_at, updated_at) VALUES (?, ?, ?, ?, NULL, '{}', 0, ?, 1, ?, ?)`,
			store.NewID("ce"), id, store.SlotRouter, store.BuiltinSubscriptionPreference, true, s.d.t(now), s.d.t(now)); err != nil {
			return err
		}
		var err error
		if out, err = s.getPrincipal(ctx, tx, id); err == nil {
			ch.revision = out.Revision
		}
		return err
	})
	return out, err
}

func (s *Store) updatePrincipal(ctx context.Context, id string, expect int64, set string, args ...any) (*store.Principal, error) {
	var out *store.Principal
	ch := audit("update", "principal", id)
	err := s.tx(ctx, ch, func(tx *sql.Tx) error {
		if err := s.optimistic(ctx, tx, "principals", "revision", "", id, expect, set, args); err != nil {
			return err
		}
		var err error
		if out, err = s.getPrincipal(ctx, tx, id); err == nil {
			ch.revision = out.Revision
		}
		return err
	})
	return out, err
}

func (s *Store) UpdatePrincipal(ctx context.Context, id string, expect int64, p store.Principal) (*store.Principal, error) {
	return s.updatePrincipal(ctx, id, expect, "name = ?, kind = ?, allowed_models = ?, default_limits = ?, cache_keepalive = ?",
		p.Name, p.Kind, jsonModels(p.AllowedModels), jsonLimits(p.DefaultLimits), jsonOptional(p.CacheKeepalive))
}

func (s *Store) PatchPrincipal(ctx context.Context, id string, expect int64, p store.PrincipalPatch) (*store.Principal, error) {
	set := "id = id"
	var args []any
	add := func(col string, v any) {
		set += ", " + col + " = ?"
		args = append(args, v)
	}
	if p.Name != nil {
		add("name", *p.Name)
	}
	if p.Enabled != nil {
		add("enabled", *p.Enabled)
	}
	if p.AllowedModels != nil {
		add("allowed_models", jsonModels(*p.AllowedModels))
	}
	if p.DefaultLimits != nil {
		add("default_limits", jsonLimits(*p.DefaultLimits))
	}
	if p.SetCacheKeepalive {
		add("cache_keepalive", jsonOptional(p.CacheKeepalive))
	}
	return s.updatePrincipal(ctx, id, expect, set, args...)
}

func (s *Store) DeletePrincipal(ctx context.Context, id string, expect int64) error {
	return s.tx(ctx, audit("delete", "principal", id), func(tx *sql.Tx) error {
		// Children first: SQLite enforces ON DELETE CASCADE only with
		// foreign keys on, and explicit deletes keep both drivers alike.
		n, err := s.exec(ctx, tx, "DELETE FROM principals WHERE id = ? AND (? = 0 OR revision = ?)", id, expect, expect)
		if err != nil {
			return err
		}
		if n == 0 {
			return s.checkRevision(ctx, tx, "principals", "revision", "", id)
		}
		if _, err := s.exec(ctx, tx, "DELETE FROM principal_keys WHERE principal_id = ?", id); err != nil {
			return err
		}
		_, err = s.exec(ctx, tx, "DELETE FROM plugin_chain_entries WHERE principal_id = ?", id)
		return err
	})
}

// ------------------------------------------------------------------ keys

func (s *Store) queryKeys(ctx context.Context, q querier, where string, args ...any) ([]store.Key, error) {
	rows, err := q.QueryContext(ctx, s.d.rebind("SELECT id, principal_id, name, prefix, hash, created_at, revoked_at FROM principal_keys "+where+" ORDER BY created_at, id"), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.Key{}
	for rows.Next() {
		var k store.Key
		if err := rows.Scan(&k.ID, &k.PrincipalID, &k.Name, &k.Prefix, &k.Hash, reqTime{&k.CreatedAt}, timeCol{&k.RevokedAt}); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}

func (s *Store) CreateKey(ctx context.Context, k store.Key) (*store.Key, error) {
	if k.ID == "" {
		k.ID = store.NewID("key")
	}
	k.CreatedAt = s.nowT()
	k.RevokedAt = nil
	err := s.tx(ctx, audit("issue", "key", k.ID), func(tx *sql.Tx) error {
		if _, err := s.getPrincipal(ctx, tx, k.PrincipalID); err != nil {
			return err
		}
		_, err := s.exec(ctx, tx, "INSERT INTO principal_keys (id, principal_id, name, prefix, hash, created_at) VALUES (?, ?, ?, ?, ?, ?)",
			k.ID, k.PrincipalID, k.Name, k.Prefix, k.Hash, s.d.t(k.CreatedAt))
		if err != nil && s.d.IsForeignKey != nil && s.d.IsForeignKey(err) {
			// The principal was deleted after the check above.
			return fmt.Errorf("principal %s: %w", k.PrincipalID, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &k, nil
}

func (s *Store) ListKeys(ctx context.Context, principalID string) ([]store.Key, error) {
	if _, err := s.GetPrincipal(ctx, principalID); err != nil {
		return nil, err
	}
	ks, err := s.queryKeys(ctx, s.db, "WHERE principal_id = ?", principalID)
	return ks, s.d.classify(err)
}

func (s *Store) RevokeKey(ctx context.Context, principalID, keyID string) (*store.Key, error) {
	var out *store.Key
	ch := audit("revoke", "key", keyID)
	err := s.tx(ctx, ch, func(tx *sql.Tx) error {
		n, err := s.exec(ctx, tx, "UPDATE principal_keys SET revoked_at = ? WHERE id = ? AND principal_id = ? AND revoked_at IS NULL",
			s.d.t(s.nowT()), keyID, principalID)
		if err != nil {
			return err
		}
		ch.none = n == 0 // already revoked (or missing): not a change
		ks, err := s.queryKeys(ctx, tx, "WHERE id = ? AND principal_id = ?", keyID, principalID)
		if err != nil {
			return err
		}
		if len(ks) == 0 {
			return store.ErrNotFound
		}
		out = &ks[0]
		return nil
	})
	return out, err
}

// ----------------------------------------------------------------- chain

func (s *Store) queryChain(ctx context.Context, q querier, where string, args ...any) ([]store.ChainEntry, error) {
	rows, err := q.QueryContext(ctx, s.d.rebind(`SELECT id, principal_id, slot, builtin, wasm_registry_id, config, position, enabled,
		revision, created_at, updated_at FROM plugin_chain_entries `+where), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.ChainEntry{}
	for rows.Next() {
		var e store.ChainEntry
		var builtin, wasm sql.NullString
		var cfg string
		if err := rows.Scan(&e.ID, &e.PrincipalID, &e.Slot, &builtin, &wasm, &cfg, &e.Position, &e.Enabled, &e.Revision,
			reqTime{&e.CreatedAt}, reqTime{&e.UpdatedAt}); err != nil {
			return nil, err
		}
		if builtin.Valid {
			e.Builtin = &builtin.String
		}
		if wasm.Valid {
			e.WasmRegistryID = &wasm.String
		}
		e.Config = json.RawMessage(cfg)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.PrincipalID != b.PrincipalID {
			return a.PrincipalID < b.PrincipalID
		}
		if a.Slot != b.Slot {
			return a.Slot < b.Slot
		}
		if a.Position != b.Position {
			return a.Position < b.Position
		}
		return a.ID < b.ID
	})
	return out, nil
}

func (s *Store) ListChain(ctx context.Context, principalID string) ([]store.ChainEntry, error) {
	if _, err := s.GetPrincipal(ctx, principalID); err != nil {
		return nil, err
	}
	es, err := s.queryChain(ctx, s.db, "WHERE principal_id = ?", principalID)
	return es, s.d.classify(err)
}

func (s *Store) UpdateChainEntry(ctx context.Context, id string, expect int64, config json.RawMessage, enabled bool) (*store.ChainEntry, error) {
	if len(config) == 0 {
		config = json.RawMessage("{}")
	}
	var out *store.ChainEntry
	ch := audit("update", "plugin_chain_entry", id)
	err := s.tx(ctx, ch, func(tx *sql.Tx) error {
		if err := s.optimistic(ctx, tx, "plugin_chain_entries", "revision", "", id, expect, "config = ?, enabled = ?", []any{string(config), enabled}); err != nil {
			return err
		}
		var err error
		if out, err = s.getChainEntry(ctx, tx, id); err == nil {
			ch.revision = out.Revision
		}
		return err
	})
	return out, err
}

// ---------------------------------------------------------------- events

func (s *Store) InsertRequestEvents(ctx context.Context, events []store.RequestEvent) error {
	if len(events) == 0 {
		return nil
	}
	return s.tx(ctx, nil, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, s.d.rebind(`INSERT INTO request_events (id, at, principal_id, key_id, upstream_id, model, stream,
			status, error_type, input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens, duration_ms)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`))
		if err != nil {
			return err
		}
		defer stmt.Close()
		// The newest use of each (principal, upstream) pair feeds
		// upstream_affinity, upserted in the same transaction.
		latest := map[[2]string]time.Time{}
		for _, e := range events {
			if e.UpstreamID != "" && e.PrincipalID != "" {
				k := [2]string{e.PrincipalID, e.UpstreamID}
				if e.At.After(latest[k]) {
					latest[k] = e.At
				}
			}
		}
		for k, at := range latest {
			if _, err := s.exec(ctx, tx, `INSERT INTO upstream_affinity (principal_id, upstream_id, last_used_at) VALUES (?, ?, ?)
				ON CONFLICT (principal_id, upstream_id) DO UPDATE SET last_used_at = excluded.last_used_at
				WHERE upstream_affinity.last_used_at < excluded.last_used_at`, k[0], k[1], s.d.t(at)); err != nil {
				return err
			}
		}
		for _, e := range events {
			if e.ID == "" {
				e.ID = store.NewID("ev")
			}
			if _, err := stmt.ExecContext(ctx, e.ID, s.d.t(e.At), e.PrincipalID, e.KeyID, e.UpstreamID, e.Model, e.Stream,
				e.Status, e.ErrorType, e.InputTokens, e.OutputTokens, e.CacheCreationInputTokens, e.CacheReadInputTokens,
				e.DurationMillis); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *Store) ListRequestEvents(ctx context.Context, since time.Time, limit int) ([]store.RequestEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	return s.queryRequestEvents(ctx, `WHERE at >= ?`, s.d.t(since), limit)
}

// queryRequestEvents reads request events matching cond (a WHERE clause
// with ? placeholders, or empty), newest first, at most the last argument.
func (s *Store) queryRequestEvents(ctx context.Context, cond string, args ...any) ([]store.RequestEvent, error) {
	rows, err := s.db.QueryContext(ctx, s.d.rebind(`SELECT id, at, principal_id, key_id, upstream_id, model, stream, status, error_type,
		input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens, duration_ms
		FROM request_events `+cond+` ORDER BY at DESC, id DESC LIMIT ?`), args...)
	if err != nil {
		return nil, s.d.classify(err)
	}
	defer rows.Close()
	out := []store.RequestEvent{}
	for rows.Next() {
		var e store.RequestEvent
		if err := rows.Scan(&e.ID, reqTime{&e.At}, &e.PrincipalID, &e.KeyID, &e.UpstreamID, &e.Model, &e.Stream, &e.Status,
			&e.ErrorType, &e.InputTokens, &e.OutputTokens, &e.CacheCreationInputTokens, &e.CacheReadInputTokens,
			&e.DurationMillis); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, s.d.classify(rows.Err())
}

// ---------------------------------------------------------- maintenance

func (s *Store) RollupUsage(ctx context.Context, from, to time.Time) (int64, error) {
	from = from.UTC().Truncate(time.Hour)
	to = to.UTC().Truncate(time.Hour)
	if !to.After(from) {
		to = from.Add(time.Hour)
	}
	var n int64
	err := s.tx(ctx, nil, func(tx *sql.Tx) error {
		if _, err := s.exec(ctx, tx, "DELETE FROM usage_rollups WHERE bucket_start >= ? AND bucket_start < ?", s.d.t(from), s.d.t(to)); err != nil {
			return err
		}
		var err error
		n, err = s.exec(ctx, tx, `INSERT INTO usage_rollups (bucket_start, principal_id, upstream_id, model, requests, errors,
			input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens)
			SELECT `+s.d.HourBucket+`, principal_id, upstream_id, model, COUNT(*), SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END),
			SUM(input_tokens), SUM(output_tokens), SUM(cache_creation_input_tokens), SUM(cache_read_input_tokens)
			FROM request_events WHERE at >= ? AND at < ?
			GROUP BY `+s.d.HourBucket+`, principal_id, upstream_id, model`, s.d.t(from), s.d.t(to))
		return err
	})
	return n, err
}

func (s *Store) ListUsageRollups(ctx context.Context, since time.Time) ([]store.UsageRollup, error) {
	rows, err := s.db.QueryContext(ctx, s.d.rebind(`SELECT bucket_start, principal_id, upstream_id, model, requests, errors, input_tokens,
		output_tokens, cache_creation_input_tokens, cache_read_input_tokens FROM usage_rollups WHERE bucket_start >= ?
		ORDER BY bucket_start, principal_id, upstream_id, model`), s.d.t(since.UTC().Truncate(time.Hour)))
	if err != nil {
		return nil, s.d.classify(err)
	}
	defer rows.Close()
	out := []store.UsageRollup{}
	for rows.Next() {
		var r store.UsageRollup
		if err := rows.Scan(reqTime{&r.BucketStart}, &r.PrincipalID, &r.UpstreamID, &r.Model, &r.Requests, &r.Errors,
			&r.InputTokens, &r.OutputTokens, &r.CacheCreationInputTokens, &r.CacheReadInputTokens); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, s.d.classify(rows.Err())
}

var pruneColumn = map[string]string{"request_events": "at", "audit_log": "at", "upstream_affinity": "last_used_at"}

func (s *Store) Prune(ctx context.Context, table string, before time.Time) (int64, error) {
	col, ok := pruneColumn[table]
	if !ok {
		return 0, fmt.Errorf("prune: %q is not prunable", table)
	}
	res, err := s.db.ExecContext(ctx, s.d.rebind("DELETE FROM "+table+" WHERE "+col+" < ?"), s.d.t(before))
	if err != nil {
		return 0, s.d.classify(err)
	}
	return res.RowsAffected()
}

// ------------------------------------------------------------- metadata

func (s *Store) SetUpstreamModels(ctx context.Context, upstreamID string, models []store.UpstreamModel) error {
	// Upserts, not delete-then-insert: two refreshes running at once (a late
	// tick overlapping the next) must both succeed and converge.
	return s.tx(ctx, nil, func(tx *sql.Tx) error {
		keep := make([]any, 0, len(models)+1)
		keep = append(keep, upstreamID)
		marks := make([]string, 0, len(models))
		for _, m := range models {
			if _, err := s.exec(ctx, tx, `INSERT INTO upstream_models (upstream_id, model_id, display_name, refreshed_at) VALUES (?, ?, ?, ?)
				ON CONFLICT (upstream_id, model_id) DO UPDATE SET display_name = excluded.display_name, refreshed_at = excluded.refreshed_at`,
				upstreamID, m.ModelID, m.DisplayName, s.d.t(m.RefreshedAt)); err != nil {
				return err
			}
			keep = append(keep, m.ModelID)
			marks = append(marks, "?")
		}
		q := "DELETE FROM upstream_models WHERE upstream_id = ?"
		if len(marks) > 0 {
			q += " AND model_id NOT IN (" + strings.Join(marks, ", ") + ")"
		}
		_, err := s.exec(ctx, tx, q, keep...)
		return err
	})
}

func (s *Store) ListUpstreamModels(ctx context.Context, upstreamID string) ([]store.UpstreamModel, error) {
	rows, err := s.db.QueryContext(ctx, s.d.rebind("SELECT model_id, display_name, refreshed_at FROM upstream_models WHERE upstream_id = ? ORDER BY model_id"), upstreamID)
	if err != nil {
		return nil, s.d.classify(err)
	}
	defer rows.Close()
	out := []store.UpstreamModel{}
	for rows.Next() {
		var m store.UpstreamModel
		if err := rows.Scan(&m.ModelID, &m.DisplayName, reqTime{&m.RefreshedAt}); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, s.d.classify(rows.Err())
}

func (s *Store) GetPriceCatalog(ctx context.Context) (*store.PriceCatalog, error) {
	var c store.PriceCatalog
	var body string
	err := s.db.QueryRowContext(ctx, "SELECT version, etag, body, fetched_at FROM price_catalog WHERE id = 1").Scan(&c.Version, &c.ETag, &body, reqTime{&c.FetchedAt})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, s.d.classify(err)
	}
	c.Body = json.RawMessage(body)
	return &c, nil
}

func (s *Store) PutPriceCatalog(ctx context.Context, c store.PriceCatalog) (bool, error) {
	// One atomic upsert that only writes a different version: of several
	// concurrent fetches of one version exactly one reports the change.
	res, err := s.db.ExecContext(ctx, s.d.rebind(`INSERT INTO price_catalog (id, version, etag, body, fetched_at) VALUES (1, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET version = excluded.version, etag = excluded.etag, body = excluded.body, fetched_at = excluded.fetched_at
		WHERE price_catalog.version <> excluded.version`), c.Version, c.ETag, string(c.Body), s.d.t(c.FetchedAt))
	if err != nil {
		return false, s.d.classify(err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

func (s *Store) ListAudit(ctx context.Context, since time.Time, limit int) ([]store.AuditEntry, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.db.QueryContext(ctx, s.d.rebind("SELECT id, at, actor, action, resource_kind, resource_id FROM audit_log WHERE at >= ? ORDER BY at DESC, id DESC LIMIT ?"), s.d.t(since), limit)
	if err != nil {
		return nil, s.d.classify(err)
	}
	defer rows.Close()
	out := []store.AuditEntry{}
	for rows.Next() {
		var e store.AuditEntry
		if err := rows.Scan(&e.ID, reqTime{&e.At}, &e.Actor, &e.Action, &e.ResourceKind, &e.ResourceID); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, s.d.classify(rows.Err())
}
