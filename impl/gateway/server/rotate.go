package server

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/capture"
	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/keepalive"
	"github.com/pillarhq/pillar/impl/gateway/oauth"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// sealedAD is the associated data a sealed value is bound to, made the
// way its writer makes it (an upstream credential sealed before they were
// bound to origins opens with credential.LegacyAD instead: see openOld).
func sealedAD(v store.Sealed) ([]byte, error) {
	switch v.Kind {
	case store.SealedUpstreamCredential:
		return credential.AD(v.UpstreamID, v.UpstreamKind, v.BaseURL, v.OAuthTokenURL), nil
	case store.SealedOAuthVerifier:
		return oauth.FlowAD(v.State), nil
	case store.SealedKeepAliveSnapshot:
		return keepalive.AD(v.PrincipalID, v.SessionHash, v.UpstreamID, v.Generation), nil
	case store.SealedWebhookSecret:
		return credential.WebhookAD(v.WebhookID, v.BaseURL), nil
	case store.SealedCapturedExchange:
		return capture.AD(v.ExchangeID, v.PrincipalID), nil
	}
	return nil, fmt.Errorf("unknown sealed kind %q", v.Kind)
}

// rotateMasterKey re-seals every sealed value from the old master key to
// the new one in one transaction. A value the old key does not open aborts
// it with nothing changed. keyFile, when not empty, is the embedded
// default's key file the old key came from: it receives the new key once
// the transaction commits (first beside it as keyFile.new, so a crash in
// between leaves the new key on disk).
func rotateMasterKey(ctx context.Context, st store.Store, oldKey, newKey []byte, keyFile string, stderr io.Writer) error {
	if subtle.ConstantTimeCompare(oldKey, newKey) == 1 {
		return errors.New("the new master key is the old one: nothing to rotate")
	}
	oldBox, err := secret.New(oldKey)
	if err != nil {
		return err
	}
	newBox, err := secret.New(newKey)
	if err != nil {
		return err
	}
	if keyFile != "" {
		if err := secret.WriteFileAtomic(keyFile+".new", []byte(encodeKey(newKey)+"\n")); err != nil {
			return fmt.Errorf("write the new key beside the key file: %w", err)
		}
	}
	n, err := st.ResealAll(store.WithActor(ctx, "storage-cli"), func(v store.Sealed) ([]byte, error) {
		ad, err := sealedAD(v)
		if err != nil {
			return nil, err
		}
		pt, err := oldBox.Open(v.Ciphertext, ad)
		if err != nil && v.Kind == store.SealedUpstreamCredential {
			// Not re-bound yet (no replica of this version started since):
			// re-sealed bound to the origins its row names, as start-up does.
			pt, err = oldBox.Open(v.Ciphertext, credential.LegacyAD(v.UpstreamID))
		}
		if err != nil {
			return nil, fmt.Errorf("the old master key does not open the %s of %s: %w", strings.ReplaceAll(v.Kind, "_", " "), sealedOwner(v), err)
		}
		return newBox.Seal(pt, ad)
	})
	if err != nil {
		if keyFile != "" {
			os.Remove(keyFile + ".new")
		}
		return fmt.Errorf("nothing changed: %w", err)
	}
	if keyFile != "" {
		if err := os.Rename(keyFile+".new", keyFile); err != nil {
			return fmt.Errorf("re-sealed %d value(s) under the new key, but replacing %s failed (the new key is in %s.new; move it there): %w", n, keyFile, keyFile, err)
		}
		fmt.Fprintf(stderr, "re-sealed %d value(s) under the new master key; %s now holds it\n", n, keyFile)
		return nil
	}
	fmt.Fprintf(stderr, "re-sealed %d value(s) under the new master key; restart every replica with it as PROXY_MASTER_KEY\n", n)
	return nil
}

func sealedOwner(v store.Sealed) string {
	switch v.Kind {
	case store.SealedOAuthVerifier:
		return "OAuth flow of upstream " + v.UpstreamID
	case store.SealedKeepAliveSnapshot:
		return "keep-alive session of principal " + v.PrincipalID
	case store.SealedWebhookSecret:
		return "webhook " + v.WebhookID
	case store.SealedCapturedExchange:
		return "captured exchange " + v.ExchangeID
	}
	return "upstream " + v.UpstreamID
}

// encodeKey writes a key the way the embedded default's key file holds it.
func encodeKey(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

// rotationKeys finds the old and the new master key: --old-key-file or
// PROXY_MASTER_KEY (on SQLite, absent both, the key file beside the
// database, which is then also rewritten), and --new-key-file or
// PROXY_NEW_MASTER_KEY. Key files must be mode 0600 or stricter.
func rotationKeys(db DatabaseURL, oldFile, newFile string, getenv func(string) string) (oldKey, newKey []byte, keyFile string, err error) {
	load := func(file, env string) ([]byte, error) {
		if file != "" {
			data, err := secret.ReadSecretFile(file)
			if err != nil {
				return nil, err
			}
			k, err := secret.ParseKey(string(data))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			return k, nil
		}
		if v := getenv(env); v != "" {
			k, err := secret.ParseKey(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", env, err)
			}
			return k, nil
		}
		return nil, nil
	}
	if oldKey, err = load(oldFile, "PROXY_MASTER_KEY"); err != nil {
		return nil, nil, "", fmt.Errorf("old key: %w", err)
	}
	if path, beside := db.fileBeside(".key"); oldKey == nil && beside {
		keyFile = path
		data, rerr := secret.ReadSecretFile(keyFile)
		if rerr != nil {
			return nil, nil, "", fmt.Errorf("old key: %w", rerr)
		}
		if oldKey, err = secret.ParseKey(string(data)); err != nil {
			return nil, nil, "", fmt.Errorf("old key: %s: %w", keyFile, err)
		}
	}
	if oldKey == nil {
		return nil, nil, "", errors.New("old key: set PROXY_MASTER_KEY or --old-key-file")
	}
	if newKey, err = load(newFile, "PROXY_NEW_MASTER_KEY"); err != nil {
		return nil, nil, "", fmt.Errorf("new key: %w", err)
	}
	if newKey == nil {
		return nil, nil, "", errors.New("new key: set PROXY_NEW_MASTER_KEY or --new-key-file (32 bytes, hex or base64)")
	}
	return oldKey, newKey, keyFile, nil
}
