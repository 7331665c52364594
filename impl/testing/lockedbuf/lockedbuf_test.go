package lockedbuf_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/pillarhq/pillar/impl/testing/lockedbuf"
)

// Concurrent writers lose nothing (go test -race checks the locking).
func TestConcurrentWrites(t *testing.T) {
	t.Parallel()
	var b lockedbuf.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 800) {
		t.Fatalf("%d bytes, want 800", len(got))
	}
}
