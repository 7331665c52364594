// Package affinity keeps a session's requests on one upstream, so the
// provider's prompt cache of the session stays warm. Every replica
// chooses a session's upstream the same way without talking to the
// others (weighted rendezvous hashing of the session over the upstreams);
// only a move away from that choice, made when the chosen upstream could
// not take the session, is recorded, and shared between replicas through
// the database (docs/routing.md).
package affinity

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
)

// SessionHeader is the header Claude Code sends with every request of one
// session (a UUID per session).
const SessionHeader = "X-Claude-Code-Session-Id"

// maxSessionID bounds the header value taken as a session: a longer one
// is no session id, and the key's input stays on the stack.
const maxSessionID = 200

// Key identifies a session: a digest of the principal and what names the
// session, so a session name of one principal never meets another's and
// the stored key reveals neither.
type Key [16]byte

// IsZero reports whether k names no session.
func (k Key) IsZero() bool { return k == Key{} }

// String is k in hex, as stored.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// ParseKey reads a key String wrote.
func ParseKey(s string) (Key, bool) {
	var k Key
	if len(s) != 2*len(k) {
		return k, false
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return Key{}, false
	}
	return k, true
}

// Source kinds of a key: the same text is a different session when it
// came from the header or from a prompt.
const (
	fromHeader byte = 'h'
	fromPrompt byte = 'p'
)

func digest(principalID string, kind byte, name string) Key {
	var buf [256 + maxSessionID + 2]byte
	b := append(buf[:0], principalID...)
	b = append(b, 0, kind)
	b = append(b, name...)
	sum := sha256.Sum256(b)
	var k Key
	copy(k[:], sum[:])
	return k
}

// HeaderKey is the session of a request carrying Claude Code's session
// header value id; zero when id is empty, too long or holds anything but
// printable ASCII (then it names no session this proxy trusts to group).
func HeaderKey(principalID, id string) Key {
	if id == "" || len(id) > maxSessionID {
		return Key{}
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return Key{}
		}
	}
	return digest(principalID, fromHeader, id)
}

// PromptKey is the session of a request by its prompt: the keep-alive
// session's hash (PromptHash), which every turn of one conversation
// shares. Zero when the body is not a Messages request with a message.
func PromptKey(principalID string, body []byte) Key {
	var r struct {
		Model    string            `json:"model"`
		System   json.RawMessage   `json:"system"`
		Tools    json.RawMessage   `json:"tools"`
		Messages []json.RawMessage `json:"messages"`
	}
	if json.Unmarshal(body, &r) != nil || r.Model == "" || len(r.Messages) == 0 {
		return Key{}
	}
	return digest(principalID, fromPrompt, PromptHash(principalID, r.Model, r.System, r.Tools, r.Messages[0]))
}

// PromptHash identifies a conversation: SHA-256 over the principal, the
// model, the system prompt, the tools and the first message. Every turn of
// one conversation repeats those, so turns map to one session; two
// conversations that share them also share their cached prefix. The
// keep-alive sessions are keyed by it too (keepalive.SessionHash).
func PromptHash(principalID, model string, system, tools, first json.RawMessage) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(principalID), []byte(model), system, tools, first} {
		h.Write(part)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Score is upstream id's weighted rendezvous score for session k: the
// session goes to the upstream of highest score, so every replica agrees
// without coordination, an upstream of twice the weight wins twice as
// many sessions, and an upstream leaving moves only its own sessions.
// Weight 0 (or less) never wins.
func Score(k Key, id string, weight int) float64 {
	if weight <= 0 {
		return math.Inf(-1)
	}
	// FNV-1a over the key and the id, then a finaliser so close ids give
	// unrelated draws.
	h := uint64(14695981039346656037)
	for _, c := range k {
		h = (h ^ uint64(c)) * 1099511628211
	}
	for i := 0; i < len(id); i++ {
		h = (h ^ uint64(id[i])) * 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	// A uniform draw in (0, 1): 53 bits, never 0.
	u := (float64(h>>11) + 0.5) / (1 << 53)
	// -w/ln(u) is the weighted rendezvous score: its maximum falls on
	// each upstream with probability proportional to its weight.
	return -float64(weight) / math.Log(u)
}
