package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

const upstreamCols = `id, name, kind, base_url, enabled, warmup_enabled, warmup_dialect_plugin, credential,
	credential_kind, credential_version, spec_revision, last_apply_error, last_apply_at, last_warmup_at, created_at, updated_at,
	oauth_authorize_url, oauth_token_url, refresh_error, refresh_error_at, refresh_refused, weight,
	max_utilization_5h, max_utilization_7d, cloud, max_in_flight`

func scanUpstream(r scanner, u *store.Upstream) error {
	var dialect, applyErr, refreshErr sql.NullString
	var cloud string
	if err := r.Scan(&u.ID, &u.Name, &u.Kind, &u.BaseURL, &u.Enabled, &u.WarmupEnabled, &dialect, &u.Credential,
		&u.CredentialKind, &u.CredentialVersion, &u.SpecRevision, &applyErr, timeCol{&u.Status.LastApplyAt},
		timeCol{&u.Status.LastWarmupAt}, reqTime{&u.CreatedAt}, reqTime{&u.UpdatedAt}, &u.OAuthAuthorizeURL, &u.OAuthTokenURL,
		&refreshErr, timeCol{&u.Status.RefreshErrorAt}, &u.Status.RefreshRefused, &u.Weight,
		&u.MaxUtilization5h, &u.MaxUtilization7d, &cloud, &u.MaxInFlight); err != nil {
		return err
	}
	if cloud != "" {
		if err := json.Unmarshal([]byte(cloud), &u.Cloud); err != nil {
			return err
		}
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
	return nil
}

var upstreamTable = &table[store.Upstream]{
	sel: "SELECT " + upstreamCols + " FROM upstreams ", byID: "WHERE id = ? AND deleted_at IS NULL", order: " ORDER BY created_at, id",
	scan: scanUpstream, revision: func(u *store.Upstream) int64 { return u.SpecRevision },
}

func (s *Store) GetUpstream(ctx context.Context, id string) (*store.Upstream, error) {
	u, err := upstreamTable.get(ctx, s.d, s.pool, id)
	return u, s.d.classify(err)
}

func (s *Store) ListUpstreams(ctx context.Context) ([]store.Upstream, error) {
	us, err := upstreamTable.list(ctx, s.d, s.pool, "WHERE deleted_at IS NULL")
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
	ch.touch(changeUpstream, id)
	err := s.tx(ctx, ch, func(tx *txn) error {
		var cred any
		if spec.Credential != nil {
			cred = spec.Credential
		}
		version := 0
		if spec.Credential != nil {
			version = 1
		}
		weight := store.DefaultWeight
		if spec.Weight != nil {
			weight = *spec.Weight
		}
		_, err := s.exec(ctx, tx, `INSERT INTO upstreams (id, name, kind, base_url, enabled, warmup_enabled, credential,
			credential_kind, credential_version, spec_revision, created_at, updated_at, oauth_authorize_url, oauth_token_url, weight,
			max_utilization_5h, max_utilization_7d, cloud, max_in_flight)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			id, spec.Name, spec.Kind, spec.BaseURL, spec.Enabled, spec.WarmupEnabled, cred, spec.CredentialKind, version, s.d.t(now), s.d.t(now),
			spec.OAuthAuthorizeURL, spec.OAuthTokenURL, weight, deref(spec.MaxUtilization5h), deref(spec.MaxUtilization7d), cloudColumn(spec.Cloud), deref(spec.MaxInFlight))
		if err != nil {
			return err
		}
		out, err = upstreamTable.reread(ctx, s.d, tx, ch, id)
		return err
	})
	return out, err
}

func (s *Store) updateUpstream(ctx context.Context, id string, expect int64, set string, args ...any) (*store.Upstream, error) {
	return s.updateUpstreamChecked(ctx, id, expect, nil, set, args...)
}

func (s *Store) updateUpstreamChecked(ctx context.Context, id string, expect int64, check func(*txn) error, set string, args ...any) (*store.Upstream, error) {
	var out *store.Upstream
	ch := audit("update", "upstream", id)
	ch.touch(changeUpstream, id)
	err := s.tx(ctx, ch, func(tx *txn) error {
		if check != nil {
			if err := check(tx); err != nil {
				return err
			}
		}
		if err := s.optimistic(ctx, tx, "upstreams", "spec_revision", " AND deleted_at IS NULL", id, expect, set, args); err != nil {
			return err
		}
		var err error
		out, err = upstreamTable.reread(ctx, s.d, tx, ch, id)
		return err
	})
	return out, err
}

func (s *Store) UpdateUpstream(ctx context.Context, id string, expect int64, spec store.UpstreamSpec) (*store.Upstream, error) {
	set := "name = ?, base_url = ?, enabled = ?, warmup_enabled = ?, oauth_authorize_url = ?, oauth_token_url = ?, cloud = ?"
	args := []any{spec.Name, spec.BaseURL, spec.Enabled, spec.WarmupEnabled, spec.OAuthAuthorizeURL, spec.OAuthTokenURL, cloudColumn(spec.Cloud)}
	if spec.Weight != nil {
		set += ", weight = ?"
		args = append(args, *spec.Weight)
	}
	if spec.MaxUtilization5h != nil {
		set += ", max_utilization_5h = ?"
		args = append(args, *spec.MaxUtilization5h)
	}
	if spec.MaxUtilization7d != nil {
		set += ", max_utilization_7d = ?"
		args = append(args, *spec.MaxUtilization7d)
	}
	if spec.MaxInFlight != nil {
		set += ", max_in_flight = ?"
		args = append(args, *spec.MaxInFlight)
	}
	var check func(*txn) error
	if spec.Credential != nil {
		set += ", credential = ?, credential_kind = ?, credential_version = credential_version + 1"
		args = append(args, spec.Credential, spec.CredentialKind)
	} else {
		check = func(tx *txn) error { return s.keepsOrigins(ctx, tx, id, expect, &spec.BaseURL, &spec.OAuthTokenURL) }
	}
	return s.updateUpstreamChecked(ctx, id, expect, check, set, args...)
}

// keepsOrigins refuses, with store.ErrCredentialRequired, a change that
// would send the stored credential of upstream id to another origin:
// baseURL or tokenURL (nil: unchanged) moving away from the origins the
// credential is sent to now. The row is locked for the rest of the
// transaction, so a credential stored meanwhile cannot slip past. A missing
// row or a stale expect is left to the update to report.
func (s *Store) keepsOrigins(ctx context.Context, tx *txn, id string, expect int64, baseURL, tokenURL *string) error {
	var kind, base, token string
	var held bool
	var rev int64
	err := tx.QueryRowContext(ctx, s.d.rebind("SELECT kind, base_url, oauth_token_url, credential IS NOT NULL, spec_revision FROM upstreams WHERE id = ? AND deleted_at IS NULL"+s.d.ForUpdate), id).
		Scan(&kind, &base, &token, &held, &rev)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && expect != store.AnyRevision && rev != expect) {
		return nil
	}
	if err != nil || !held {
		return err
	}
	was := store.CredentialOrigins(kind, base, token)
	if baseURL != nil {
		base = *baseURL
	}
	if tokenURL != nil {
		token = *tokenURL
	}
	if !slices.Equal(was, store.CredentialOrigins(kind, base, token)) {
		return store.ErrCredentialRequired
	}
	return nil
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
	if p.Weight != nil {
		add("weight", *p.Weight)
	}
	if p.MaxUtilization5h != nil {
		add("max_utilization_5h", *p.MaxUtilization5h)
	}
	if p.MaxUtilization7d != nil {
		add("max_utilization_7d", *p.MaxUtilization7d)
	}
	if p.MaxInFlight != nil {
		add("max_in_flight", *p.MaxInFlight)
	}
	if p.Cloud != nil {
		add("cloud", cloudColumn(*p.Cloud))
	}
	if p.OAuthTokenURL != nil {
		add("oauth_token_url", *p.OAuthTokenURL)
	}
	if p.SetWarmupDialect {
		var v any
		if p.WarmupDialectPlugin != nil {
			v = *p.WarmupDialectPlugin
		}
		add("warmup_dialect_plugin", v)
	}
	if p.Credential != nil {
		add("credential", p.Credential)
		add("credential_kind", p.CredentialKind)
		set += ", credential_version = credential_version + 1"
	}
	var check func(*txn) error
	if p.SetWarmupDialect && p.WarmupDialectPlugin != nil {
		// The binding is checked in the update's transaction, so a plugin
		// deleted meanwhile cannot end up bound.
		check = func(tx *txn) error { return s.checkSlot(ctx, tx, *p.WarmupDialectPlugin, store.SlotWarmupDialect) }
	}
	if p.BaseURL != nil && p.Credential == nil {
		slot := check
		check = func(tx *txn) error {
			if err := s.keepsOrigins(ctx, tx, id, expect, p.BaseURL, p.OAuthTokenURL); err != nil {
				return err
			}
			if slot != nil {
				return slot(tx)
			}
			return nil
		}
	}
	return s.updateUpstreamChecked(ctx, id, expect, check, set, args...)
}

func (s *Store) DeleteUpstream(ctx context.Context, id string, expect int64) error {
	ch := audit("delete", "upstream", id)
	ch.touch(changeUpstream, id)
	return s.tx(ctx, ch, func(tx *txn) error {
		u, err := upstreamTable.get(ctx, s.d, tx, id)
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

// cloudColumn is the cloud column's value: empty for the zero
// configuration (the Anthropic kinds).
func cloudColumn(c store.CloudConfig) string {
	if c.Region == "" && c.Project == "" && len(c.ModelMap) == 0 {
		return ""
	}
	b, _ := json.Marshal(c)
	return string(b)
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
	res, err := s.pool.ExecContext(ctx, s.d.rebind("UPDATE upstreams SET last_apply_error = ?, last_apply_at = ? WHERE id = ? AND deleted_at IS NULL"),
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
// the failed credential version is still the stored one. A refusal takes
// the upstream out of routing, so it is a configuration change that every
// replica's snapshot picks up (a transient failure changes no routing).
func (s *Store) RecordRefreshFailure(ctx context.Context, id string, credentialVersion int64, msg string, refused bool, at time.Time) (bool, error) {
	const q = `UPDATE upstreams SET refresh_error = ?, refresh_error_at = ?, refresh_refused = ?
		WHERE id = ? AND credential_version = ? AND deleted_at IS NULL`
	if !refused {
		res, err := s.pool.ExecContext(ctx, s.d.rebind(q), msg, s.d.t(at), refused, id, credentialVersion)
		if err != nil {
			return false, s.d.classify(err)
		}
		n, _ := res.RowsAffected()
		return n > 0, nil
	}
	var n int64
	ch := audit("refresh_refused", "upstream", id)
	ch.touch(changeUpstream, id)
	err := s.tx(ctx, ch, func(tx *txn) error {
		var err error
		n, err = s.exec(ctx, tx, q, msg, s.d.t(at), refused, id, credentialVersion)
		ch.none = n == 0 // a replaced credential's refusal changes nothing
		return err
	})
	return n > 0, err
}

func (s *Store) SetUpstreamCredential(ctx context.Context, id, kind string, ciphertext []byte) (*store.Upstream, error) {
	var out *store.Upstream
	ch := audit("set_credential", "upstream", id)
	ch.touch(changeUpstream, id)
	err := s.tx(ctx, ch, func(tx *txn) error {
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
		out, err = upstreamTable.reread(ctx, s.d, tx, ch, id)
		return err
	})
	return out, err
}

func (s *Store) DisableWarmupForOAuthUpstreams(ctx context.Context) (int64, error) {
	var n int64
	ch := audit("disable_oauth_warmup", "upstream", "*")
	ch.touch(changeUpstream, changeAll)
	err := s.tx(ctx, ch, func(tx *txn) error {
		var err error
		n, err = s.exec(ctx, tx, `UPDATE upstreams SET warmup_enabled = ?, spec_revision = spec_revision + 1, updated_at = ?
			WHERE kind = ? AND deleted_at IS NULL AND warmup_enabled = ?`, false, s.d.t(s.nowT()), store.KindVendorOAuth, true)
		ch.none = n == 0 // nothing to disable: no new generation, no audit row
		return err
	})
	return n, err
}

// deref is *p, 0 when p is nil.
func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}
