package relay

import "unicode/utf8"

// maxModelID bounds the model of a request (issue 19.4): model ids are
// short, and the model is stored with every request event, so a request
// naming a megabyte-long model must not store it.
const maxModelID = 256

func validModelID(m string) bool { return len(m) <= maxModelID && utf8.ValidString(m) }
