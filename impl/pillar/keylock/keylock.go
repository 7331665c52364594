// Package keylock serialises work per key (a volume's name) without a
// lock per key living forever: a key's mutex exists while someone holds
// or waits for it.
package keylock

import "sync"

// Set is a set of per-key mutexes. The zero value is ready to use.
type Set struct {
	mu    sync.Mutex
	locks map[string]*entry
}

type entry struct {
	sync.Mutex
	users int
}

// Lock blocks until key is free and returns its unlock.
func (s *Set) Lock(key string) (unlock func()) {
	s.mu.Lock()
	if s.locks == nil {
		s.locks = map[string]*entry{}
	}
	e := s.locks[key]
	if e == nil {
		e = &entry{}
		s.locks[key] = e
	}
	e.users++
	s.mu.Unlock()
	e.Lock()
	return func() {
		e.Unlock()
		s.mu.Lock()
		if e.users--; e.users == 0 {
			delete(s.locks, key)
		}
		s.mu.Unlock()
	}
}

// Len is how many keys are held or waited for.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.locks)
}
