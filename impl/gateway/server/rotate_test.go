package server

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/capture"
	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
)

// rotationFixture makes a SQLite database with the embedded default's key
// file and one upstream whose credential is sealed under that key, bound to
// its origin (or, legacy, as credentials were sealed before that).
func rotationFixture(t *testing.T, legacy ...bool) (dsn, upstreamID string, oldKey []byte) {
	t.Helper()
	dsn = filepath.Join(t.TempDir(), "proxy.db")
	oldKey, _, err := secret.LoadOrCreateKeyFile(dsn + ".key")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, dsn, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	u, err := st.CreateUpstream(ctx, store.UpstreamSpec{Name: "main", Kind: store.KindVendorAPIKey, BaseURL: "https://api.example", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	box, _ := secret.New(oldKey)
	ad := credential.UpstreamAD(u)
	if len(legacy) > 0 && legacy[0] {
		ad = credential.LegacyAD(u.ID)
	}
	ct, _ := box.Seal([]byte("sk-upstream"), ad)
	if _, err := st.SetUpstreamCredential(ctx, u.ID, "api_key", ct); err != nil {
		t.Fatal(err)
	}
	return dsn, u.ID, oldKey
}

func storedCredential(t *testing.T, dsn, id string) []byte {
	t.Helper()
	st, err := sqlite.Open(context.Background(), dsn, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	u, err := st.GetUpstream(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return u.Credential
}

// rotate-master-key re-seals under the new key and rewrites the key file;
// the old key no longer opens the credential. A credential sealed before
// credentials were bound to origins comes out bound to its row's origin.
func TestRotateMasterKeyCommand(t *testing.T) {
	t.Parallel()
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprint("legacy=", legacy), func(t *testing.T) {
			t.Parallel()
			testRotateMasterKeyCommand(t, legacy)
		})
	}
}

func testRotateMasterKeyCommand(t *testing.T, legacy bool) {
	dsn, id, oldKey := rotationFixture(t, legacy)
	newKey := bytes.Repeat([]byte{9}, secret.KeySize)
	var out strings.Builder
	err := Main(context.Background(), []string{"storage", "rotate-master-key", "--database-url", "sqlite://" + dsn},
		env(map[string]string{"PROXY_NEW_MASTER_KEY": hex.EncodeToString(newKey)}), &out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "re-sealed 1 value") || strings.Contains(out.String(), hex.EncodeToString(newKey)) {
		t.Fatalf("output %q", out.String())
	}
	k, created, err := secret.LoadOrCreateKeyFile(dsn + ".key")
	if err != nil || created || !bytes.Equal(k, newKey) {
		t.Fatalf("key file after rotation: %x created=%v %v", k, created, err)
	}
	ct := storedCredential(t, dsn, id)
	nb, _ := secret.New(newKey)
	bound := credential.AD(id, store.KindVendorAPIKey, "https://api.example", "")
	if pt, err := nb.Open(ct, bound); err != nil || string(pt) != "sk-upstream" {
		t.Fatalf("new key opens %q, %v", pt, err)
	}
	if _, err := nb.Open(ct, credential.LegacyAD(id)); err == nil {
		t.Fatal("the re-sealed credential is not bound to its origin")
	}
	ob, _ := secret.New(oldKey)
	for _, ad := range [][]byte{bound, credential.LegacyAD(id)} {
		if _, err := ob.Open(ct, ad); err == nil {
			t.Fatal("the old key still opens the credential")
		}
	}
}

// A wrong old key is refused and changes nothing: not the database, not
// the key file.
func TestRotateMasterKeyWrongOldKey(t *testing.T) {
	t.Parallel()
	dsn, id, oldKey := rotationFixture(t)
	before := storedCredential(t, dsn, id)
	wrong := hex.EncodeToString(bytes.Repeat([]byte{1}, secret.KeySize))
	newKey := hex.EncodeToString(bytes.Repeat([]byte{2}, secret.KeySize))
	err := Main(context.Background(), []string{"storage", "rotate-master-key", "--database-url", "sqlite://" + dsn},
		env(map[string]string{"PROXY_MASTER_KEY": wrong, "PROXY_NEW_MASTER_KEY": newKey}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "nothing changed") || !strings.Contains(err.Error(), id) {
		t.Fatalf("wrong old key: %v", err)
	}
	if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), newKey) {
		t.Fatalf("error repeats a key: %v", err)
	}
	if after := storedCredential(t, dsn, id); !bytes.Equal(before, after) {
		t.Fatal("the credential changed after a refused rotation")
	}
	if k, _, _ := secret.LoadOrCreateKeyFile(dsn + ".key"); !bytes.Equal(k, oldKey) {
		t.Fatal("the key file changed after a refused rotation")
	}
	// No new key given, or the same key twice: refused before anything.
	for _, e := range []map[string]string{{}, {"PROXY_NEW_MASTER_KEY": hex.EncodeToString(oldKey)}} {
		if err := Main(context.Background(), []string{"storage", "rotate-master-key", "--database-url", "sqlite://" + dsn}, env(e), io.Discard); err == nil {
			t.Fatalf("rotation with %v accepted", e)
		}
	}
}

// A captured exchange is re-sealed with the other sealed values: after
// rotation the new key opens its bodies and the old one does not.
func TestRotateMasterKeyResealsCapturedExchange(t *testing.T) {
	t.Parallel()
	dsn, _, oldKey := rotationFixture(t)
	ctx := context.Background()
	st, err := sqlite.Open(ctx, dsn, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ob, _ := secret.New(oldKey)
	row, err := capture.Seal(ob, capture.Exchange{EventID: "ev_1", PrincipalID: "pr_1", Request: []byte("prompt"), Response: []byte("answer")})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.InsertCapturedExchanges(ctx, []store.CapturedExchange{row}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	newKey := bytes.Repeat([]byte{7}, secret.KeySize)
	var out strings.Builder
	if err := Main(ctx, []string{"storage", "rotate-master-key", "--database-url", "sqlite://" + dsn},
		env(map[string]string{"PROXY_NEW_MASTER_KEY": hex.EncodeToString(newKey)}), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "re-sealed 2 value") {
		t.Fatalf("output %q", out.String())
	}
	st, err = sqlite.Open(ctx, dsn, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.GetCapturedExchange(ctx, "ev_1")
	if err != nil {
		t.Fatal(err)
	}
	nb, _ := secret.New(newKey)
	if b, err := capture.Open(nb, *got); err != nil || string(b.Request) != "prompt" || string(b.Response) != "answer" {
		t.Fatalf("new key opens %+v, %v", b, err)
	}
	if _, err := capture.Open(ob, *got); err == nil {
		t.Fatal("the old key still opens the captured exchange")
	}
}
