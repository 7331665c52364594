package openai

import (
	"encoding/json"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/pillarhq/pillar/impl/gateway/jsonesc"
)

// upstreamEvent is what the stream's translation reads of one upstream
// Messages event. Byte fields are views into the event's data (or into the
// decoder's scratch for strings that had escapes): valid until the next
// event is decoded.
type upstreamEvent struct {
	Type  []byte
	Index int

	HasMessage   bool
	MessageID    []byte
	MessageModel []byte
	MessageUsage msgUsage

	HasBlock  bool
	BlockType []byte
	BlockText []byte
	BlockID   []byte
	BlockName []byte

	HasDelta    bool
	DeltaType   []byte
	Text        []byte
	PartialJSON []byte
	HasStop     bool
	StopReason  []byte

	// Usage is message_delta's; UsageSet has a bit per member present
	// with a number (usageInput, ...).
	HasUsage bool
	Usage    msgUsage
	UsageSet uint8

	HasError     bool
	ErrorType    []byte
	ErrorMessage []byte
}

const (
	usageInput = 1 << iota
	usageCacheCreation
	usageCacheRead
	usageOutput
)

// eventDecoder decodes upstream events. The events the translation meets
// are read in one pass over their JSON, without maps or reflection; any
// input outside that subset (a syntax error, a member of an unexpected
// type, a repeated or escaped key, deep nesting) is decoded again by
// encoding/json, so the result is always encoding/json's.
type eventDecoder struct {
	jsonReader
	// ref is encoding/json's target, made at the first fallback: most
	// streams have none, and a Stream is made per answer.
	ref *streamEvent
}

// jsonReader reads JSON values at pos in data in one pass, checking their
// syntax as encoding/json does; a string with escapes (or invalid UTF-8)
// is decoded into scratch.
type jsonReader struct {
	data    []byte
	pos     int
	scratch []byte
}

// jsonString decodes raw when it is one JSON string (and nothing else),
// as encoding/json would into a string.
func jsonString(raw []byte) (string, bool) {
	r := jsonReader{data: raw}
	var v []byte
	if len(raw) == 0 || raw[0] != '"' || !r.str(&v) || r.pos != len(raw) {
		return "", false
	}
	return string(v), true
}

// decode fills e from one event's data; false when encoding/json refuses
// the data.
func (d *eventDecoder) decode(data []byte, e *upstreamEvent) bool {
	if d.fast(data, e) {
		return true
	}
	return d.reference(data, e)
}

// reference decodes data with encoding/json into e.
func (d *eventDecoder) reference(data []byte, e *upstreamEvent) bool {
	if d.ref == nil {
		d.ref = new(streamEvent)
	}
	r := d.ref
	*r = streamEvent{}
	*e = upstreamEvent{}
	if json.Unmarshal(data, r) != nil {
		return false
	}
	e.Type, e.Index = []byte(r.Type), r.Index
	if m := r.Message; m != nil {
		e.HasMessage = true
		e.MessageID, e.MessageModel, e.MessageUsage = []byte(m.ID), []byte(m.Model), m.Usage
	}
	if b := r.ContentBlock; b != nil {
		e.HasBlock = true
		e.BlockType, e.BlockText, e.BlockID, e.BlockName = []byte(b.Type), []byte(b.Text), []byte(b.ID), []byte(b.Name)
	}
	if dl := r.Delta; dl != nil {
		e.HasDelta = true
		e.DeltaType, e.Text, e.PartialJSON = []byte(dl.Type), []byte(dl.Text), []byte(dl.PartialJSON)
		if dl.StopReason != nil {
			e.HasStop, e.StopReason = true, []byte(*dl.StopReason)
		}
	}
	if u := r.Usage; u != nil {
		e.HasUsage = true
		for _, f := range []struct {
			v   *int64
			dst *int64
			bit uint8
		}{
			{u.InputTokens, &e.Usage.InputTokens, usageInput},
			{u.CacheCreationInputTokens, &e.Usage.CacheCreationInputTokens, usageCacheCreation},
			{u.CacheReadInputTokens, &e.Usage.CacheReadInputTokens, usageCacheRead},
			{u.OutputTokens, &e.Usage.OutputTokens, usageOutput},
		} {
			if f.v != nil {
				*f.dst = *f.v
				e.UsageSet |= f.bit
			}
		}
	}
	if x := r.Error; x != nil {
		e.HasError = true
		e.ErrorType, e.ErrorMessage = []byte(x.Type), []byte(x.Message)
	}
	return true
}

// fast decodes data in one pass; false when data is outside the subset it
// reads (then e is to be decoded again).
func (d *eventDecoder) fast(data []byte, e *upstreamEvent) bool {
	d.data, d.pos, d.scratch = data, 0, d.scratch[:0]
	*e = upstreamEvent{}
	if !d.object(e, eventTop) {
		return false
	}
	d.space()
	return d.pos == len(d.data)
}

// The objects of an event the decoder reads members of, and each one's
// members; any other member is skipped (after checking its syntax).
const (
	eventTop = iota
	eventMessage
	eventMessageUsage
	eventBlock
	eventDelta
	eventUsage
	eventError
)

var eventMembers = [...][]string{
	eventTop:          {"type", "index", "message", "content_block", "delta", "usage", "error"},
	eventMessage:      {"id", "model", "usage"},
	eventMessageUsage: {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"},
	eventBlock:        {"type", "text", "id", "name", "input"},
	eventDelta:        {"type", "text", "partial_json", "stop_reason"},
	eventUsage:        {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"},
	eventError:        {"type", "message"},
}

// object reads an object of the kind at d.pos into e; members the kind
// does not name are skipped. A loop of its own rather than fields with a
// callback: every upstream event goes through it, and the calls through
// closures were a good part of a message_start's decoding.
func (d *eventDecoder) object(e *upstreamEvent, kind int) bool {
	if !d.open() {
		return false
	}
	names := eventMembers[kind]
	var seen uint32
	for first := true; ; first = false {
		key, more, ok := d.nextKey(first)
		if !ok || !more {
			return ok
		}
		if m, ok := d.field(names, key, true, &seen); !ok {
			return false
		} else if m >= 0 && !d.value(e, kind, m) {
			return false
		}
	}
}

// value reads the value of member m of an object of the kind, with the
// type encoding/json's target gives it: anything else is left to it.
func (d *eventDecoder) value(e *upstreamEvent, kind, m int) bool {
	switch kind {
	case eventTop:
		switch m {
		case 0:
			return d.str(&e.Type)
		case 1:
			v, ok := d.integer()
			e.Index = int(v)
			return ok
		}
		if d.null() {
			return true // a nil pointer: the object is absent
		}
		switch m {
		case 2:
			e.HasMessage = true
			return d.object(e, eventMessage)
		case 3:
			e.HasBlock = true
			return d.object(e, eventBlock)
		case 4:
			e.HasDelta = true
			return d.object(e, eventDelta)
		case 5:
			e.HasUsage = true
			return d.object(e, eventUsage)
		default:
			e.HasError = true
			return d.object(e, eventError)
		}
	case eventMessage:
		switch m {
		case 0:
			return d.str(&e.MessageID)
		case 1:
			return d.str(&e.MessageModel)
		}
		// A value struct: null leaves it as it is.
		return d.null() || d.object(e, eventMessageUsage)
	case eventMessageUsage:
		v, ok := d.integer()
		*usageField(&e.MessageUsage, m) = v
		return ok
	case eventBlock:
		switch m {
		case 0:
			return d.str(&e.BlockType)
		case 1:
			return d.str(&e.BlockText)
		case 2:
			return d.str(&e.BlockID)
		case 3:
			return d.str(&e.BlockName)
		}
		return d.skip(0) // input: a raw message, any value
	case eventDelta:
		switch m {
		case 0:
			return d.str(&e.DeltaType)
		case 1:
			return d.str(&e.Text)
		case 2:
			return d.str(&e.PartialJSON)
		}
		if d.null() {
			return true
		}
		e.HasStop = true
		return d.str(&e.StopReason)
	case eventUsage:
		if d.null() {
			return true
		}
		v, ok := d.integer()
		*usageField(&e.Usage, m) = v
		e.UsageSet |= 1 << m
		return ok
	default:
		if m == 0 {
			return d.str(&e.ErrorType)
		}
		return d.str(&e.ErrorMessage)
	}
}

// usageField is the member m of a usage, in eventMembers' order.
func usageField(u *msgUsage, m int) *int64 {
	switch m {
	case 0:
		return &u.InputTokens
	case 1:
		return &u.CacheCreationInputTokens
	case 2:
		return &u.CacheReadInputTokens
	}
	return &u.OutputTokens
}

// member is the index of key among names, matched as encoding/json matches
// a key to a field (ASCII case folded: key holds only ASCII); -1 if none.
func member(names []string, key []byte) int {
	for i, n := range names {
		if len(n) != len(key) {
			continue
		}
		j := 0
		for ; j < len(key); j++ {
			c := key[j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != n[j] {
				break
			}
		}
		if j == len(key) {
			return i
		}
	}
	return -1
}

// members reads an object at d.pos, calling value for each member with
// its key and the reader at its value; false on a syntax error, a key
// that key leaves to encoding/json, or when value returns false. The one
// object loop of both decoders.
func (d *jsonReader) members(value func(key []byte) bool) bool {
	if !d.open() {
		return false
	}
	for first := true; ; first = false {
		key, more, ok := d.nextKey(first)
		if !ok || !more {
			return ok
		}
		if !value(key) {
			return false
		}
	}
}

// open reads the opening brace of an object.
func (d *jsonReader) open() bool {
	d.space()
	return d.eat('{')
}

// nextKey reads an object's next member up to its value (first: none was
// read yet): its key and more, with the reader at the value; more is false
// at the object's end, ok false on a syntax error or a key that key leaves
// to encoding/json. The separators are those list reads.
func (d *jsonReader) nextKey(first bool) (key []byte, more, ok bool) {
	d.space()
	if d.eat('}') {
		return nil, false, true
	}
	if !first && (!d.eat(',') || !d.spaceThen()) {
		return nil, false, false
	}
	if key, ok = d.key(); !ok {
		return nil, false, false
	}
	d.space()
	if !d.eat(':') {
		return nil, false, false
	}
	d.space()
	return key, true, true
}

// field matches key among names (at most 32) for an object whose members
// seen so far are in seen: its index, or -1 once a member names do not
// hold is skipped (when skipOthers; refused otherwise). A repeated member
// is refused: encoding/json lets the last one win, merging objects, which
// is left to it.
func (d *jsonReader) field(names []string, key []byte, skipOthers bool, seen *uint32) (int, bool) {
	m := member(names, key)
	if m < 0 {
		return -1, skipOthers && d.skip(0)
	}
	if *seen&(1<<m) != 0 {
		return -1, false
	}
	*seen |= 1 << m
	return m, true
}

// list reads the items of an object or array whose opening bracket is
// read, up to end, calling item for each with the reader at it; false on
// a syntax error or when item returns false.
func (d *jsonReader) list(end byte, item func() bool) bool {
	for first := true; ; first = false {
		d.space()
		if d.eat(end) {
			return true
		}
		if !first && (!d.eat(',') || !d.spaceThen()) {
			return false
		}
		if !item() {
			return false
		}
	}
}

// fields reads an object of members among names (at most 32), calling
// value for each with its index (matched by member) and the reader at its
// value; the others are as field leaves them.
func (d *jsonReader) fields(names []string, skipOthers bool, value func(m int) bool) bool {
	var seen uint32
	return d.members(func(key []byte) bool {
		m, ok := d.field(names, key, skipOthers, &seen)
		return ok && (m < 0 || value(m))
	})
}

func (d *jsonReader) space() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// spaceThen skips white space and reports whether anything follows.
func (d *jsonReader) spaceThen() bool {
	d.space()
	return d.pos < len(d.data)
}

func (d *jsonReader) eat(c byte) bool {
	if d.pos < len(d.data) && d.data[d.pos] == c {
		d.pos++
		return true
	}
	return false
}

func (d *jsonReader) null() bool {
	if len(d.data)-d.pos >= 4 && string(d.data[d.pos:d.pos+4]) == "null" {
		d.pos += 4
		return true
	}
	return false
}

// key reads an object key of printable ASCII without escapes; others
// (which encoding/json may fold to a field's name by Unicode rules) are
// left to it.
func (d *jsonReader) key() ([]byte, bool) {
	if !d.eat('"') {
		return nil, false
	}
	start := d.pos
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			return d.data[start : d.pos-1], true
		case c < 0x20 || c >= 0x80 || c == '\\':
			return nil, false
		}
		d.pos++
	}
	return nil, false
}

// str reads a string into dst; null leaves dst as it is (encoding/json's
// treatment of null for a string).
func (d *jsonReader) str(dst *[]byte) bool {
	if d.null() {
		return true
	}
	if !d.eat('"') {
		return false
	}
	start := d.pos
	plain := true
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			raw := d.data[start:d.pos]
			d.pos++
			if plain {
				*dst = raw
				return true
			}
			*dst = d.unquote(raw)
			return true
		case c == '\\':
			if !d.escape() {
				return false
			}
			plain = false
			continue
		case c < 0x20:
			return false
		case c >= 0x80:
			// Invalid UTF-8 is replaced rune by rune, as encoding/json does.
			if r, n := utf8.DecodeRune(d.data[d.pos:]); r == utf8.RuneError && n == 1 {
				plain = false
			} else {
				d.pos += n
				continue
			}
		}
		d.pos++
	}
	return false
}

// escape checks the escape sequence at d.pos and moves past it.
func (d *jsonReader) escape() bool {
	if d.pos+1 >= len(d.data) {
		return false
	}
	if _, ok := jsonesc.Simple(d.data[d.pos+1]); ok {
		d.pos += 2
		return true
	}
	if d.data[d.pos+1] == 'u' {
		if _, ok := jsonesc.Hex4(d.data, d.pos+2); ok {
			d.pos += 6
			return true
		}
	}
	return false
}

// unquote decodes a string's checked body into the scratch buffer: escapes
// resolved, a surrogate pair joined, a lone surrogate or a byte of invalid
// UTF-8 replaced by U+FFFD.
func (d *jsonReader) unquote(raw []byte) []byte {
	start := len(d.scratch)
	b := d.scratch
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			if e, ok := jsonesc.Simple(raw[i+1]); ok {
				b = append(b, e)
				i += 2
				continue
			}
			// The body is checked: any other escape is \u.
			r, _ := jsonesc.Hex4(raw, i+2)
			i += 6
			if utf16.IsSurrogate(r) {
				// Joined with a following \u escape when the two make a
				// pair; otherwise replaced, the next escape read alone.
				hi := r
				r = utf8.RuneError
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					lo, _ := jsonesc.Hex4(raw, i+2)
					if p := utf16.DecodeRune(hi, lo); p != utf8.RuneError {
						r = p
						i += 6
					}
				}
			}
			b = utf8.AppendRune(b, r)
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n == 1 {
				b = utf8.AppendRune(b, r)
			} else {
				b = append(b, raw[i:i+n]...)
			}
			i += n
		}
	}
	d.scratch = b
	return b[start:len(b):len(b)]
}

// integer reads a number into an int64 field: null leaves it zero, a
// fraction, an exponent or an overflow is left to encoding/json (which
// refuses them).
func (d *jsonReader) integer() (int64, bool) {
	if d.null() {
		return 0, true
	}
	neg := d.eat('-')
	start := d.pos
	var v uint64
	for d.pos < len(d.data) && '0' <= d.data[d.pos] && d.data[d.pos] <= '9' {
		if v > (1<<63)/10 {
			return 0, false
		}
		v = v*10 + uint64(d.data[d.pos]-'0')
		d.pos++
	}
	n := d.pos - start
	switch {
	case n == 0, n > 1 && d.data[start] == '0':
		return 0, false
	case d.pos < len(d.data) && (d.data[d.pos] == '.' || d.data[d.pos] == 'e' || d.data[d.pos] == 'E'):
		return 0, false
	case neg && v > 1<<63, !neg && v > 1<<63-1:
		return 0, false
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// lastMember reads an object and returns the raw value of its last member
// named name (compared as written, as a map's keys are); ok is false for
// anything but an object of plain keys, found when the member is there.
func (d *jsonReader) lastMember(name string) (val []byte, found, ok bool) {
	ok = d.members(func(key []byte) bool {
		start := d.pos
		if !d.skip(1) {
			return false
		}
		if string(key) == name {
			val, found = d.data[start:d.pos], true
		}
		return true
	})
	if !ok {
		return nil, false, false
	}
	d.space()
	return val, found, d.pos == len(d.data)
}

// maxSkipDepth bounds the nesting the decoder skips; deeper values are
// left to encoding/json.
const maxSkipDepth = 32

// skip moves past one value after checking its syntax.
func (d *jsonReader) skip(depth int) bool {
	if depth > maxSkipDepth || d.pos >= len(d.data) {
		return false
	}
	// Loops without callbacks, as in object: the members an event's
	// translation does not read are most of its bytes.
	switch c := d.data[d.pos]; c {
	case '{':
		d.pos++
		for first := true; ; first = false {
			d.space()
			if d.eat('}') {
				return true
			}
			if !first && (!d.eat(',') || !d.spaceThen()) {
				return false
			}
			if d.pos >= len(d.data) || d.data[d.pos] != '"' || !d.skipString() {
				return false
			}
			d.space()
			if !d.eat(':') {
				return false
			}
			d.space()
			if !d.skip(depth + 1) {
				return false
			}
		}
	case '[':
		d.pos++
		for first := true; ; first = false {
			d.space()
			if d.eat(']') {
				return true
			}
			if !first && (!d.eat(',') || !d.spaceThen()) {
				return false
			}
			if !d.skip(depth + 1) {
				return false
			}
		}
	case '"':
		return d.skipString()
	case 't':
		return d.literal("true")
	case 'f':
		return d.literal("false")
	case 'n':
		return d.literal("null")
	default:
		return d.number()
	}
}

func (d *jsonReader) skipString() bool {
	d.pos++
	for d.pos < len(d.data) {
		switch c := d.data[d.pos]; {
		case c == '"':
			d.pos++
			return true
		case c == '\\':
			if !d.escape() {
				return false
			}
			continue
		case c < 0x20:
			return false
		}
		d.pos++
	}
	return false
}

func (d *jsonReader) literal(l string) bool {
	if len(d.data)-d.pos >= len(l) && string(d.data[d.pos:d.pos+len(l)]) == l {
		d.pos += len(l)
		return true
	}
	return false
}

// number moves past a number of JSON's grammar.
func (d *jsonReader) number() bool {
	d.eat('-')
	digits := func() int {
		n := 0
		for d.pos < len(d.data) && '0' <= d.data[d.pos] && d.data[d.pos] <= '9' {
			d.pos++
			n++
		}
		return n
	}
	start := d.pos
	if n := digits(); n == 0 || n > 1 && d.data[start] == '0' {
		return false
	}
	if d.eat('.') && digits() == 0 {
		return false
	}
	if d.eat('e') || d.eat('E') {
		if !d.eat('+') {
			d.eat('-')
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}
