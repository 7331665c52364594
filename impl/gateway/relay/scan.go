package relay

import (
	"bytes"
	"errors"
	"strconv"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/pillarhq/pillar/impl/gateway/jsonesc"
)

// The request path needs two top-level fields of a Messages body (model and
// stream) and must not pay for decoding a large prompt. scanRequest walks
// only the top-level object and skips every other value byte by byte.
//
// What it reads must be what the upstream's JSON decoder reads, or a
// client could show the proxy one model and the provider another (the
// allowed_models check, metering and budgets would then apply to the model
// the provider does not serve). So a key is the text it decodes to
// (escapes included), a body that names a top-level key twice is refused
// (decoders keep the last, the proxy would have to guess), and a value is
// either decoded as a decoder decodes it or refused: never read leniently.

var (
	errMalformed = errors.New("request body must be a JSON object")
	errKeyText   = errors.New("request body must be a JSON object whose keys are JSON strings of valid Unicode")
	errModelType = errors.New("model: must be a string")
	errModelText = errors.New("model: must be a JSON string of valid Unicode")
	errStream    = errors.New("stream: must be a boolean")
)

// duplicateKeyError refuses a body that names a top-level key twice.
type duplicateKeyError struct{ key string }

func (e duplicateKeyError) Error() string {
	k := e.key
	if len(k) > 64 {
		k = k[:64] + "..."
	}
	return "request body names the key " + strconv.Quote(k) + " twice; send each key once"
}

// scanRequest returns the top-level "model" string and "stream" boolean.
func scanRequest(b []byte) (model string, stream bool, err error) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return "", false, errMalformed
	}
	i++
	var keys keySet
	for first := true; ; first = false {
		i = skipWS(b, i)
		if i >= len(b) {
			return "", false, errMalformed
		}
		if b[i] == '}' && first {
			return model, stream, nil
		}
		if b[i] != '"' {
			return "", false, errMalformed
		}
		kEnd, esc := scanString(b, i)
		if kEnd < 0 {
			return "", false, errMalformed
		}
		key := b[i+1 : kEnd-1]
		if esc || !plainText(key) {
			// Rare: decoded (one allocation), so that an escaped
			// spelling is the key it stands for.
			k, ok := unquote(b[i:kEnd])
			if !ok {
				return "", false, errKeyText
			}
			key = []byte(k)
		}
		if !keys.add(key) {
			return "", false, duplicateKeyError{string(key)}
		}
		i = skipWS(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return "", false, errMalformed
		}
		i = skipWS(b, i+1)
		vEnd := skipValue(b, i)
		if vEnd < 0 {
			return "", false, errMalformed
		}
		switch string(key) {
		case "model":
			if b[i] != '"' {
				return "", false, errModelType
			}
			raw := b[i:vEnd]
			if inner := raw[1 : len(raw)-1]; plainText(inner) {
				model = internModel(inner)
			} else {
				s, ok := unquote(raw)
				if !ok {
					return "", false, errModelText
				}
				model = s
			}
		case "stream":
			switch string(b[i:vEnd]) {
			case "true":
				stream = true
			case "false", "null": // null: not given, as a decoder reads it
				stream = false
			default:
				return "", false, errStream
			}
		}
		i = skipWS(b, vEnd)
		if i >= len(b) {
			return "", false, errMalformed
		}
		switch b[i] {
		case ',':
			i++
		case '}':
			return model, stream, nil
		default:
			return "", false, errMalformed
		}
	}
}

// keySet is the set of top-level keys a body named so far. A Messages
// body has a dozen or so: they are compared in a small array on the stack;
// past it (a body of thousands of keys) a map keeps the check linear.
type keySet struct {
	few  [24][]byte
	n    int
	many map[string]struct{}
}

// add reports whether k is new, adding it.
func (s *keySet) add(k []byte) bool {
	if s.many != nil {
		if _, dup := s.many[string(k)]; dup {
			return false
		}
		s.many[string(k)] = struct{}{}
		return true
	}
	for _, o := range s.few[:s.n] {
		if string(o) == string(k) {
			return false
		}
	}
	if s.n < len(s.few) {
		s.few[s.n] = k
		s.n++
		return true
	}
	s.many = make(map[string]struct{}, 2*len(s.few))
	for _, o := range s.few {
		s.many[string(o)] = struct{}{}
	}
	s.many[string(k)] = struct{}{}
	return true
}

// plainText reports whether the inside of a JSON string is printable ASCII
// without escapes: then it is, byte for byte, the text it decodes to.
func plainText(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c >= utf8.RuneSelf || c == '\\' {
			return false
		}
	}
	return true
}

// unquote decodes the JSON string s (quotes included) as a JSON decoder
// does; false for what a decoder would refuse or silently change instead
// (an unknown escape, a control character, invalid UTF-8, a lone UTF-16
// surrogate: encoding/json puts U+FFFD in place of the last two, other
// decoders keep them, so the text read would depend on the decoder).
func unquote(s []byte) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	s = s[1 : len(s)-1]
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return "", false
			}
			e := s[i+1]
			i += 2
			if b, ok := jsonesc.Simple(e); ok {
				out = append(out, b)
				continue
			}
			switch e {
			case 'u':
				r, ok := jsonesc.Hex4(s, i)
				if !ok {
					return "", false
				}
				i += 4
				if utf16.IsSurrogate(r) {
					if r >= 0xDC00 || i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
						return "", false
					}
					lo, ok := jsonesc.Hex4(s, i+2)
					if !ok || lo < 0xDC00 || lo > 0xDFFF {
						return "", false
					}
					r = utf16.DecodeRune(r, lo)
					i += 6
				}
				out = utf8.AppendRune(out, r)
			default:
				return "", false
			}
		case c == '"' || c < 0x20:
			return "", false
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				return "", false
			}
			out = append(out, s[i:i+size]...)
			i += size
		}
	}
	return string(out), true
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// scanString returns the index just past the closing quote of the string
// starting at b[i], and whether it contained escapes; -1 if unterminated.
func scanString(b []byte, i int) (int, bool) {
	// Most strings hold no backslash: then the first quote ends them, and
	// two vector searches find it faster than a loop over every byte.
	if q := bytes.IndexByte(b[i+1:], '"'); q >= 0 && bytes.IndexByte(b[i+1:i+1+q], '\\') < 0 {
		return i + 1 + q + 1, false
	}
	esc := false
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			esc = true
			j++
		case '"':
			return j + 1, esc
		}
	}
	return -1, esc
}

// skipValue returns the index just past the JSON value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		end, _ := scanString(b, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, _ := scanString(b, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		j := i
		for j < len(b) {
			c := b[j]
			if c == ',' || c == '}' || c == ']' || c == ' ' || c == '\n' || c == '\r' || c == '\t' {
				break
			}
			j++
		}
		if j == i {
			return -1
		}
		return j
	}
}

// models holds model names scanned lately, so that a request naming one a
// request before it named costs no string allocation (one per request
// otherwise, ~1% of a proxied message's CPU). Direct-mapped: a name whose
// slot another took is allocated again and takes the slot back; each is
// compared in full, so a collision only costs that allocation.
var models [64]atomic.Pointer[string]

// maxInterned bounds the names kept (model ids are tens of bytes).
const maxInterned = 128

func internModel(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > maxInterned {
		// Not kept: 64 slots of names as long as a body could pin
		// megabytes for any client that sends them.
		return string(b)
	}
	slot := &models[(uint(len(b))*31^uint(b[len(b)-1])*7^uint(b[len(b)/2]))%uint(len(models))]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}
