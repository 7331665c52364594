// Package fuel meters a WebAssembly module: it rewrites the module so that
// every function entry and every loop iteration pays, from a fuel counter
// the host sets before each call, for the instructions it is about to
// run, and traps when the fuel is spent. A metered module cannot run
// longer than its fuel allows, so it can run without wazero's termination
// checks, which start a watcher goroutine on every call.
//
// Only modules whose every instruction is understood and bounded are
// metered: no imports (a host function could block), no bulk memory or
// table operations (their cost depends on an operand), no ref.func (a host
// call worth hundreds of units), no tail calls, exceptions, SIMD, threads
// or GC instructions, no start section (it runs inside instantiation,
// where the host cannot stop it; export _initialize instead), and no
// export of their own named Export or Stop. Anything else is left to the
// checked runtime (ErrNotMeterable). An instruction pays one unit,
// memory.grow growCost (it calls the host).
//
// The counter is an exported mutable i64 global named Export. When a
// charge exceeds what is left the module sets it to Spent and traps. It
// does the same when the host has set the i32 global named Stop to
// non-zero: the guest only reads that one, so a host write during a call
// is never lost (a write to the counter is, to the guest's own
// read-modify-write of it). Every charge reads Stop, and so does a check
// after every call and every checkEvery instructions of straight code, so
// a stopped call ends within a few thousand instructions however long its
// bodies.
package fuel

import (
	"bytes"
	"errors"
	"fmt"
)

// Export names the fuel global in a metered module.
const Export = "pillar:fuel"

// Stop names the global that, set to non-zero, makes the next charge trap
// as if the fuel had run out.
const Stop = "pillar:stop"

// Spent is the counter's value after a call ran out of fuel.
const Spent = ^uint64(0)

// ErrNotMeterable: the module uses something this package does not meter.
var ErrNotMeterable = errors.New("module cannot be metered")

// Section ids and the order rank of each (custom sections go anywhere).
const (
	secCustom   = 0
	secImport   = 2
	secGlobal   = 6
	secExport   = 7
	secStart    = 8
	secCode     = 10
	typeI64     = 0x7e
	kindGlobal  = 0x03
	opEnd       = 0x0b
	opLoop      = 0x03
	opGlobalGet = 0x23
	opGlobalSet = 0x24
	opI64Const  = 0x42
)

var rank = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

// Meter returns the metered module, its fuel counter starting at initial
// (nothing of the guest runs at instantiation: a start section is refused,
// so the host sets the counter before any code spends it), or
// ErrNotMeterable. The module must already have been validated: Meter
// checks only what it needs to rewrite it soundly.
func Meter(wasm []byte, initial uint64) ([]byte, error) { return meter(wasm, initial, checkEvery) }

// meter is Meter with a stop check every every instructions (tests make
// it short, so that small modules have runs to split).
func meter(wasm []byte, initial uint64, every int) ([]byte, error) {
	if len(wasm) < 8 || !bytes.Equal(wasm[:8], []byte{0, 'a', 's', 'm', 1, 0, 0, 0}) {
		return nil, fmt.Errorf("%w: not a WebAssembly 1.0 binary", ErrNotMeterable)
	}
	var secs []section
	r := reader{b: wasm, p: 8}
	for !r.done() {
		id := r.byte()
		n := r.u32()
		body := r.bytes(int(n))
		if r.err != nil {
			return nil, r.err
		}
		if id != secCustom && rank[id] == 0 {
			return nil, fmt.Errorf("%w: section %d", ErrNotMeterable, id)
		}
		secs = append(secs, section{id, body})
	}
	var globals uint32
	var haveGlobal, haveExport bool
	for _, s := range secs {
		switch s.id {
		case secImport:
			sr := reader{b: s.body}
			if sr.u32() != 0 {
				return nil, fmt.Errorf("%w: it imports (a host function may block)", ErrNotMeterable)
			}
		case secGlobal:
			sr := reader{b: s.body}
			globals, haveGlobal = sr.u32(), true
		case secStart:
			return nil, fmt.Errorf("%w: a start section runs before the host can stop it", ErrNotMeterable)
		case secExport:
			haveExport = true
			if err := exportsCounterName(s.body); err != nil {
				return nil, err
			}
		}
	}
	// The counter and the stop flag are the last globals: no imports, so
	// their indexes follow the globals the module defines.
	global, stop := leb(nil, uint64(globals)), leb(nil, uint64(globals)+1)
	counter := []byte{typeI64, 1, opI64Const}
	counter = sleb(counter, int64(initial))
	counter = append(counter, opEnd)
	counter = append(counter, 0x7f, 1, 0x41, 0, opEnd) // mut i32 = 0
	export := leb(nil, uint64(len(Export)))
	export = append(append(export, Export...), kindGlobal)
	export = append(export, global...)
	export = leb(export, uint64(len(Stop)))
	export = append(append(export, Stop...), kindGlobal)
	export = append(export, stop...)
	if !haveGlobal {
		secs = insert(secs, func(id byte) bool { return rank[id] > rank[secGlobal] }, section{secGlobal, []byte{0}})
	}
	if !haveExport {
		secs = insert(secs, func(id byte) bool { return rank[id] > rank[secExport] }, section{secExport, []byte{0}})
	}
	out := append([]byte(nil), wasm[:8]...)
	for _, s := range secs {
		body := s.body
		var err error
		switch s.id {
		case secGlobal:
			body, err = appendEntries(body, 2, counter)
		case secExport:
			body, err = appendEntries(body, 2, export)
		case secCode:
			body, err = meterCode(body, global, stop, every)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s.id)
		out = leb(out, uint64(len(body)))
		out = append(out, body...)
	}
	return out, nil
}

type section struct {
	id   byte
	body []byte
}

// insert puts s before the first non-custom section that must follow it.
func insert(secs []section, after func(byte) bool, s section) []section {
	for i, x := range secs {
		if x.id != secCustom && after(x.id) {
			return append(secs[:i], append([]section{s}, secs[i:]...)...)
		}
	}
	return append(secs, s)
}

// appendEntries adds n entries to a vector section.
func appendEntries(body []byte, n uint64, entries []byte) ([]byte, error) {
	r := reader{b: body}
	have := r.u32()
	if r.err != nil {
		return nil, r.err
	}
	out := leb(nil, uint64(have)+n)
	out = append(out, body[r.p:]...)
	return append(out, entries...), nil
}

// meterCode charges every function body on entry and every loop on each
// iteration. It refuses code the charges would more than quadruple (a
// body made mostly of loops), so that neither the rewrite nor the
// compilation of its result costs much more than the module's own.
func meterCode(body, global, stop []byte, every int) ([]byte, error) {
	r := reader{b: body}
	n := r.u32()
	room := 4*len(body) + 1<<16
	out := make([]byte, 0, len(body)+len(body)/4)
	out = leb(out, uint64(n))
	for i := uint32(0); i < n && r.err == nil; i++ {
		size := r.u32()
		fn := r.bytes(int(size))
		if r.err != nil {
			return nil, r.err
		}
		var err error
		if out, err = meterFunc(out, fn, global, stop, every, &room); err != nil {
			return nil, err
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	if !r.done() {
		return nil, fmt.Errorf("%w: trailing bytes in the code section", ErrNotMeterable)
	}
	return out, nil
}

// exportsCounterName refuses a module that already exports Export or
// Stop: the host must find the counter under that name, not the guest's own.
func exportsCounterName(body []byte) error {
	r := reader{b: body}
	for n := r.u32(); n > 0 && r.err == nil; n-- {
		name := r.bytes(int(r.u32()))
		r.byte()
		r.u32()
		if string(name) == Export || string(name) == Stop {
			return fmt.Errorf("%w: it exports %q itself", ErrNotMeterable, name)
		}
	}
	return r.err
}

// growCost is what memory.grow pays: it calls the host even when it
// fails, many times the cost of a unit of the tightest loop (measured with
// BenchmarkFuelRate).
const growCost = 64

// cost is the fuel an instruction pays.
func cost(code byte) uint64 {
	if code == 0x40 {
		return growCost
	}
	return 1
}

// A call zeroes its function's locals before the body runs: localsPerUnit
// of them cost a unit, paid on entry with the body. A function with more
// than maxLocals is not metered (no compiler emits that many; a module
// declaring 100,000 would zero 800 KB a call for a few units otherwise).
const (
	localsPerUnit = 8
	maxLocals     = 50_000
)

// maxCharge is the longest a charge's code can be (charge), maxCheck a
// check's (checkStop).
const (
	maxCharge = 16 + 5*5 + 2*10
	maxCheck  = 14 + 3*5
)

// checkEvery is the longest run of instructions a call executes between
// two reads of the stop flag. A body pays for itself on entry, so fuel
// bounds a straight run of code, but not its time: a unit that misses
// every cache costs 60 times what the budget assumes, and a body of a
// million dependent loads ran 180 to 400 ms past a 10 ms call timeout, the
// stop flag unread (the 32 MiB upload limit allows ten times that). A
// check every checkEvery instructions (and after every call, so that
// unwinding a deep recursion does not run each frame's rest unchecked)
// bounds that to about 0.2 ms of missing loads; the sample router has no
// straight run that long, so it pays only the checks after its calls.
const checkEvery = 1024

// runs follows a body's instructions in order and says after which one a
// check of the stop flag goes: a charge (entry, loop) or a check resets
// the run, a call ends it.
type runs struct{ n, every int }

func (s *runs) after(c byte) bool {
	switch c {
	case opLoop: // its charge reads the flag
		s.n = 0
		return false
	case 0x10, 0x11: // call, call_indirect
		s.n = 0
		return true
	}
	s.n++
	if s.n >= s.every {
		s.n = 0
		return true
	}
	return false
}

// meterFunc appends fn, its size first, charged, taking what it adds from
// room. A first pass finds what the body and each of its loops cost and
// how many checks it needs, a second copies the body with the charges and
// checks; nothing per instruction is kept between them.
func meterFunc(out, fn, global, stop []byte, every int, room *int) ([]byte, error) {
	r := reader{b: fn}
	// Every vector loop stops at the first error: a count of 2^32-1 in a
	// short input would otherwise cost seconds of reads past its end.
	var locals uint64
	for groups := r.u32(); groups > 0 && r.err == nil; groups-- {
		locals += uint64(r.u32())
		if t := r.byte(); !valtype(t) {
			return nil, fmt.Errorf("%w: local of type %#x", ErrNotMeterable, t)
		}
		if locals > maxLocals {
			return nil, fmt.Errorf("%w: a function declares more than %d locals", ErrNotMeterable, maxLocals)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	code := r.p
	// An open block: loop is its index in loops (-1 for block, if and the
	// body), at the cost spent when it opened.
	type block struct {
		loop int
		at   uint64
	}
	var loops []uint64 // what an iteration of each loop costs, in order
	total := locals / localsPerUnit
	open := []block{{-1, 0}}
	run := runs{every: every}
	checks := 0
	for len(open) > 0 {
		if r.done() {
			return nil, fmt.Errorf("%w: a function body ends inside a block", ErrNotMeterable)
		}
		c, err := r.instruction()
		if err != nil {
			return nil, err
		}
		total += cost(c)
		switch c {
		case 0x02, 0x04:
			open = append(open, block{-1, total})
		case opLoop:
			open = append(open, block{len(loops), total})
			loops = append(loops, 0)
		case opEnd:
			b := open[len(open)-1]
			open = open[:len(open)-1]
			if b.loop >= 0 {
				// From after the loop instruction to its end, inclusive.
				loops[b.loop] = total - b.at
			}
		}
		if run.after(c) && len(open) > 0 {
			checks++
		}
	}
	if !r.done() {
		return nil, fmt.Errorf("%w: bytes after a function body's end", ErrNotMeterable)
	}
	*room -= (len(loops)+1)*maxCharge + checks*maxCheck
	if *room < 0 {
		return nil, fmt.Errorf("%w: the charges would more than quadruple its code", ErrNotMeterable)
	}
	body := make([]byte, 0, len(fn)+(len(loops)+1)*maxCharge+checks*maxCheck)
	body = append(body, fn[:code]...)
	body = charge(body, global, stop, total)
	// Copy up to and including each loop instruction, then its charge;
	// up to the end of each run, then its check. Nothing follows the
	// body's last end.
	r = reader{b: fn, p: code}
	run = runs{every: every}
	from := code
	for next := 0; next < len(loops) || checks > 0; {
		c, _ := r.instruction()
		switch check := run.after(c); {
		case c == opLoop:
			body = append(body, fn[from:r.p]...)
			body = charge(body, global, stop, loops[next])
			from, next = r.p, next+1
		case check && !r.done():
			body = append(body, fn[from:r.p]...)
			body = checkStop(body, global, stop, c == 0x10 || c == 0x11)
			from, checks = r.p, checks-1
		}
	}
	body = append(body, fn[from:]...)
	out = leb(out, uint64(len(body)))
	return append(out, body...), nil
}

// checkStop appends: if stop { fuel = Spent; unreachable }. Like charge, it
// leaves the operand stack as it was and is valid in unreachable code.
// Unless the flag was just reloaded (after a call), it first joins two
// paths, block (br_if 0 stop) end: wazero's compiler reuses a global's
// value along a path of blocks with one predecessor each, so in straight
// code every check would read the value loaded at entry; after a join it
// loads the global again.
func checkStop(out, global, stop []byte, reloaded bool) []byte {
	if !reloaded {
		out = append(out, 0x02, 0x40, opGlobalGet) // block, global.get
		out = append(out, stop...)
		out = append(out, 0x0d, 0, opEnd) // br_if 0, end
	}
	out = append(out, opGlobalGet)
	out = append(out, stop...)
	out = append(out, 0x04, 0x40, opI64Const, 0x7f, opGlobalSet) // if, i64.const -1, global.set
	out = append(out, global...)
	return append(out, 0x00, opEnd) // unreachable, end
}

// charge appends: if fuel < n | stop { fuel = Spent; unreachable }; fuel -= n.
// It leaves the operand stack as it was and closes its own block, so
// branch depths around it do not change.
func charge(out, global, stop []byte, n uint64) []byte {
	out = append(out, opGlobalGet)
	out = append(out, global...)
	out = append(out, opI64Const)
	out = sleb(out, int64(n))
	out = append(out, 0x54, opGlobalGet) // i64.lt_u, global.get
	out = append(out, stop...)
	out = append(out, 0x72, 0x04, 0x40, opI64Const, 0x7f, opGlobalSet) // i32.or, if, i64.const -1, global.set
	out = append(out, global...)
	out = append(out, 0x00, opEnd, opGlobalGet) // unreachable, end
	out = append(out, global...)
	out = append(out, opI64Const)
	out = sleb(out, int64(n))
	out = append(out, 0x7d, opGlobalSet) // i64.sub
	return append(out, global...)
}

func valtype(t byte) bool {
	switch t {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x70, 0x6f: // i32 i64 f32 f64 funcref externref
		return true
	}
	return false
}

// reader decodes the binary format; the first error sticks.
type reader struct {
	b   []byte
	p   int
	err error
}

func (r *reader) done() bool { return r.err != nil || r.p >= len(r.b) }

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrNotMeterable}, args...)...)
	}
}

func (r *reader) byte() byte {
	if r.err != nil || r.p >= len(r.b) {
		r.fail("truncated")
		return 0
	}
	r.p++
	return r.b[r.p-1]
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n < 0 || r.p+n > len(r.b) {
		r.fail("truncated")
		return nil
	}
	r.p += n
	return r.b[r.p-n : r.p]
}

// uleb reads an unsigned LEB128 of at most bits bits.
func (r *reader) uleb(bits int) uint64 {
	var v uint64
	for shift := 0; ; shift += 7 {
		if shift >= bits { // ceil(bits/7) bytes at most
			r.fail("LEB128 too long")
			return 0
		}
		b := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint64(b&0x7f) << shift
		if b&0x80 == 0 {
			return v
		}
	}
}

func (r *reader) u32() uint32 { return uint32(r.uleb(32)) }

// sleb skips a signed LEB128 of at most bits bits (its value is not needed).
func (r *reader) sleb(bits int) { r.uleb(bits) }

// instruction decodes one instruction and returns its opcode; only
// instructions whose cost does not depend on an operand are accepted.
func (r *reader) instruction() (byte, error) {
	c := r.byte()
	switch {
	case c == 0x00, c == 0x01, c == 0x05, c == opEnd, c == 0x0f, c == 0x1a, c == 0x1b: // unreachable nop else end return drop select
	case c == 0x02, c == opLoop, c == 0x04: // block loop if: a block type
		switch t := r.byte(); {
		case t == 0x40, valtype(t):
		case t&0x80 == 0 && t&0x40 == 0: // a one-byte type index
		case t&0x80 != 0: // a longer type index
			r.uleb(32)
		default:
			r.fail("block type %#x", t)
		}
	case c == 0x0c, c == 0x0d, c == 0x10: // br br_if call
		r.u32()
	case c == 0xd2: // ref.func: a host call that looks the function up, about 300 units
		r.fail("ref.func")
	case c == 0x0e: // br_table
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			r.u32()
		}
		r.u32()
	case c == 0x11: // call_indirect: type, table (the callee pays on entry)
		r.u32()
		r.u32()
	case c == 0x1c: // select with types
		for n := r.u32(); n > 0 && r.err == nil; n-- {
			if t := r.byte(); !valtype(t) {
				r.fail("select of type %#x", t)
			}
		}
	case c >= 0x20 && c <= 0x26: // local.get/set/tee, global.get/set, table.get/set
		r.u32()
	case c >= 0x28 && c <= 0x3e: // loads and stores: alignment, offset
		if a := r.u32(); a >= 64 {
			r.fail("memory argument %#x (multiple memories)", a)
		}
		r.uleb(64)
	case c == 0x3f, c == 0x40: // memory.size, memory.grow (bounded by the memory cap)
		if r.byte() != 0 {
			r.fail("memory index")
		}
	case c == 0x41:
		r.sleb(32)
	case c == opI64Const:
		r.sleb(64)
	case c == 0x43:
		r.bytes(4)
	case c == 0x44:
		r.bytes(8)
	case c >= 0x45 && c <= 0xc4: // numeric, sign extension
	case c == 0xd0: // ref.null
		if t := r.byte(); t != 0x70 && t != 0x6f {
			r.fail("ref.null of type %#x", t)
		}
	case c == 0xd1: // ref.is_null
	case c == 0xfc:
		switch sub := r.u32(); {
		case sub <= 7: // saturating truncation
		case sub == 9, sub == 13, sub == 16: // data.drop, elem.drop, table.size
			r.u32()
		default: // bulk memory and table operations cost their length
			r.fail("instruction 0xfc %d", sub)
		}
	default:
		r.fail("instruction %#x", c)
	}
	return c, r.err
}

func leb(out []byte, v uint64) []byte {
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

func sleb(out []byte, v int64) []byte {
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}
