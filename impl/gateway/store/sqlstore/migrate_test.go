package sqlstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
)

// P-VER-2: migrations are phased; a contract migration (a drop) runs only
// when allowed and only after every earlier expand migration.
func TestPhasedMigrations(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		"m/0001_items.expand.sql":      {Data: []byte("CREATE TABLE items (id INTEGER PRIMARY KEY, old TEXT, new TEXT);")},
		"m/0002_backfill.expand.sql":   {Data: []byte("-- copy old into new\nUPDATE items SET new = old;")},
		"m/0003_drop_old.contract.sql": {Data: []byte("ALTER TABLE items DROP COLUMN old;")},
		"m/0004_more.expand.sql":       {Data: []byte("CREATE TABLE more (id INTEGER PRIMARY KEY);")},
	}
	ms, err := sqlstore.LoadMigrations(fsys, "m")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.OpenDB(filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	applied, err := sqlstore.Migrate(ctx, db, sqlite.Dialect, ms, sqlstore.MigrateOptions{Logger: log})
	if err != nil || !reflect.DeepEqual(applied, []int{1, 2, 4}) {
		t.Fatalf("default run applied %v, %v (want expand only)", applied, err)
	}
	if !strings.Contains(logs.String(), "contract migration held back") || !strings.Contains(logs.String(), "name=drop_old") {
		t.Fatalf("the held-back contract migration was not reported:\n%s", logs.String())
	}
	if _, err := db.Exec("SELECT old FROM items"); err != nil {
		t.Fatal("the contract migration ran without being allowed")
	}
	applied, err = sqlstore.Migrate(ctx, db, sqlite.Dialect, ms, sqlstore.MigrateOptions{})
	if err != nil || len(applied) != 0 {
		t.Fatalf("second run applied %v, %v", applied, err)
	}
	applied, err = sqlstore.Migrate(ctx, db, sqlite.Dialect, ms, sqlstore.MigrateOptions{AllowContract: true})
	if err != nil || !reflect.DeepEqual(applied, []int{3}) {
		t.Fatalf("contract run applied %v, %v", applied, err)
	}
	if _, err := db.Exec("SELECT old FROM items"); err == nil {
		t.Fatal("column not dropped")
	}

	// A contract migration refuses to run while an earlier expand is missing.
	db2, _ := sqlite.OpenDB(filepath.Join(t.TempDir(), "m2.db"))
	defer db2.Close()
	if _, err := sqlstore.Migrate(ctx, db2, sqlite.Dialect, ms[:1], sqlstore.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	gap := []sqlstore.Migration{ms[0], ms[2]} // 0002 is unknown to this set…
	gap = append(gap, ms[1])                  // …and listed after the contract
	_, err = sqlstore.Migrate(ctx, db2, sqlite.Dialect, gap, sqlstore.MigrateOptions{AllowContract: true})
	if err == nil || !strings.Contains(err.Error(), "0002_backfill") {
		t.Fatalf("contract before its expand: %v", err)
	}

	if _, err := sqlstore.LoadMigrations(fstest.MapFS{"m/1_x.sql": {}}, "m"); err == nil {
		t.Fatal("a migration without phase was accepted")
	}
}

// Time columns are unix seconds on SQLite.
func TestSQLiteTimesAreUnixSeconds(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "p.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.DB().Exec("INSERT INTO audit_log (id, at, actor, action, resource_kind, resource_id) VALUES ('a', 1700000000, 'x', 'y', 'z', 'w')"); err != nil {
		t.Fatal(err)
	}
	var typ string
	if err := st.DB().QueryRow("SELECT typeof(at) FROM audit_log").Scan(&typ); err != nil || typ != "integer" {
		t.Fatalf("typeof(at) = %q, %v", typ, err)
	}
}

// A connection lost mid-statement is storage_unavailable, not an internal error.
func TestLostConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, msg := range []string{"conn closed", "unexpected EOF", "FATAL: the database system is in recovery mode (SQLSTATE 57P03)", "dial tcp 10.0.0.1:5432: connect: connection refused"} {
		if err := sqlstore.ClassifyForTest(errors.New(msg)); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%q classified as %v", msg, err)
		}
	}
	if err := sqlstore.ClassifyForTest(errors.New("syntax error at or near")); errors.Is(err, store.ErrUnavailable) {
		t.Error("a syntax error classified as unavailable")
	}
}
