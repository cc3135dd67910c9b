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
	"log/slog"
	"time"

	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/internal/wasmhost"
)

// NoDiskCache as Config.CacheDir keeps compiled code in memory only.
const NoDiskCache = wasmhost.NoDiskCache

// ErrNoModule: the module file named by Config.WasmPath or $ELECTCORE_WASM
// does not exist.
var ErrNoModule = wasmhost.ErrNoModule

// Config configures NewRuntime. The zero value works anywhere: the module
// is built into the program.
type Config struct {
	// WasmPath names a module file to load instead of the built-in one. ""
	// means $ELECTCORE_WASM, and if that is unset too, the built-in module.
	// A named file that is missing is an error, never silently replaced.
	WasmPath string
	// Wasm, if set, is the module itself and WasmPath is ignored.
	Wasm []byte
	// CacheDir holds wazero's compilation cache. "" means
	// os.UserCacheDir()/electcore/wazero, or memory (logged) if that cannot
	// be created; a directory named here that cannot is an error. NoDiskCache
	// ("-") keeps it in memory. Within one process the cache (and so the
	// compiled code) is shared by every Runtime with the same CacheDir.
	CacheDir string
	// MemoryLimitPages bounds each instance's linear memory in 64 KiB pages
	// (0: 1024 pages, 64 MiB) while it hosts few groups; an instance with
	// more groups than that holds gets 16 MiB + 16 KiB per group (10,000
	// groups: 172 MiB), what an election storm at the start needs with
	// room to spare (a fresh instance uses ~4 MiB, 10,000 settled groups
	// ~30 MiB: host/BENCHMARKS.md). Linear memory grows only as the module
	// asks for it, and only touched pages cost RAM. The module's Go runtime
	// gets a soft limit (GOMEMLIMIT) a quarter (at least 4 MiB) below the
	// bound, raised with it, so that its collector keeps the heap within
	// the bound while the live data fits.
	MemoryLimitPages uint32
	// CallTimeout is the deadline of every call into the module (0: 1 s; a
	// step takes microseconds, so it only catches a runaway module). A call
	// that overruns it is stopped where it is (within a few hundred µs) and
	// its instance replaced, like a trap.
	CallTimeout time.Duration
	// Logger receives the runtime's and its agents' logs (nil: none, like
	// client-go; the library never writes to slog.Default()).
	Logger *slog.Logger
}

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
	w, err := wasmhost.NewRuntime(ctx, wasmhost.Config(cfg))
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
