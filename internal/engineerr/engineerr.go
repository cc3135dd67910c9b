// Package engineerr holds the errors an agent (package host) and the
// WebAssembly engine that runs its core (internal/wasmhost) share, so that
// neither imports the other: host links no WebAssembly runtime.
package engineerr

import "errors"

var (
	// ErrTrap matches every error of a call into the module that trapped.
	ErrTrap = errors.New("module trapped")
	// ErrReplaced matches a trap after which the engine replaced the
	// instance with one restored from the persisted state: the call's
	// input was lost, the engine is usable.
	ErrReplaced = errors.New("instance replaced")
	// ErrClosed is returned by an instance, engine or agent used after Close.
	ErrClosed = errors.New("host: closed")
)
