package sso

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

type testKey struct {
	id  string
	key *rsa.PrivateKey
}

func newTestKey(t *testing.T, id string) testKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return testKey{id, k}
}

func (k testKey) sign(t *testing.T, claims map[string]any) string {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k.key}, (&jose.SignerOptions{}).WithHeader("kid", k.id))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(claims)
	o, err := s.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	c, err := o.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Tokens naming a key the gateway has not seen cost anonymous callers
// nothing, so they make it fetch the issuer's key set at most once per
// keyRefetchEvery; a rotation is still followed, and a withdrawn key stops
// verifying.
func TestKeySetFetchesAreBounded(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	published := []testKey{newTestKey(t, "k1")}
	var fetches atomic.Int32
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		mu.Lock()
		defer mu.Unlock()
		var set jose.JSONWebKeySet
		for _, k := range published {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.key.PublicKey, KeyID: k.id, Algorithm: "RS256", Use: "sig"})
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	defer idp.Close()
	clk := fakeclock.New(time.Unix(1_800_000_000, 0))
	keys := &issuerKeys{url: idp.URL, client: idp.Client(), clock: clk}
	ctx := context.Background()
	claims := map[string]any{"sub": "alice"}

	k1 := published[0]
	if _, err := keys.VerifySignature(ctx, k1.sign(t, claims)); err != nil {
		t.Fatalf("a published key's token: %v", err)
	}
	stranger := newTestKey(t, "nope")
	for i := 0; i < 50; i++ {
		if _, err := keys.VerifySignature(ctx, stranger.sign(t, claims)); err == nil {
			t.Fatal("a token of an unpublished key verified")
		}
		clk.Advance(100 * time.Millisecond)
	}
	if n := fetches.Load(); n > 2 {
		t.Fatalf("50 tokens of an unknown key over 5 s made %d key-set fetches", n)
	}
	// Rotation: a new key is published beside the old, then the old one
	// withdrawn; each is followed once keyRefetchEvery has passed.
	k2 := newTestKey(t, "k2")
	mu.Lock()
	published = []testKey{k1, k2}
	mu.Unlock()
	clk.Advance(keyRefetchEvery)
	for name, k := range map[string]testKey{"new": k2, "previous": k1} {
		if _, err := keys.VerifySignature(ctx, k.sign(t, claims)); err != nil {
			t.Fatalf("%s key during rotation: %v", name, err)
		}
	}
	mu.Lock()
	published = []testKey{k2, newTestKey(t, "k3")}
	k3 := published[1]
	mu.Unlock()
	clk.Advance(keyRefetchEvery)
	if _, err := keys.VerifySignature(ctx, k3.sign(t, claims)); err != nil {
		t.Fatalf("after the second rotation: %v", err)
	}
	if _, err := keys.VerifySignature(ctx, k1.sign(t, claims)); err == nil {
		t.Fatal("a withdrawn key's token verified")
	}
}
