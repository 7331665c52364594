// Package lockedbuf is a bytes.Buffer that several goroutines may write to
// while a test reads it: a logger's or a child process's output.
package lockedbuf

import (
	"bytes"
	"sync"
)

// Buffer's zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
