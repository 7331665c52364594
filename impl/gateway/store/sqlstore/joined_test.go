package sqlstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/service"
)

// A full read of joined rows (SQLite's keys, principals and chain
// entries) returns exactly what the read of plain rows returns, on the
// same database: with NULLs and empty values, values holding the joining
// separator, the "v" NULLs are told by, NUL bytes, quotes and non-ASCII
// text, blobs and non-integers where text and integers are stored, empty
// tables; where the joined values cannot be trusted the rows are read
// instead, and a row neither read decodes fails both.
func TestJoinedReadIsThePlainRead(t *testing.T) {
	ctx := context.Background()
	st := openSQLiteFile(t)
	d := *sqlite.Dialect
	d.JoinRows = false
	plain := sqlstore.New(st.DB(), &d, service.Options{})
	db := st.DB()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	// same compares the two reads; joined tells how many reads must
	// have been joined: the keys' two halves, the principals, the chain
	// entries.
	same := func(what string, joined int64) {
		t.Helper()
		before := sqlstore.JoinedUsed()
		got, err := st.LoadConfig(ctx)
		if err != nil {
			t.Fatalf("%s: joined read: %v", what, err)
		}
		used := sqlstore.JoinedUsed() - before
		want, err := plain.LoadConfig(ctx)
		if err != nil {
			t.Fatalf("%s: plain read: %v", what, err)
		}
		if sqlstore.JoinedUsed() != before+used {
			t.Fatalf("%s: the plain read read joined", what)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: joined read\n%+v\nplain read\n%+v", what, got, want)
		}
		if used != joined {
			t.Fatalf("%s: %d reads joined, want %d", what, used, joined)
		}
		for _, p := range got.Principals {
			if strings.HasPrefix(p.Name, "nul") && p.Name != "nul\x00byte" {
				t.Fatalf("%s: name %q read", what, p.Name)
			}
		}
	}
	// fail checks that both reads fail alike.
	fail := func(what string) {
		t.Helper()
		_, jerr := st.LoadConfig(ctx)
		_, perr := plain.LoadConfig(ctx)
		if jerr == nil || perr == nil || jerr.Error() != perr.Error() {
			t.Fatalf("%s: joined read %v, plain read %v", what, jerr, perr)
		}
	}
	same("empty", 4)

	v := "1.0.0"
	wasm, err := st.CreateRegistryEntry(ctx, store.RegistryEntry{Name: "w", Version: &v, Digest: "d", Slots: []string{store.SlotRouter}}, []byte("m"))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"plain", "", "v", "vv", "quote \" , [\"a\"]", "tab\tnew\nline", "nul\x00byte", "ünï ☃", "trailing\\"}
	var prs []*store.Principal
	for i, name := range names {
		p := store.Principal{Name: name, Kind: "human", Enabled: i%2 == 0, AllowedModels: []string{}, DefaultLimits: json.RawMessage(`[]`)}
		switch i % 3 {
		case 1:
			p.AllowedModels = []string{"gpt-4o", "claude-*"}
			p.DefaultLimits = json.RawMessage(`[{"metric":"requests","window":"1m","max":5}]`)
			p.CacheKeepalive = json.RawMessage(`{"enabled":true}`)
		case 2:
			p.AllowedModels = []string{"a\u001fb"} // an escaped separator in JSON
			p.CacheKeepalive = json.RawMessage(`""`)
		}
		pr, err := st.CreatePrincipal(ctx, p)
		if err != nil {
			t.Fatalf("principal %q: %v", name, err)
		}
		prs = append(prs, pr)
		if i%2 == 1 {
			if _, err := st.InsertChainEntry(ctx, pr.ID, store.ChainEntry{Slot: store.SlotRouter, WasmRegistryID: &wasm.ID, Config: json.RawMessage(`{"k":"v\u001f"}`)}, nil); err != nil {
				t.Fatal(err)
			}
		}
		for j := range 3 {
			h := sha256.Sum256([]byte(fmt.Sprint(i, j)))
			if _, err := st.CreateKey(ctx, store.Key{PrincipalID: pr.ID, Prefix: "sk", Hash: h[:]}); err != nil {
				t.Fatal(err)
			}
		}
	}
	same("values", 4)

	// Values the columns' types do not promise: a blob where text is
	// stored, text where integers are (both reads take a time written
	// as text), a time in the future, a zero.
	exec("UPDATE principals SET kind = X'68756d616e' WHERE id = ?", prs[0].ID)
	exec("UPDATE plugin_chain_entries SET config = X'7b7d' WHERE principal_id = ?", prs[1].ID)
	exec("UPDATE principals SET updated_at = 0, revision = 9223372036854775807 WHERE id = ?", prs[2].ID)
	same("blobs", 4)
	exec("UPDATE principals SET created_at = '2030-01-02T03:04:05Z' WHERE id = ?", prs[3].ID)
	same("a time as text", 3)
	exec("UPDATE principals SET created_at = 1800000000 WHERE id = ?", prs[3].ID)
	exec("UPDATE principals SET enabled = 'true' WHERE id = ?", prs[4].ID)
	same("a bool as text", 3)
	exec("UPDATE principals SET enabled = 1 WHERE id = ?", prs[4].ID)
	same("restored", 4)

	// The separator, and what a NULL is joined as, in stored values.
	exec("UPDATE principals SET name = 'a\x1fb' WHERE id = ?", prs[0].ID)
	same("a separator in a name", 3)
	exec("UPDATE principals SET name = 'plain' WHERE id = ?", prs[0].ID)
	exec("UPDATE plugin_chain_entries SET wasm_registry_id = NULL, builtin = '' WHERE principal_id = ?", prs[1].ID)
	exec("UPDATE plugin_chain_entries SET config = 'x\x1f' WHERE principal_id = ?", prs[3].ID)
	same("a separator in a config, an empty builtin", 3)
	exec(`UPDATE plugin_chain_entries SET config = '{}'`)
	exec("UPDATE principals SET cache_keepalive = '' WHERE id = ?", prs[5].ID)
	exec("UPDATE principals SET cache_keepalive = 'v' WHERE id = ?", prs[6].ID)
	same("an empty and a 'v' keepalive", 4)

	// A row neither read decodes: the error of the plain read.
	exec("UPDATE principals SET revision = 1.5 WHERE id = ?", prs[7].ID)
	fail("a real revision")
	exec("UPDATE principals SET revision = 2 WHERE id = ?", prs[7].ID)
	exec("UPDATE principals SET allowed_models = 'nope' WHERE id = ?", prs[8].ID)
	fail("models not JSON")
	exec("UPDATE principals SET allowed_models = '[]' WHERE id = ?", prs[8].ID)
	same("restored again", 4)
	// A NULL id (SQLite allows one in a text PRIMARY KEY) in a row whose
	// name holds the separator: joined they would count right, and read
	// as id "x", name "y".
	exec("INSERT INTO principals (id, name, kind, enabled, revision, allowed_models, default_limits, created_at, updated_at) VALUES (NULL, 'x\x1fy', 'human', 1, 1, '[]', '[]', 1, 1)")
	fail("a NULL id")
}

// Every column a joined read does not mark as nullable is NOT NULL in the
// schema or counted apart: concat_ws and group_concat leave NULLs out,
// which a separator in another value could make up for in the count that
// guards the split.
func TestJoinSpecsMatchSchema(t *testing.T) {
	ctx := context.Background()
	st := openSQLiteFile(t)
	for table, cols := range sqlstore.JoinSpecsForTest() {
		rows, err := st.DB().QueryContext(ctx, "SELECT name, type, \"notnull\" FROM pragma_table_info(?)", table)
		if err != nil {
			t.Fatal(err)
		}
		schema := map[string][2]string{}
		for rows.Next() {
			var name, typ, notNull string
			if err := rows.Scan(&name, &typ, &notNull); err != nil {
				t.Fatal(err)
			}
			schema[name] = [2]string{typ, notNull}
		}
		rows.Close()
		for col, kind := range cols {
			s, ok := schema[col]
			kind, counted := strings.CutSuffix(kind, " counted")
			switch {
			case !ok:
				t.Errorf("%s.%s: no such column", table, col)
			case kind != "null" && s[1] != "1" && !counted:
				t.Errorf("%s.%s: read joined as %s, but may be NULL", table, col, kind)
			case kind == "int" && s[0] != "INTEGER", kind == "text" && s[0] != "TEXT":
				t.Errorf("%s.%s: read joined as %s, stored as %s", table, col, kind, s[0])
			}
		}
	}
}
