package store

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"strings"
	"time"
)

// base32hex keeps byte order in text order, so ids sort by creation time.
var idEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)

// NewID returns an identifier such as "up_06f2…" with the given prefix: 48
// bits of millisecond time then 32 random bits, so ids sort in creation
// order (the built-in router orders upstreams by it) and never collide in
// practice.
func NewID(prefix string) string {
	var b [10]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixMilli())<<16)
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails on supported platforms
	return prefix + "_" + strings.ToLower(idEncoding.EncodeToString(b[:]))
}
