package relay

import "unicode/utf8"

// maxModelID bounds the model of a request: model ids are short, and the
// model is stored with every request event, so a request naming a
// megabyte-long model must not store it.
const maxModelID = 256

// validModelID accepts short, valid UTF-8 without control characters: the
// model is stored with the request event, and PostgreSQL cannot store
// U+0000 in text (one such row would hold back every event of its batch).
func validModelID(m string) bool {
	if len(m) > maxModelID || !utf8.ValidString(m) {
		return false
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
