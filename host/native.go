package host

import (
	"context"
	"sync"

	"github.com/electcore/electcore/core"
)

// Engine is what an Agent steps: the native core (NewNativeAgent) or an
// instance of the WebAssembly module (package wasmrt), restored after
// traps. A Step error matching ErrTrap and engineerr's ErrReplaced (the
// instance was replaced, its input lost) lets the agent carry on; any
// other fails the step's requests. Exported for package wasmrt: programs
// do not implement it.
type Engine interface {
	Step(in *core.Input, out *core.Output) error
	Status(group string) (core.Status, bool, error)
	Traps() uint64
	Close(ctx context.Context) error
}

// nativeCore runs core.Engine in the host process. The agent's loop steps
// it while Election.Status reads it from other goroutines: a mutex orders
// them (core.Engine is not safe for concurrent use).
type nativeCore struct {
	mu sync.Mutex
	e  *core.Engine
}

func (n *nativeCore) Step(in *core.Input, out *core.Output) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.e.Step(in, out)
	return nil
}

func (n *nativeCore) Status(group string) (core.Status, bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.e.Status(group)
	return s, ok, nil
}

// Traps is always 0: the native core runs no module that could trap.
func (n *nativeCore) Traps() uint64 { return 0 }

func (n *nativeCore) Close(context.Context) error { return nil }
