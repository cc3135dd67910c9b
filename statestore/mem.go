package statestore

import (
	"fmt"
	"sync"
)

// Mem keeps state blobs in memory, with Store's Save and Load:
// for demos and tests, where losing the state with the process is the point.
// It is safe for concurrent use.
type Mem struct {
	mu sync.Mutex
	m  map[string][]byte
}

// NewMem returns an empty in-memory store.
func NewMem() *Mem { return &Mem{m: map[string][]byte{}} }

// Save keeps a copy of data under name.
func (s *Mem) Save(name string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[name] = append([]byte(nil), data...)
	return nil
}

// Load returns a copy of what was saved under name, or ErrNotFound.
func (s *Mem) Load(name string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[name]
	if !ok {
		return nil, fmt.Errorf("state %q: %w", name, ErrNotFound)
	}
	return append([]byte(nil), b...), nil
}
