package server

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
)

// A credential sealed before credentials were bound to origins keeps
// working for the origin its row names: start-up re-seals it bound to that
// origin (so it no longer opens for any other), once; credentials already
// bound, or sealed under another key, are left as they are.
func TestStartBindsLegacyCredentialsToTheirOrigin(t *testing.T) {
	t.Parallel()
	dsn, id, key := rotationFixture(t, true)
	ctx := context.Background()
	st, err := sqlite.Open(ctx, dsn, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	box, _ := secret.New(key)
	other, _ := secret.New(bytes.Repeat([]byte{7}, secret.KeySize))
	foreign, err := st.CreateUpstream(ctx, store.UpstreamSpec{Name: "foreign", Kind: store.KindVendorAPIKey, BaseURL: "https://b.example", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	fct, _ := other.Seal([]byte("sk-foreign"), credential.LegacyAD(foreign.ID))
	if _, err := st.SetUpstreamCredential(ctx, foreign.ID, credential.APIKey, fct); err != nil {
		t.Fatal(err)
	}
	gen, _ := st.ConfigGeneration(ctx)
	was, _ := st.GetUpstream(ctx, id)

	if err := rebindCredentials(ctx, st, box, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	u, _ := st.GetUpstream(ctx, id)
	if pt, err := box.Open(u.Credential, credential.UpstreamAD(u)); err != nil || string(pt) != "sk-upstream" {
		t.Fatalf("the legacy credential does not open for its origin: %q %v", pt, err)
	}
	if _, err := box.Open(u.Credential, credential.LegacyAD(id)); err == nil {
		t.Fatal("the legacy credential still opens without its origin")
	}
	if _, err := box.Open(u.Credential, credential.AD(id, u.Kind, "https://elsewhere.example", "")); err == nil {
		t.Fatal("the rebound credential opens for another origin")
	}
	if u.CredentialVersion != was.CredentialVersion || u.SpecRevision != was.SpecRevision {
		t.Fatalf("rebinding moved the credential version or revision: %+v", u)
	}
	if g, _ := st.ConfigGeneration(ctx); g != gen+1 {
		t.Fatalf("generation %d after one rebind, want %d (replicas rebuild)", g, gen+1)
	}
	if f, _ := st.GetUpstream(ctx, foreign.ID); !bytes.Equal(f.Credential, fct) {
		t.Fatal("a credential under another key was rewritten")
	}
	// A second start finds nothing to do.
	if err := rebindCredentials(ctx, st, box, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if again, _ := st.GetUpstream(ctx, id); !bytes.Equal(again.Credential, u.Credential) {
		t.Fatal("a bound credential was sealed again")
	}
	if g, _ := st.ConfigGeneration(ctx); g != gen+1 {
		t.Fatalf("generation %d after a second start, want %d", g, gen+1)
	}
}
