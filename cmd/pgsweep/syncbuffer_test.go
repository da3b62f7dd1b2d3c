package main

import (
	"bytes"
	"sync"
)

// syncBuffer is a bytes.Buffer that a child process's output copier writes
// while the test reads it (os/exec copies Stdout and Stderr on a goroutine
// of its own): every Write and String holds the lock.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
