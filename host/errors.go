package host

import "github.com/electcore/electcore/internal/engineerr"

// Errors, to match with errors.Is.
var (
	// ErrTrap matches the error AgentConfig.OnTrap receives: the module
	// trapped (a fault, out of memory, a call past its deadline) and the
	// agent replaced its instance.
	ErrTrap = engineerr.ErrTrap
	// ErrClosed is returned by an agent or election used after Close.
	ErrClosed = engineerr.ErrClosed
)
