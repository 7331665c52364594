package relay

import (
	"bytes"
	"errors"
	"strconv"
	"sync/atomic"
)

// The request path needs two top-level fields of a Messages body (model and
// stream) and must not pay for decoding a large prompt. scanRequest walks
// only the top-level object and skips every other value byte by byte.

var errMalformed = errors.New("request body is not a JSON object")

// scanRequest returns the top-level "model" string and "stream" boolean.
func scanRequest(b []byte) (model string, stream bool, err error) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return "", false, errMalformed
	}
	i++
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
		i = skipWS(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return "", false, errMalformed
		}
		i = skipWS(b, i+1)
		vEnd := skipValue(b, i)
		if vEnd < 0 {
			return "", false, errMalformed
		}
		if !esc {
			switch string(key) {
			case "model":
				if b[i] != '"' {
					return "", false, errors.New("model must be a string")
				}
				raw := b[i:vEnd]
				if bytes.IndexByte(raw, '\\') >= 0 {
					s, uerr := strconv.Unquote(string(raw))
					if uerr != nil {
						return "", false, errMalformed
					}
					model = s
				} else {
					model = internModel(raw[1 : len(raw)-1])
				}
			case "stream":
				stream = vEnd-i == 4 && string(b[i:vEnd]) == "true"
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
