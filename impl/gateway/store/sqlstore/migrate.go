package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migrations are phased. An expand migration only adds (tables, columns,
// indexes) and is applied at start-up: old and new binaries both work with
// its result. A contract migration drops what an earlier release stopped
// using; it runs only when the operator says every replica is on a release
// that no longer needs it (--migrate-contract), and never before every
// earlier expand migration is applied.
const (
	PhaseExpand   = "expand"
	PhaseContract = "contract"
)

// Migration is one numbered schema step.
type Migration struct {
	Version int
	Name    string
	Phase   string
	SQL     string
}

// LoadMigrations reads files named NNNN_name.expand.sql or
// NNNN_name.contract.sql from dir of fsys.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") {
			continue
		}
		base := strings.TrimSuffix(name, ".sql")
		phase := path.Ext(base)
		base = strings.TrimSuffix(base, phase)
		phase = strings.TrimPrefix(phase, ".")
		num, rest, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || (phase != PhaseExpand && phase != PhaseContract) {
			return nil, fmt.Errorf("migration file %s: want NNNN_name.expand.sql or NNNN_name.contract.sql", name)
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: rest, Phase: phase, SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("two migrations numbered %d", out[i].Version)
		}
	}
	return out, nil
}

// MigrateOptions tunes Migrate.
type MigrateOptions struct {
	AllowContract bool
	// Lock, when set, runs first inside each migration's transaction to
	// serialise concurrent migrators (PostgreSQL advisory lock).
	Lock string
	// Logger, when set, records each applied migration and each contract
	// migration held back.
	Logger *slog.Logger
}

// Migrate applies pending migrations, one transaction each. It returns the
// versions applied now.
func Migrate(ctx context.Context, db *sql.DB, d *Dialect, ms []Migration, o MigrateOptions) ([]int, error) {
	if err := createVersionTable(ctx, db, o.Lock); err != nil {
		return nil, d.classify(err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var applied []int
	for _, m := range ms {
		did, err := migrateOne(ctx, db, d, ms, m, o)
		if err != nil {
			return applied, fmt.Errorf("migration %04d_%s (%s): %w", m.Version, m.Name, m.Phase, err)
		}
		switch {
		case did:
			applied = append(applied, m.Version)
			log.Info("applied migration", "version", m.Version, "name", m.Name, "phase", m.Phase)
		case m.Phase == PhaseContract && !o.AllowContract:
			// Pending or already applied; only say so when pending.
			if ok, err := isApplied(ctx, db, d, m.Version); err == nil && !ok {
				log.Warn("contract migration held back; apply it with --migrate-contract once every replica runs this release",
					"version", m.Version, "name", m.Name)
			}
		}
	}
	return applied, nil
}

// createVersionTable creates schema_migrations under the migration lock, so
// replicas starting together do not race on the catalog.
func createVersionTable(ctx context.Context, db *sql.DB, lock string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if lock != "" {
		if _, err := tx.ExecContext(ctx, lock); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, phase TEXT NOT NULL)`); err != nil {
		return err
	}
	return tx.Commit()
}

func migrateOne(ctx context.Context, db *sql.DB, d *Dialect, all []Migration, m Migration, o MigrateOptions) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if o.Lock != "" {
		if _, err := tx.ExecContext(ctx, o.Lock); err != nil {
			return false, err
		}
	}
	done := map[int]bool{}
	rows, err := tx.QueryContext(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return false, err
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return false, err
		}
		done[v] = true
	}
	rows.Close()
	if done[m.Version] {
		return false, nil
	}
	if m.Phase == PhaseContract {
		if !o.AllowContract {
			return false, nil
		}
		for _, e := range all {
			if e.Version < m.Version && e.Phase == PhaseExpand && !done[e.Version] {
				return false, fmt.Errorf("expand migration %04d_%s is not applied yet; contract migrations only follow a fully deployed expand phase", e.Version, e.Name)
			}
		}
	}
	for _, stmt := range splitStatements(m.SQL) {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return false, err
		}
	}
	if _, err := tx.ExecContext(ctx, d.rebind("INSERT INTO schema_migrations (version, name, phase) VALUES (?, ?, ?)"), m.Version, m.Name, m.Phase); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

func isApplied(ctx context.Context, db *sql.DB, d *Dialect, version int) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, d.rebind("SELECT COUNT(*) FROM schema_migrations WHERE version = ?"), version).Scan(&n)
	return n > 0, err
}

// splitStatements splits a migration on semicolons at line ends; the
// migrations here contain no procedural code.
func splitStatements(sqlText string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(sqlText, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			if s := strings.TrimSpace(cur.String()); s != ";" {
				out = append(out, s)
			}
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// Applied lists applied migration versions.
func Applied(ctx context.Context, db *sql.DB) ([]int, error) {
	rows, err := db.QueryContext(ctx, "SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
