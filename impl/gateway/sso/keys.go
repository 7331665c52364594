package sso

import (
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
	"github.com/pillarhq/pillar/impl/clock"
)

// keyRefetchEvery is the least time between two fetches of the issuer's
// key set. A token naming a key the gateway has not seen makes it fetch
// the set again (a rotation), and such tokens cost an anonymous caller
// nothing: without the bound each would cost one call to the issuer.
const keyRefetchEvery = 10 * time.Second

// issuerKeys is the issuer's key set, fetched again when a token names a
// key not in it, at most once per keyRefetchEvery. A rotation is followed
// within that time; a withdrawn key stops verifying at the next fetch.
type issuerKeys struct {
	url    string
	client *http.Client
	clock  clock.Clock

	mu      sync.Mutex
	kids    map[string]bool
	set     *oidc.StaticKeySet
	fetched time.Time // zero: never fetched
}

var _ oidc.KeySet = (*issuerKeys)(nil)

// VerifySignature implements oidc.KeySet.
func (k *issuerKeys) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	kid := tokenKeyID(jwt)
	k.mu.Lock()
	set := k.set
	if set == nil || !k.kids[kid] {
		if k.fetched.IsZero() || k.clock.Now().Sub(k.fetched) >= keyRefetchEvery {
			k.fetched = k.clock.Now()
			if err := k.fetchLocked(ctx); err != nil {
				k.mu.Unlock()
				return nil, err
			}
			set = k.set
		}
	}
	known := k.kids[kid]
	k.mu.Unlock()
	if !known {
		return nil, errors.New("the token's signing key is not in the issuer's key set")
	}
	return set.VerifySignature(ctx, jwt)
}

// fetchLocked reads the key set; k.mu is held (a slow issuer holds back
// only other unknown-key verifications, which wait for this fetch anyway).
func (k *issuerKeys) fetchLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return fmt.Errorf("fetching the issuer's key set: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching the issuer's key set: status %d", resp.StatusCode)
	}
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return fmt.Errorf("reading the issuer's key set: %w", err)
	}
	kids := map[string]bool{}
	var keys []crypto.PublicKey
	for _, key := range set.Keys {
		if key.Use != "" && key.Use != "sig" || !key.IsPublic() {
			continue
		}
		kids[key.KeyID] = true
		keys = append(keys, key.Key)
	}
	k.kids, k.set = kids, &oidc.StaticKeySet{PublicKeys: keys}
	return nil
}

// tokenKeyID is the kid of a compact JWS's protected header ("" when it
// names none or cannot be read; the verification then refuses it).
func tokenKeyID(jwt string) string {
	head, _, ok := strings.Cut(jwt, ".")
	if !ok {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return ""
	}
	var h struct {
		Kid string `json:"kid"`
	}
	if json.Unmarshal(raw, &h) != nil {
		return ""
	}
	return h.Kid
}
