package openai

import (
	"bytes"
	"testing"
)

// Streams borrow their data and chunk buffers from pools only while an
// event is being gathered or written: one stream holding half an event
// across reads while others take and give back buffers still translates
// exactly what it would alone, and so do the others.
func TestStreamsShareNoBuffer(t *testing.T) {
	in := []byte(sse(toolStream...))
	info := Info{Stream: true, IncludeUsage: true}
	alone := NewStream(info, 1)
	want := alone.End(alone.Feed(nil, in))

	// a stops inside its first event's data line; b and c run whole
	// answers in between, in reads of every size.
	a := NewStream(info, 1)
	half := bytes.Index(in, []byte("\n\n")) / 2
	got := a.Feed(nil, in[:half])
	for size := 1; size <= len(in); size += 7 {
		b := NewStream(info, 1)
		var out []byte
		for i := 0; i < len(in); i += size {
			out = b.Feed(out, in[i:min(i+size, len(in))])
		}
		if out = b.End(out); !bytes.Equal(out, want) {
			t.Fatalf("reads of %d bytes: %q, want %q", size, out, want)
		}
	}
	c := NewStream(info, 1)
	if out := c.End(c.Feed(nil, in)); !bytes.Equal(out, want) {
		t.Fatalf("%q, want %q", out, want)
	}
	got = a.End(a.Feed(got, in[half:]))
	if !bytes.Equal(got, want) {
		t.Fatalf("the stream split across the others: %q, want %q", got, want)
	}
}
