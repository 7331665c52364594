// Package jsonesc reads JSON string escapes for the gateway's hand-written
// scanners (the relay's request scanner, the OpenAI adapter's one-pass
// decoders and the admin API's bounds check), which must decode a key or
// value exactly as encoding/json does.
package jsonesc

// Hex4 reads the four hex digits of a \u escape at b[at:].
func Hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// Simple is the byte a two-character escape \c stands for; false for \u
// (read with Hex4) and for anything JSON does not allow after a backslash.
func Simple(c byte) (byte, bool) {
	switch c {
	case '"', '\\', '/':
		return c, true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	}
	return 0, false
}
