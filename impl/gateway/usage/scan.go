package usage

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// A scanner for the few fields Extract reads, so that reading usage out of
// a response allocates nothing: encoding/json decoded the whole message
// into structs for four integers, which was most of the allocations of a
// proxied request. Callers check json.Valid first, so these
// functions only ever see well-formed JSON.

// field returns the raw value of key in the JSON object obj (at its top
// level, never in a nested value), or nil when it is absent or obj is not
// an object. Keys match as encoding/json matches them, case-insensitively.
// exact is false when the scanner cannot tell what encoding/json would
// read (a key with an escape, a key given twice): the caller decodes then.
func field(obj []byte, key string) (v []byte, exact bool) {
	var vals [1][]byte
	exact = fields(obj, []string{key}, vals[:])
	return vals[0], exact
}

// fields is field for several keys in one pass over obj: vals[i] gets the
// value of keys[i] (each pass over a line cost as much as the rest of its
// bookkeeping). On an inexact answer vals must not be used.
func fields(obj []byte, keys []string, vals [][]byte) (exact bool) {
	_, exact = object(obj, skipSpace(obj, 0), keys, vals, -1, nil, nil)
	return exact
}

// object is fields for the object at b[i], and returns as well the index
// just past it: past len(b) when it is not closed (a capture cut short),
// so that one walk both reads a line and tells it is whole. The value of
// keys[nest], when it is an object, is walked the same way for nestKeys
// into nestVals, rather than skipped and walked again (message_start's
// usage sits in its message, most of the line).
func object(b []byte, i int, keys []string, vals [][]byte, nest int, nestKeys []string, nestVals [][]byte) (end int, exact bool) {
	clear(vals)
	open := len(b) + 1
	if i >= len(b) || b[i] != '{' {
		return open, true
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return open, true
		}
		ks := i + 1
		var esc bool
		if i, esc = skipKey(b, i); esc {
			return open, false
		}
		k := b[ks:max(ks, i-1)]
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != ':' {
			return open, true
		}
		i = skipSpace(b, i+1)
		vs := i
		j := match(k, keys)
		if j >= 0 && j == nest && i < len(b) && b[i] == '{' {
			var ex bool
			if i, ex = object(b, i, nestKeys, nestVals, -1, nil, nil); !ex {
				return open, false
			}
		} else {
			i = skipValue(b, i)
		}
		if j >= 0 {
			if vals[j] != nil {
				return open, false
			}
			vals[j] = b[vs:min(i, len(b))]
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return open, true
		}
		switch b[i] {
		case '}':
			return i + 1, true
		case ',':
			i = skipSpace(b, i+1)
		default:
			return open, true
		}
	}
}

// match returns the index of the key k folds to, or -1. Every key is
// lower-case ASCII, and a character that folds to an ASCII letter is at
// least as long as it (ſ for s, K for k): a shorter k cannot match, one of
// the same length matches only byte for byte or by ASCII case, and an
// ASCII first byte that is neither case of the key's rules it out.
func match(k []byte, keys []string) int {
	for j, key := range keys {
		if len(k) < len(key) {
			continue
		}
		if len(k) == len(key) && string(k) == key {
			return j
		}
		if k[0] < 0x80 && k[0]|0x20 != key[0] {
			continue
		}
		if bytes.EqualFold(k, []byte(key)) {
			return j
		}
	}
	return -1
}

// whole reports whether end, as object returned it for b, is the end of
// b but for spaces.
func whole(b []byte, end int) bool {
	return end <= len(b) && skipSpace(b, end) == len(b)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] ('"').
// It looks at eight bytes at a time for a quote or a backslash: strings
// are most of the bytes of a line.
func skipString(b []byte, i int) int {
	for i++; i < len(b); {
		if i+8 <= len(b) {
			m := quoteOrEscape(binary.LittleEndian.Uint64(b[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		}
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i += 2
		default:
			i++
		}
	}
	return len(b)
}

// skipKey is skipString for a key, which the scanner cannot match when it
// has an escape: esc reports one, at which it stops (the walk ends there),
// rather than the key being searched for one again.
func skipKey(b []byte, i int) (end int, esc bool) {
	for i++; i < len(b); {
		if i+8 <= len(b) {
			m := quoteOrEscape(binary.LittleEndian.Uint64(b[i:]))
			if m == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(m) >> 3
		}
		switch b[i] {
		case '"':
			return i + 1, false
		case '\\':
			return i, true
		}
		i++
	}
	return len(b), false
}

// quoteOrEscape has the high bit of a byte of w set where w has '"' or
// '\\' (exact for the lowest such byte, which is all skipString uses).
func quoteOrEscape(w uint64) uint64 {
	const lo, hi = 0x0101010101010101, 0x8080808080808080
	q, e := w^(lo*'"'), w^(lo*'\\')
	return ((q-lo)&^q | (e-lo)&^e) & hi
}

// skipValue returns the index just past the value starting at b[i];
// past len(b) for an object or array that is not closed.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b) + 1 // not closed
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\n' && b[i] != '\r' && b[i] != '\t' {
		i++
	}
	return i
}

// integer reads a JSON integer. null is ok and leaves set false (decoding
// null into an int64 leaves it as it was); anything else that is not an
// integer (a fraction, a string) is not ok, as decoding it was an error.
func integer(v []byte) (n int64, set, ok bool) {
	if string(v) == "null" {
		return 0, false, true
	}
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 18 {
		return 0, false, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true, true
}

// usageKeys are the fields of a usage object Extract reads, in the order
// readUsage takes them.
var usageKeys = [...]string{"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "cache_creation"}

// readUsage reads a usage object into u. ok is false when decoding it
// would have been an error (not an object or null, a count that is not an
// integer); set is false when it is absent or null. exact as for field.
func readUsage(obj []byte, u *tokenUsage) (set, ok, exact bool) {
	if obj == nil || string(obj) == "null" {
		return false, true, true
	}
	if obj[0] != '{' {
		return false, false, true
	}
	var got tokenUsage
	var vals [len(usageKeys)][]byte
	if !fields(obj, usageKeys[:], vals[:]) {
		return false, false, false
	}
	for i, dst := range [...]*int64{&got.InputTokens, &got.OutputTokens, &got.CacheCreationInputTokens, &got.CacheReadInputTokens} {
		v := vals[i]
		if v == nil {
			continue
		}
		n, isSet, isInt := integer(v)
		if !isInt {
			return false, false, true
		}
		if isSet {
			*dst = n
		}
	}
	// cache_creation as encoding/json decodes it into a struct: null or
	// absent leaves it zero, anything but an object is an error.
	if cc := vals[4]; cc != nil && string(cc) != "null" {
		if cc[0] != '{' {
			return false, false, true
		}
		v, ex := field(cc, "ephemeral_1h_input_tokens")
		if !ex {
			return false, false, false
		}
		if v != nil {
			n, isSet, isInt := integer(v)
			if !isInt {
				return false, false, true
			}
			if isSet {
				got.CacheCreation.Ephemeral1h = n
			}
		}
	}
	*u = got
	return true, true, true
}
