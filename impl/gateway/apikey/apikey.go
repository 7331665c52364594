// Package apikey is the format of the proxy keys issued to principals:
// "sk-px-" followed by 32 random bytes in unpadded URL-safe base64. Only the
// SHA-256 of a key is ever stored.
package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// Prefix starts every proxy key.
const Prefix = "sk-px-"

// DisplayLen is how many leading characters identify a key in listings.
const DisplayLen = 12

// New returns a fresh key, its display prefix and its hash.
func New() (plaintext, display string, hash [sha256.Size]byte) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	plaintext = Prefix + base64.RawURLEncoding.EncodeToString(b[:])
	return plaintext, plaintext[:DisplayLen], Hash(plaintext)
}

// Hash is the stored form of a key.
func Hash(plaintext string) [sha256.Size]byte { return sha256.Sum256([]byte(plaintext)) }

// WellFormed reports whether s looks like a proxy key.
func WellFormed(s string) bool {
	if !strings.HasPrefix(s, Prefix) || len(s) != len(Prefix)+43 {
		return false
	}
	_, err := base64.RawURLEncoding.DecodeString(s[len(Prefix):])
	return err == nil
}
