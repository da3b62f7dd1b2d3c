package pgtest

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that one goroutine writes while a test reads
// it: a logger fed by a Worker's or runner's goroutines, or a child
// process's output, which os/exec copies on a goroutine of its own. Every
// Write and String holds the lock.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
