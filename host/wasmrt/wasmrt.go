// Package wasmrt runs electcore agents on the WebAssembly module: the
// compiled module (Runtime) and agents on instances of it
// (Runtime.NewAgent, the same host.Agent as host.NewNativeAgent's). It is
// the package that links wazero and the module built into the program; a
// program that only uses host.NewNativeAgent does not.
//
//	rt, err := wasmrt.NewRuntime(ctx, wasmrt.Config{})
//	agent, err := rt.NewAgent(ctx, host.AgentConfig{Transport: tr, Store: store})
package wasmrt

import (
	"context"
	"errors"

	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/internal/wasmhost"
)

// NoDiskCache as Config.CacheDir keeps compiled code in memory only.
const NoDiskCache = wasmhost.NoDiskCache

// ErrNoModule: the module file named by Config.WasmPath or $ELECTCORE_WASM
// does not exist.
var ErrNoModule = wasmhost.ErrNoModule

// Config configures NewRuntime: WasmPath, Wasm, CacheDir,
// MemoryLimitPages, CallTimeout, Logger (go doc
// github.com/electcore/electcore/internal/wasmhost.Config tells each
// field's meaning). The zero value works anywhere: the module is built into
// the program.
type Config = wasmhost.Config

// Runtime is the compiled electcore module, ready to run agents. Create one
// per process (NewRuntime), then any number of agents (NewAgent). It is safe
// for concurrent use. The module runs sandboxed: it is granted nothing but
// fake clocks and a deterministic random source (no files, network,
// arguments or environment), bounded memory and a deadline on every call.
type Runtime struct {
	w *wasmhost.Runtime
}

// NewRuntime loads the module (Config.WasmPath, else $ELECTCORE_WASM, else
// the one built into the program) and compiles it, from the compilation
// cache when it can.
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	w, err := wasmhost.NewRuntime(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Runtime{w: w}, nil
}

// NewAgent starts an agent with no groups, on an instance of the runtime's
// module. cfg.Logger nil means the runtime's.
func (r *Runtime) NewAgent(ctx context.Context, cfg host.AgentConfig) (*host.Agent, error) {
	if cfg.Transport == nil {
		return nil, errors.New("host: AgentConfig.Transport is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = r.w.Logger()
	}
	eng, err := r.w.NewEngine(ctx, wasmhost.EngineConfig{Logger: cfg.Logger, OnTrap: cfg.OnTrap})
	if err != nil {
		return nil, err
	}
	return host.NewAgentOn(cfg, eng)
}

// Close releases the runtime and every agent's module instance. Close the
// agents first: an agent whose runtime is closed can no longer step.
func (r *Runtime) Close(ctx context.Context) error { return r.w.Close(ctx) }
