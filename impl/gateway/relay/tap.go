package relay

import "bytes"

// sseTap watches a server-sent event stream as it passes and keeps only the
// data lines that carry usage (message_start and message_delta), so usage
// can be read after the stream ends without buffering the stream, and the
// data line of an error event the upstream ends the stream with.
//
// It runs on every read of every stream, so it copies nothing it does not
// keep: a line's head is classified where it lies in the read, and only a
// head split across reads, or a kept line, is gathered in line.
type sseTap struct {
	// line holds the current line's head while it is undecided and split
	// across reads (fewer than tapDecideBytes), or the line so far once it
	// is decided to be kept.
	line    []byte
	decided bool
	keep    bool
	lines   [][]byte
	// usageEvent is set after an "event: message_start|message_delta|
	// content_block_start" line, so the data line that follows is kept
	// whatever its key order.
	usageEvent bool
	// started is set once message_start went by: the response-begin moment
	// of a stream (the keep-alive anchor).
	started bool
	// kept backs the kept lines, so a stream's few usage lines cost one
	// allocation rather than one each.
	kept []byte
	// errEvent is set after an "event: error" line: the data line that
	// follows is the error the upstream ended its stream with, kept in
	// errData (errLine is set while that line is read).
	errEvent, errLine bool
	errData           []byte
}

// A data line's event type sits in its first bytes; this many are enough to
// decide whether to keep the line.
const tapDecideBytes = 64

// tapMaxLine bounds one kept line (message_start carries the message skeleton).
const tapMaxLine = 64 << 10

func (t *sseTap) feed(p []byte) {
	if !t.decided && len(t.line) == 0 && !t.usageEvent && !t.errEvent && !mayNameUsage(p) && !mayNameError(p) {
		// Whole lines that name no usage event and no error change nothing
		// (most of a stream: content_block_delta, ping): only an
		// unterminated rest, whose head may go on in the next read, goes
		// the long way.
		p = p[bytes.LastIndexByte(p, '\n')+1:]
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		seg := p
		if i >= 0 {
			seg, p = p[:i], p[i+1:]
		} else {
			p = nil
		}
		switch {
		case !t.decided:
			prev := len(t.line)
			if i < 0 && prev+len(seg) < tapDecideBytes {
				t.line = append(t.line, seg...) // the head goes on in the next read
				continue
			}
			head := seg
			if prev > 0 {
				t.line = append(t.line, seg[:min(len(seg), tapDecideBytes-prev)]...)
				head = t.line
			}
			t.decide(head[:min(len(head), tapDecideBytes)])
			t.line = t.line[:prev]
			if t.keep && prev == 0 && i >= 0 {
				// The whole line is in this read: kept without gathering.
				if len(seg) <= tapMaxLine {
					t.keepLine(trimCR(seg))
				}
				t.decided, t.keep, t.errLine = false, false, false
				continue
			}
			if t.keep {
				t.gather(seg)
			}
		case t.keep:
			t.gather(seg)
		}
		if i >= 0 {
			if t.keep && len(t.line) > 0 {
				t.keepLine(trimCR(t.line))
			}
			t.line, t.decided, t.keep, t.errLine = t.line[:0], false, false, false
		}
	}
}

// gather adds seg to the kept line, or gives the line up past tapMaxLine.
func (t *sseTap) gather(seg []byte) {
	if len(t.line)+len(seg) > tapMaxLine {
		t.keep = false
		return
	}
	t.line = append(t.line, seg...)
}

// keepLine keeps a whole kept line: an error event's as errData (the last
// one wins), a usage line with the others.
func (t *sseTap) keepLine(line []byte) {
	if t.errLine {
		t.errData = append(t.errData[:0], line...)
		return
	}
	t.save(line)
}

// save keeps a copy of line. The copies share kept; each is capped at its
// length so appending to one cannot overwrite the next.
func (t *sseTap) save(line []byte) {
	if cap(t.kept)-len(t.kept) < len(line) {
		t.kept = make([]byte, 0, max(len(line), 512, 2*cap(t.kept)))
	}
	if t.lines == nil {
		t.lines = make([][]byte, 0, 4) // a stream keeps three or so
	}
	s := len(t.kept)
	t.kept = append(t.kept, line...)
	t.lines = append(t.lines, t.kept[s:len(t.kept):len(t.kept)])
}

func trimCR(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == '\r' {
		b = b[:len(b)-1]
	}
	return b
}

// decide classifies the current line from head, its first tapDecideBytes.
// The comparisons are with constant strings, which compile to a few loads.
func (t *sseTap) decide(head []byte) {
	t.decided = true
	switch {
	case len(head) >= 6 && string(head[:6]) == "event:":
		named, _, start := usageNames(head)
		t.usageEvent = named
		t.errEvent = isErrorEvent(head)
		t.keep = false
		t.started = t.started || start
	case len(head) >= 5 && string(head[:5]) == "data:":
		if t.usageEvent && t.started {
			t.keep = true // nothing the head says can change the outcome
		} else {
			_, quoted, start := usageNames(head)
			t.keep = t.usageEvent || quoted
			t.started = t.started || start
		}
		if t.errEvent {
			t.keep, t.errLine = true, true
		}
		t.usageEvent, t.errEvent = false, false
	default:
		t.keep = false
		if !t.started {
			_, _, start := usageNames(head)
			t.started = start
		}
	}
}

// mayNameError reports whether a line of p, which starts a line, may be
// an "event: error" line: one search per line for its end, rather than
// one search of the whole read for a word JSON text is full of.
func mayNameError(p []byte) bool {
	for {
		if v, ok := bytes.CutPrefix(p, []byte("event:")); ok {
			v, _ = bytes.CutPrefix(v, []byte(" "))
			if bytes.HasPrefix(v, []byte("error")) {
				return true
			}
		}
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			return false
		}
		p = p[i+1:]
	}
}

// isErrorEvent reports whether the event line head names the error event
// (the field's value after one optional space, as SSE reads it).
func isErrorEvent(head []byte) bool {
	v := head[len("event:"):]
	if len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	return string(trimCR(v)) == "error"
}

// mayNameUsage reports whether p holds message_ or content_block_start,
// which every name usageNames looks for begins with: one pass over the
// underscores of a whole read, where classifying its lines one by one
// costs several searches per line.
func mayNameUsage(p []byte) bool {
	for j := 7; j < len(p); j++ {
		k := bytes.IndexByte(p[j:], '_')
		if k < 0 {
			return false
		}
		j += k
		switch b := p[j-7:]; b[0] {
		case 'm':
			if string(b[:8]) == "message_" {
				return true
			}
		case 'c':
			if len(b) >= 19 && string(b[:19]) == "content_block_start" {
				return true
			}
			if len(b) >= 14 && string(b[:14]) == "content_block_" {
				// Most of a stream is content_block_delta, named twice
				// an event: no name can start inside "content_block_",
				// so its second underscore need not be looked at.
				j += 6
			}
		}
	}
	return false
}

// usageNames reports whether head names message_start, message_delta or
// content_block_start anywhere (named), one of them as a JSON string
// (quoted), and message_start anywhere (start). Each name has its first
// underscore 7 bytes in, so one pass over the underscores finds them all.
func usageNames(head []byte) (named, quoted, start bool) {
	for j := 7; j < len(head); j++ {
		k := bytes.IndexByte(head[j:], '_')
		if k < 0 {
			break
		}
		j += k // head[j] == '_'
		b := head[j-7:]
		n := 0
		switch {
		case len(b) >= 13 && string(b[:13]) == "message_start":
			n, start = 13, true
		case len(b) >= 13 && string(b[:13]) == "message_delta":
			n = 13
		case len(b) >= 19 && string(b[:19]) == "content_block_start":
			n = 19
		default:
			continue
		}
		named = true
		if j >= 8 && head[j-8] == '"' && len(b) > n && b[n] == '"' {
			quoted = true
		}
	}
	return named, quoted, start
}
