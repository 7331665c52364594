package keylock

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Holders of one key never overlap, other keys are not blocked by it, and
// no entry outlives its last user.
func TestLockSerialisesPerKey(t *testing.T) {
	var s Set
	var inside, overlaps atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock := s.Lock("a")
			if inside.Add(1) > 1 {
				overlaps.Add(1)
			}
			inside.Add(-1)
			unlock()
		}()
	}
	held := s.Lock("a")
	other := s.Lock("b") // must not wait for "a"
	other()
	held()
	wg.Wait()
	if overlaps.Load() != 0 {
		t.Fatalf("%d overlapping holders of one key", overlaps.Load())
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("%d entries left after every unlock", n)
	}
}
