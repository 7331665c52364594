// Package apikey is the format of the proxy keys issued to principals:
// "sk-px-" followed by 32 random bytes in unpadded URL-safe base64. Only the
// SHA-256 of a key is ever stored. The admin API issues keys with New; the
// proxy path hashes what a client presents with Hash (or Parse) and looks
// the hash up, so neither side needs the other's package.
package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// Prefix starts every proxy key.
const Prefix = "sk-px-"

// DisplayLen is how many leading characters identify a key in listings.
const DisplayLen = 12

// Len is the length of a key: the prefix and 43 base64 characters.
const Len = len(Prefix) + 43

// ErrMalformed reports a string that cannot be a proxy key.
var ErrMalformed = errors.New("not a proxy key: want sk-px- followed by 43 URL-safe base64 characters")

// encoding rejects non-canonical trailing bits, so every key has exactly one
// spelling and two spellings can never hash differently for the same bytes.
var encoding = base64.RawURLEncoding.Strict()

// New returns a fresh key, its display prefix and its hash.
func New() (plaintext, display string, hash [sha256.Size]byte) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (Go 1.24+)
	plaintext = Prefix + encoding.EncodeToString(b[:])
	return plaintext, plaintext[:DisplayLen], Hash(plaintext)
}

// Hash is the stored form of a key.
func Hash(plaintext string) [sha256.Size]byte { return sha256.Sum256([]byte(plaintext)) }

// Parse checks the format of a presented key and returns its hash; a
// malformed string is refused without a lookup.
func Parse(s string) ([sha256.Size]byte, error) {
	if !WellFormed(s) {
		return [sha256.Size]byte{}, ErrMalformed
	}
	return Hash(s), nil
}

// WellFormed reports whether s looks like a proxy key.
func WellFormed(s string) bool {
	if len(s) != Len || !strings.HasPrefix(s, Prefix) {
		return false
	}
	b, err := encoding.DecodeString(s[len(Prefix):])
	return err == nil && len(b) == 32
}
