package relay

import "sync"

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Event streams are read through a streamBuf, not the 32 KB buffer of
// other answers: a stream spends most of its life waiting for its next
// event, and holds its buffer all that time.
var (
	sseIdlePool = sync.Pool{New: func() any { b := make([]byte, sseIdleBuf); return &b }}
	sseBufPool  = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}
)

// sseIdleBuf is the buffer a stream waits with: most events are a few
// hundred bytes.
const sseIdleBuf = 1 << 10

// streamBuf is an event stream's read buffer. The stream waits for its
// next event with a 1 KB buffer; a read that fills it means more was
// waiting (the transport's body returns what it has without blocking for
// more), so the reads after it use a 4 KB buffer, given back as soon as a
// read returns less than 1 KB. Either way every read is relayed at once.
type streamBuf struct{ idle, burst *[]byte }

// first returns the buffer of the first read.
func (s *streamBuf) first() []byte {
	s.idle = sseIdlePool.Get().(*[]byte)
	return *s.idle
}

// next returns the buffer of the read after one that returned n bytes
// into a buffer of size; the previous buffer's bytes must be written out.
func (s *streamBuf) next(n, size int) []byte {
	if s.burst == nil {
		if n < size {
			return *s.idle
		}
		s.burst = sseBufPool.Get().(*[]byte)
		return *s.burst
	}
	if n >= sseIdleBuf {
		return *s.burst
	}
	sseBufPool.Put(s.burst)
	s.burst = nil
	return *s.idle
}

func (s *streamBuf) release() {
	if s.burst != nil {
		sseBufPool.Put(s.burst)
		s.burst = nil
	}
	sseIdlePool.Put(s.idle)
}
