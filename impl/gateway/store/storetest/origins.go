package storetest

import (
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseOrigins(t *testing.T, open Opener) {
	t.Run("CredentialStaysWithItsOrigin", func(t *testing.T) { run(t, open, testCredentialOrigin) })
	t.Run("OAuthCredentialStaysWithItsOrigins", func(t *testing.T) { run(t, open, testOAuthCredentialOrigins) })
}

// unchanged fails unless upstream id still has the revision, base_url,
// token endpoint and credential of want, and the config generation is gen.
func unchanged(t *testing.T, b *bundle, want *store.Upstream, gen int64) {
	t.Helper()
	got := must(b.st.GetUpstream(b.ctx, want.ID))
	if got.SpecRevision != want.SpecRevision || got.BaseURL != want.BaseURL || got.OAuthTokenURL != want.OAuthTokenURL ||
		string(got.Credential) != string(want.Credential) || got.CredentialVersion != want.CredentialVersion {
		t.Fatalf("a refused change changed the upstream: %+v, was %+v", got, want)
	}
	if g := must(b.st.ConfigGeneration(b.ctx)); g != gen {
		t.Fatalf("a refused change moved the generation to %d from %d", g, gen)
	}
}

// A stored API key goes only where it was given for: a base_url of another
// origin (host, scheme or port) without the key in the same change is
// refused on PATCH and PUT, nothing changed; the same origin under another
// path, or a new key given with the move, is accepted.
func testCredentialOrigin(t *testing.T, open Opener) {
	b := setup(t, open)
	u := must(b.st.CreateUpstream(b.ctx, apiKeySpec("held")))
	for _, same := range []string{"https://api.example/v2", "https://API.example:443", "https://api.example"} {
		u = must(b.st.PatchUpstream(b.ctx, u.ID, store.AnyRevision, store.UpstreamPatch{BaseURL: &same}))
		if u.BaseURL != same || string(u.Credential) != "ct-held" {
			t.Fatalf("same-origin move %q: %+v", same, u)
		}
	}
	gen := must(b.st.ConfigGeneration(b.ctx))
	for _, other := range []string{"https://evil.example", "http://api.example", "https://api.example:8443", "https://api.example.evil.example"} {
		name := "renamed"
		_, err := b.st.PatchUpstream(b.ctx, u.ID, store.AnyRevision, store.UpstreamPatch{BaseURL: &other, Name: &name})
		wantErr(t, err, store.ErrCredentialRequired)
		unchanged(t, b, u, gen)
		spec := store.UpstreamSpec{Name: u.Name, Kind: u.Kind, BaseURL: other, Enabled: true}
		_, err = b.st.UpdateUpstream(b.ctx, u.ID, store.AnyRevision, spec)
		wantErr(t, err, store.ErrCredentialRequired)
		unchanged(t, b, u, gen)
	}

	// With the key in the same change the move is accepted.
	moved := "https://new.example"
	p := must(b.st.PatchUpstream(b.ctx, u.ID, u.SpecRevision, store.UpstreamPatch{BaseURL: &moved, Credential: []byte("ct-new"), CredentialKind: "api_key"}))
	if p.BaseURL != moved || string(p.Credential) != "ct-new" || p.CredentialVersion != u.CredentialVersion+1 {
		t.Fatalf("move with a key: %+v", p)
	}
	put := store.UpstreamSpec{Name: p.Name, Kind: p.Kind, BaseURL: "https://third.example", Enabled: true, Credential: []byte("ct-third"), CredentialKind: "api_key"}
	if q := must(b.st.UpdateUpstream(b.ctx, u.ID, p.SpecRevision, put)); q.BaseURL != put.BaseURL || string(q.Credential) != "ct-third" {
		t.Fatalf("PUT move with a key: %+v", q)
	}

	// An upstream holding no credential moves freely.
	bare := apiKeySpec("bare")
	bare.Credential, bare.CredentialKind = nil, ""
	e := must(b.st.CreateUpstream(b.ctx, bare))
	if e = must(b.st.PatchUpstream(b.ctx, e.ID, store.AnyRevision, store.UpstreamPatch{BaseURL: &moved})); e.BaseURL != moved {
		t.Fatalf("bare move: %+v", e)
	}
}

// An OAuth token bundle goes to the base_url (access token) and to the
// token endpoint (refresh token): moving either without a new credential
// is refused while one is held, and free once it is revoked.
func testOAuthCredentialOrigins(t *testing.T, open Opener) {
	b := setup(t, open)
	spec := store.UpstreamSpec{Name: "sub", Kind: store.KindVendorOAuth, BaseURL: "https://api.example", Enabled: true,
		OAuthTokenURL: "https://auth.example/token"}
	u := must(b.st.CreateUpstream(b.ctx, spec))
	u = must(b.st.SetUpstreamCredential(b.ctx, u.ID, "oauth", []byte("ct-tokens")))
	gen := must(b.st.ConfigGeneration(b.ctx))
	for _, c := range []struct{ base, token string }{
		{"https://evil.example", "https://auth.example/token"},
		{"https://api.example", "https://evil.example/token"},
		{"https://api.example", ""}, // back to the built-in endpoint: another origin too
	} {
		s := spec
		s.BaseURL, s.OAuthTokenURL = c.base, c.token
		_, err := b.st.UpdateUpstream(b.ctx, u.ID, store.AnyRevision, s)
		wantErr(t, err, store.ErrCredentialRequired)
		unchanged(t, b, u, gen)
	}
	other := "https://evil.example"
	_, err := b.st.PatchUpstream(b.ctx, u.ID, store.AnyRevision, store.UpstreamPatch{BaseURL: &other})
	wantErr(t, err, store.ErrCredentialRequired)
	unchanged(t, b, u, gen)

	// The same origins under other paths are accepted.
	s := spec
	s.BaseURL, s.OAuthTokenURL = "https://api.example/a", "https://auth.example/v2/token"
	must(b.st.UpdateUpstream(b.ctx, u.ID, store.AnyRevision, s))

	// Revoked, the upstream moves freely.
	must(b.st.SetUpstreamCredential(b.ctx, u.ID, "", nil))
	s.BaseURL, s.OAuthTokenURL = "https://evil.example", "https://evil.example/token"
	if m := must(b.st.UpdateUpstream(b.ctx, u.ID, store.AnyRevision, s)); m.BaseURL != s.BaseURL || m.OAuthTokenURL != s.OAuthTokenURL {
		t.Fatalf("revoked move: %+v", m)
	}
}
