package storetest

import (
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseSealed(t *testing.T, open Opener) {
	t.Run("ResealAll", func(t *testing.T) { run(t, open, testResealAll) })
	t.Run("ResealAllAborts", func(t *testing.T) { run(t, open, testResealAllAborts) })
	t.Run("RebindUpstreamCredentials", func(t *testing.T) { run(t, open, testRebind) })
}

// sealedFixture writes one value of every sealed kind (and a soft-deleted
// upstream's credential, and an unsealed keep-alive placeholder).
func sealedFixture(t *testing.T, b *bundle) (up, deleted string, ka string) {
	now := b.clk.Now()
	u := must(b.st.CreateUpstream(b.ctx, apiKeySpec("live")))
	d := must(b.st.CreateUpstream(b.ctx, apiKeySpec("gone")))
	must(0, b.st.DeleteUpstream(b.ctx, d.ID, d.SpecRevision))
	must(0, b.st.CreateOAuthFlow(b.ctx, store.OAuthFlow{State: "st-r", UpstreamID: u.ID, Verifier: []byte("ct-verifier"),
		RedirectURI: "https://cb.test/", CreatedAt: now, ExpiresAt: now.Add(10 * time.Minute)}))
	s := must(b.st.UpsertKeepAliveSession(b.ctx, kaSession("pr_r", "h-r", now)))
	must(0, b.st.SetKeepAliveSnapshot(b.ctx, s.ID, s.Generation, []byte("ct-snapshot")))
	placeholder := kaSession("pr_r", "h-unsealed", now)
	placeholder.Snapshot = []byte{0}
	must(b.st.UpsertKeepAliveSession(b.ctx, placeholder))
	must(b.st.CreateWebhook(b.ctx, store.Webhook{ID: "wh_r", Name: "r", URL: "https://hooks.example/a", Secret: []byte("ct-webhook"), Enabled: true}))
	must(0, b.st.InsertCapturedExchanges(b.ctx, []store.CapturedExchange{{EventID: "ev_r", PrincipalID: "pr_r", At: now, Sealed: []byte("ct-exchange")}}))
	return u.ID, d.ID, s.ID
}

// Master-key rotation: every sealed value is handed over with the fields
// of its associated data and written back; the config generation does
// not move (running replicas keep their snapshot).
func testResealAll(t *testing.T, open Opener) {
	b := setup(t, open)
	up, deleted, ka := sealedFixture(t, b)
	gen := must(b.st.ConfigGeneration(b.ctx))
	var seen []string
	n := must(b.st.ResealAll(b.ctx, func(v store.Sealed) ([]byte, error) {
		switch v.Kind {
		case store.SealedUpstreamCredential:
			if v.UpstreamKind != store.KindVendorAPIKey || v.BaseURL != "https://api.example" || v.OAuthTokenURL != "" {
				t.Errorf("upstream credential associated data fields %+v", v)
			}
			seen = append(seen, v.Kind+":"+v.UpstreamID+":"+string(v.Ciphertext))
		case store.SealedOAuthVerifier:
			seen = append(seen, v.Kind+":"+v.State+":"+v.UpstreamID+":"+string(v.Ciphertext))
		case store.SealedKeepAliveSnapshot:
			if v.PrincipalID != "pr_r" || v.SessionHash != "h-r" || v.Generation != 1 || v.UpstreamID == "" {
				t.Errorf("keep-alive associated data fields %+v", v)
			}
			seen = append(seen, v.Kind+":"+string(v.Ciphertext))
		case store.SealedWebhookSecret:
			seen = append(seen, v.Kind+":"+v.WebhookID+":"+v.BaseURL+":"+string(v.Ciphertext))
		case store.SealedCapturedExchange:
			seen = append(seen, v.Kind+":"+v.ExchangeID+":"+v.PrincipalID+":"+string(v.Ciphertext))
		}
		return append([]byte("new-"), v.Ciphertext...), nil
	}))
	sort.Strings(seen)
	want := []string{
		store.SealedKeepAliveSnapshot + ":ct-snapshot",
		store.SealedOAuthVerifier + ":st-r:" + up + ":ct-verifier",
		store.SealedUpstreamCredential + ":" + deleted + ":ct-gone",
		store.SealedUpstreamCredential + ":" + up + ":ct-live",
		store.SealedWebhookSecret + ":wh_r:https://hooks.example/a:ct-webhook",
		store.SealedCapturedExchange + ":ev_r:pr_r:ct-exchange",
	}
	sort.Strings(want)
	if n != 6 || len(seen) != 6 {
		t.Fatalf("resealed %d: %q, want %q", n, seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("resealed %q, want %q", seen, want)
		}
	}
	if got := must(b.st.GetUpstream(b.ctx, up)); string(got.Credential) != "new-ct-live" {
		t.Fatalf("credential after reseal %q", got.Credential)
	}
	if got := must(b.st.GetKeepAliveSession(b.ctx, ka)); string(got.Snapshot) != "new-ct-snapshot" {
		t.Fatalf("snapshot after reseal %q", got.Snapshot)
	}
	if f := must(b.st.TakeOAuthFlow(b.ctx, "st-r", b.clk.Now())); string(f.Verifier) != "new-ct-verifier" {
		t.Fatalf("verifier after reseal %q", f.Verifier)
	}
	if w := must(b.st.GetWebhook(b.ctx, "wh_r")); string(w.Secret) != "new-ct-webhook" {
		t.Fatalf("webhook secret after reseal %q", w.Secret)
	}
	if x := must(b.st.GetCapturedExchange(b.ctx, "ev_r")); string(x.Sealed) != "new-ct-exchange" {
		t.Fatalf("captured exchange after reseal %q", x.Sealed)
	}
	if g := must(b.st.ConfigGeneration(b.ctx)); g != gen {
		t.Fatalf("generation %d after reseal, want %d unchanged", g, gen)
	}
}

// One value that cannot be re-sealed (the wrong old key) leaves every
// value as it was.
func testResealAllAborts(t *testing.T, open Opener) {
	b := setup(t, open)
	up, _, ka := sealedFixture(t, b)
	wrongKey := errors.New("does not open")
	calls := 0
	_, err := b.st.ResealAll(b.ctx, func(v store.Sealed) ([]byte, error) {
		calls++
		if calls == 3 {
			return nil, wrongKey
		}
		return []byte("new"), nil
	})
	if !errors.Is(err, wrongKey) {
		t.Fatalf("err %v, want the reseal error", err)
	}
	if got := must(b.st.GetUpstream(b.ctx, up)); string(got.Credential) != "ct-live" {
		t.Fatalf("credential changed by an aborted reseal: %q", got.Credential)
	}
	if got := must(b.st.GetKeepAliveSession(b.ctx, ka)); string(got.Snapshot) != "ct-snapshot" {
		t.Fatalf("snapshot changed by an aborted reseal: %q", got.Snapshot)
	}
	if w := must(b.st.GetWebhook(b.ctx, "wh_r")); string(w.Secret) != "ct-webhook" {
		t.Fatalf("webhook secret changed by an aborted reseal: %q", w.Secret)
	}
	if x := must(b.st.GetCapturedExchange(b.ctx, "ev_r")); string(x.Sealed) != "ct-exchange" {
		t.Fatalf("captured exchange changed by an aborted reseal: %q", x.Sealed)
	}
}

// Start-up rebinding: every upstream credential (a soft-deleted upstream's
// too) is handed over with the fields its binding is made of; what comes
// back is written, unless the row changed meanwhile (a credential stored
// by its own writer is never overwritten); nil leaves a row alone.
func testRebind(t *testing.T, open Opener) {
	b := setup(t, open)
	up, deleted, _ := sealedFixture(t, b)
	raced := must(b.st.CreateUpstream(b.ctx, store.UpstreamSpec{Name: "sub", Kind: store.KindVendorOAuth, BaseURL: "https://api.example",
		OAuthTokenURL: "https://auth.example/token", Credential: []byte("ct-raced"), CredentialKind: "oauth"}))
	kept := must(b.st.CreateUpstream(b.ctx, apiKeySpec("kept")))
	was := must(b.st.GetUpstream(b.ctx, up))
	gen := must(b.st.ConfigGeneration(b.ctx))
	seen := map[string]store.Sealed{}
	n := must(b.st.RebindUpstreamCredentials(b.ctx, func(v store.Sealed) ([]byte, error) {
		seen[v.UpstreamID] = v
		switch v.UpstreamID {
		case kept.ID:
			return nil, nil
		case raced.ID:
			must(b.st.SetUpstreamCredential(b.ctx, raced.ID, "oauth", []byte("ct-fresh")))
		}
		return append([]byte("bound-"), v.Ciphertext...), nil
	}))
	if len(seen) != 4 || n != 2 {
		t.Fatalf("rebind saw %d, wrote %d; want 4 seen, 2 written", len(seen), n)
	}
	if v := seen[raced.ID]; v.Kind != store.SealedUpstreamCredential || v.UpstreamKind != store.KindVendorOAuth || v.BaseURL != "https://api.example" ||
		v.OAuthTokenURL != "https://auth.example/token" || string(v.Ciphertext) != "ct-raced" {
		t.Fatalf("binding fields %+v", v)
	}
	for id, want := range map[string]string{up: "bound-ct-live", raced.ID: "ct-fresh", kept.ID: "ct-kept"} {
		if got := must(b.st.GetUpstream(b.ctx, id)); string(got.Credential) != want {
			t.Errorf("%s: credential %q, want %q", id, got.Credential, want)
		}
	}
	if _, ok := seen[deleted]; !ok {
		t.Error("a soft-deleted upstream's credential was not handed over")
	}
	if got := must(b.st.GetUpstream(b.ctx, up)); got.CredentialVersion != was.CredentialVersion || got.SpecRevision != was.SpecRevision {
		t.Fatalf("rebinding moved the version or revision: %+v", got)
	}
	if g := must(b.st.ConfigGeneration(b.ctx)); g <= gen {
		t.Fatalf("generation %d after rebinding, want past %d", g, gen)
	}
}
