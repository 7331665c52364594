package capture_test

import (
	"bytes"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/capture"
)

// The request path's share of a capture: a 4 KiB request and a 16 KiB
// response copied into capped buffers in 1 KiB writes.
func BenchmarkBufferFill(b *testing.B) {
	chunk := bytes.Repeat([]byte("x"), 1024)
	b.ReportAllocs()
	for b.Loop() {
		req, resp := capture.NewBuffer(capture.DefaultLimit), capture.NewBuffer(capture.DefaultLimit)
		for range 4 {
			req.Write(chunk)
		}
		for range 16 {
			resp.Write(chunk)
		}
	}
}

// The worker's share: sealing that exchange under the master key.
func BenchmarkSeal(b *testing.B) {
	box := newBox(b)
	x := capture.Exchange{EventID: "ev_1", PrincipalID: "pr_1", Request: bytes.Repeat([]byte("q"), 4<<10), Response: bytes.Repeat([]byte("a"), 16<<10)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := capture.Seal(box, x); err != nil {
			b.Fatal(err)
		}
	}
}
