package cloud

import (
	"bytes"
	"encoding/json"
	"io"
)

// The answer of a cloud upstream names the model as the platform knows it
// (anthropic.claude-…-v1:0, claude-…@date); a client is given back the
// name it asked for, in the JSON answer and in a stream's message_start,
// so an SDK, a cache or a log on the client's side sees one name whichever
// upstream served it. The request event keeps the platform's id
// (upstream_model). Only the model's value changes; every other byte is
// the platform's.

// span is where the top-level field name's value lies in the JSON object
// b; ok is false when b is not an object or has no such field. The
// platform's JSON is walked, not decoded: it runs on every answer, and the
// field is near the start of it.
func span(b []byte, name string) (start, end int, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return 0, 0, false
	}
	for i++; ; i++ {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != '"' {
			return 0, 0, false
		}
		k := skipValue(b, i)
		key := b[i:k]
		i = skipSpace(b, k)
		if i >= len(b) || b[i] != ':' {
			return 0, 0, false
		}
		start = skipSpace(b, i+1)
		end = skipValue(b, start)
		if end <= start || end > len(b) {
			return 0, 0, false
		}
		if len(key) == len(name)+2 && string(key[1:len(key)-1]) == name {
			return start, end, true
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ',' {
			return 0, 0, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue is the end of the JSON value starting at b[i]; len(b)+1 when
// it does not end in b.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b) + 1
	}
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return len(b) + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return i // the end of the enclosing object: a scalar ended
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i
			}
			continue
		}
		if depth == 0 && (b[i] == '"' || b[i] == '}' || b[i] == ']') {
			return i + 1
		}
	}
	if depth == 0 {
		return i // a scalar at the end of b
	}
	return len(b) + 1
}

// withModel is the message b with its model named model; b unchanged when
// it names none or already that one.
func withModel(b []byte, model string) []byte {
	start, end, ok := span(b, "model")
	if !ok {
		return b
	}
	q, _ := json.Marshal(model)
	if bytes.Equal(b[start:end], q) {
		return b
	}
	out := make([]byte, 0, len(b)-(end-start)+len(q))
	out = append(append(append(out, b[:start]...), q...), b[end:]...)
	return out
}

// withStartModel is a message_start event's data with its message's model
// named model; any other event unchanged.
func withStartModel(data []byte, model string) []byte {
	start, end, ok := span(data, "message")
	if !ok {
		return data
	}
	m := withModel(data[start:end], model)
	if len(m) == end-start && bytes.Equal(m, data[start:end]) {
		return data
	}
	out := make([]byte, 0, len(data)-(end-start)+len(m))
	return append(append(append(out, data[:start]...), m...), data[end:]...)
}

// firstEventLimit bounds how much of a stream is held looking for the
// end of its first event; a stream whose first event is longer is passed
// on unchanged.
const firstEventLimit = 1 << 20

// startModel passes an SSE stream through, its first event (Anthropic's
// message_start) with the message's model named model.
type startModel struct {
	src   io.ReadCloser
	model string
	held  []byte
	err   error
	begun bool
}

func (s *startModel) Read(p []byte) (int, error) {
	if !s.begun {
		s.begun = true
		s.hold()
	}
	if len(s.held) > 0 {
		n := copy(p, s.held)
		s.held = s.held[n:]
		return n, nil
	}
	if s.err != nil {
		return 0, s.err
	}
	return s.src.Read(p)
}

func (s *startModel) Close() error { return s.src.Close() }

// hold reads up to the end of the first event and renames its model.
func (s *startModel) hold() {
	buf := make([]byte, 0, 4096)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := s.src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if i := bytes.Index(buf, []byte("\n\n")); i >= 0 {
			s.held, s.err = append(renameData(buf[:i], s.model), buf[i:]...), err
			return
		}
		if err != nil || len(buf) > firstEventLimit {
			s.held, s.err = buf, err
			return
		}
	}
}

// renameData is the event block ev with its data line's message_start
// model renamed.
func renameData(ev []byte, model string) []byte {
	i := 0
	if !bytes.HasPrefix(ev, []byte("data: ")) {
		if i = bytes.Index(ev, []byte("\ndata: ")); i < 0 {
			return ev
		}
		i++
	}
	i += len("data: ")
	end := bytes.IndexByte(ev[i:], '\n')
	if end < 0 {
		end = len(ev)
	} else {
		end += i
	}
	d := withStartModel(ev[i:end], model)
	out := make([]byte, 0, len(ev)+len(model))
	return append(append(append(out, ev[:i]...), d...), ev[end:]...)
}
