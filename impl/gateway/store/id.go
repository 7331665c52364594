package store

import (
	"crypto/rand"
	"encoding/base32"
	"strings"
)

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// NewID returns a random identifier such as "up_5HQ2…" with the given prefix.
// 80 random bits keep ids short while collisions stay out of reach.
func NewID(prefix string) string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return prefix + "_" + strings.ToLower(idEncoding.EncodeToString(b[:]))
}
