// Package secret seals credentials at rest with an AEAD (AES-256-GCM) under
// the operator's master key. Every ciphertext is bound to associated data
// naming what it belongs to, so a ciphertext copied onto another row fails to
// open.
package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/pillarhq/pillar/impl/atomicfile"
)

// KeySize is the master key length in bytes.
const KeySize = 32

// version prefixes every ciphertext so the format can change without
// ambiguity.
const version byte = 1

// ErrOpen is returned when a ciphertext cannot be authenticated: wrong key,
// wrong associated data, or tampering.
var ErrOpen = errors.New("secret: ciphertext does not authenticate")

// Box seals and opens secrets with one master key. It is safe for concurrent use.
type Box struct {
	aead cipher.AEAD
}

// New returns a Box for a 32-byte master key.
func New(key []byte) (*Box, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("secret: master key must be %d bytes, got %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	return &Box{aead: aead}, nil
}

// Seal encrypts plaintext bound to associatedData: version || nonce || ciphertext.
func (b *Box) Seal(plaintext, associatedData []byte) ([]byte, error) {
	ns := b.aead.NonceSize()
	out := make([]byte, 1+ns, 1+ns+len(plaintext)+b.aead.Overhead())
	out[0] = version
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("secret: nonce: %w", err)
	}
	return b.aead.Seal(out, out[1:1+ns], plaintext, associatedData), nil
}

// Open authenticates and decrypts a ciphertext made by Seal with the same
// associated data.
func (b *Box) Open(ciphertext, associatedData []byte) ([]byte, error) {
	ns := b.aead.NonceSize()
	if len(ciphertext) < 1+ns+b.aead.Overhead() || ciphertext[0] != version {
		return nil, ErrOpen
	}
	pt, err := b.aead.Open(nil, ciphertext[1:1+ns], ciphertext[1+ns:], associatedData)
	if err != nil {
		return nil, ErrOpen
	}
	return pt, nil
}

// ParseKey decodes a master key given as 64 hex characters or as standard or
// URL-safe base64 of 32 bytes.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if len(s) == 2*KeySize {
		if k, err := hex.DecodeString(s); err == nil {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == KeySize {
			return k, nil
		}
	}
	return nil, fmt.Errorf("secret: master key must be %d bytes as hex or base64", KeySize)
}

// LoadOrCreateKeyFile reads a master key from path, creating it with a fresh
// random key (mode 0600) when it does not exist. created reports whether the
// file was written now.
func LoadOrCreateKeyFile(path string) (key []byte, created bool, err error) {
	data, err := ReadSecretFile(path)
	if err == nil {
		k, perr := ParseKey(string(data))
		if perr != nil {
			return nil, false, fmt.Errorf("%s: %w", path, perr)
		}
		return k, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	key = make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, false, err
	}
	if err := WriteFileAtomic(path, []byte(base64.StdEncoding.EncodeToString(key)+"\n")); err != nil {
		return nil, false, err
	}
	return key, true, nil
}

// ErrFileMode is wrapped by ReadSecretFile's refusal of a secret file that
// group or others may read.
var ErrFileMode = errors.New("secret file readable by group or others")

// ReadSecretFile reads a file holding a secret, refusing it (as ssh refuses
// a private key) when its mode lets group or others read or write it: a
// secret left world-readable is a leak waiting to happen, and using it
// silently would hide that. The mode is checked on the opened file, so a
// rename between check and read cannot swap it.
func ReadSecretFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o: %w; run chmod 600 %s", path, m, ErrFileMode, path)
	}
	return io.ReadAll(f)
}

// WriteFileAtomic writes data to path with mode 0600 (creating its
// directory 0700), so readers see the old content or the new, never a
// partial file.
func WriteFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}
