package relay

import "bytes"

// sseTap watches a server-sent event stream as it passes and keeps only the
// data lines that carry usage (message_start and message_delta), so usage
// can be read after the stream ends without buffering the stream.
type sseTap struct {
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
}

// A data line's event type sits in its first bytes; this many are enough to
// decide whether to keep the line.
const tapDecideBytes = 64

// tapMaxLine bounds one kept line (message_start carries the message skeleton).
const tapMaxLine = 64 << 10

func (t *sseTap) feed(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		seg := p
		if i >= 0 {
			seg, p = p[:i], p[i+1:]
		} else {
			p = nil
		}
		if !t.decided || t.keep {
			if len(t.line)+len(seg) <= tapMaxLine {
				t.line = append(t.line, seg...)
			} else {
				if !t.decided {
					// Too long to keep, but its head still decides
					// whether it was message_start (the anchor).
					room := max(0, tapDecideBytes-len(t.line))
					t.line = append(t.line, seg[:min(room, len(seg))]...)
					t.decide()
				}
				t.keep, t.decided = false, true
			}
		}
		if !t.decided && (i >= 0 || len(t.line) >= tapDecideBytes) {
			t.decide()
		}
		if i >= 0 {
			if t.keep && len(t.line) > 0 {
				t.lines = append(t.lines, bytes.Clone(bytes.TrimRight(t.line, "\r")))
			}
			t.line, t.decided, t.keep = t.line[:0], false, false
		}
	}
}

// decide classifies the current line from its first tapDecideBytes.
func (t *sseTap) decide() {
	t.decided = true
	head := t.line
	if len(head) > tapDecideBytes {
		head = head[:tapDecideBytes]
	}
	isData := bytes.HasPrefix(head, []byte("data:"))
	t.keep = isData && (t.usageEvent || bytes.Contains(head, []byte(`"message_start"`)) ||
		bytes.Contains(head, []byte(`"message_delta"`)) || bytes.Contains(head, []byte(`"content_block_start"`)))
	if bytes.Contains(head, []byte("message_start")) {
		t.started = true
	}
	if bytes.HasPrefix(head, []byte("event:")) {
		t.usageEvent = bytes.Contains(head, []byte("message_start")) || bytes.Contains(head, []byte("message_delta")) ||
			bytes.Contains(head, []byte("content_block_start"))
	} else if isData {
		t.usageEvent = false
	}
}
