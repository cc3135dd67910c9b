package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/electcore/electcore/internal/fuel"
	"github.com/electcore/electcore/internal/module"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Defaults of Config.
const (
	// DefaultMemoryLimitPages bounds an instance's linear memory while it
	// hosts few groups: 1024 pages of 64 KiB = 64 MiB. A fresh instance uses
	// ~60 pages; with more groups the bound grows (memoryBound).
	DefaultMemoryLimitPages = 1024
	// DefaultCallTimeout is the deadline of one call into the module. A step
	// takes microseconds; the deadline only catches a runaway module.
	DefaultCallTimeout = time.Second
	// EnvWasm names the environment variable that may name a module file to
	// load instead of the one built into this program.
	EnvWasm = "ELECTCORE_WASM"
	// NoDiskCache as Config.CacheDir keeps compiled code in memory only.
	NoDiskCache = "-"
)

// Config configures NewRuntime. It is field for field host/wasmrt.Config,
// which documents each field: wasmrt converts one into the other, so the
// compiler keeps them equal.
type Config struct {
	WasmPath         string
	Wasm             []byte
	CacheDir         string
	MemoryLimitPages uint32
	CallTimeout      time.Duration
	Logger           *slog.Logger
}

// Runtime is a compiled electcore module, ready to instantiate. Create one per
// process (NewRuntime), then any number of instances or engines. It
// is safe for concurrent use.
type Runtime struct {
	cfg      Config
	path     string
	logger   *slog.Logger
	wr       wazero.Runtime
	compiled wazero.CompiledModule
	hd       bool // the module imports the "electcore" host functions
	closeMu  sync.Mutex
	closed   bool
}

// process-wide compilation caches, by directory: compile once per process.
var (
	cachesMu sync.Mutex
	caches   = map[string]wazero.CompilationCache{}
)

func compilationCache(dir string) (wazero.CompilationCache, error) {
	cachesMu.Lock()
	defer cachesMu.Unlock()
	if c, ok := caches[dir]; ok {
		return c, nil
	}
	var c wazero.CompilationCache
	if dir == NoDiskCache {
		c = wazero.NewCompilationCache()
	} else {
		var err error
		if c, err = wazero.NewCompilationCacheWithDir(dir); err != nil {
			return nil, fmt.Errorf("host: compilation cache %s: %w", dir, err)
		}
	}
	caches[dir] = c
	return c, nil
}

// cacheKnown reports whether this process opened the compilation cache of
// dir already (its compiled code is then in memory).
func cacheKnown(dir string) bool {
	cachesMu.Lock()
	defer cachesMu.Unlock()
	_, ok := caches[dir]
	return ok
}

// cacheFiles counts the files of the compilation cache in dir (0 for a
// memory-only or missing one).
func cacheFiles(dir string) int {
	if dir == NoDiskCache {
		return 0
	}
	n := 0
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n
}

// DefaultCacheDir returns os.UserCacheDir()/electcore/wazero (or a directory
// under os.TempDir if there is no user cache directory).
func DefaultCacheDir() string {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "electcore", "wazero")
}

// ResolveWasmPath returns the module file NewRuntime would load for path:
// path itself if set, else $ELECTCORE_WASM; "" means the built-in module.
func ResolveWasmPath(path string) string {
	if path != "" {
		return path
	}
	return os.Getenv(EnvWasm)
}

// ErrNoModule reports that a module file named by WasmPath or
// $ELECTCORE_WASM does not exist.
var ErrNoModule = errors.New("electcore.wasm not found")

// builtIn names the module built into the program in messages.
const builtIn = "the built-in module"

// LoadModule reads the module file at path (resolved by ResolveWasmPath), or
// returns the built-in module if none is named. A missing file is an error
// naming the file and where its name came from: it is never silently
// replaced by the built-in module.
func LoadModule(path string) ([]byte, error) {
	p := ResolveWasmPath(path)
	if p == "" {
		return module.Wasm, nil
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		from := "RuntimeConfig.WasmPath (--wasm)"
		if path == "" {
			from = "$" + EnvWasm
		}
		return nil, fmt.Errorf("host: %w at %s (named by %s; unset it to use %s)", ErrNoModule, p, from, builtIn)
	}
	if err != nil {
		return nil, fmt.Errorf("host: reading module %s: %w", p, err)
	}
	return b, nil
}

// NewRuntime loads and compiles the module (from the compilation cache when it
// can) and prepares the only host modules it may import: WASI (for the Go
// runtime's clock and random, with fake deterministic sources and no files,
// network or arguments; each instance's only environment variable is
// GOMEMLIMIT, goMemLimit), inert stubs for Extism's kernel
// imports (the raw ABI never uses them), and the "electcore" functions of the
// host-driven build.
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MemoryLimitPages == 0 {
		cfg.MemoryLimitPages = DefaultMemoryLimitPages
	}
	if cfg.MemoryLimitPages > 65536 {
		return nil, fmt.Errorf("host: MemoryLimitPages %d: at most 65536 (4 GiB)", cfg.MemoryLimitPages)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	defaultCache := cfg.CacheDir == ""
	if defaultCache {
		cfg.CacheDir = DefaultCacheDir()
	}
	r := &Runtime{cfg: cfg, logger: cfg.Logger}
	wasmBytes := cfg.Wasm
	if wasmBytes == nil {
		r.path = ResolveWasmPath(cfg.WasmPath)
		var err error
		if wasmBytes, err = LoadModule(cfg.WasmPath); err != nil {
			return nil, err
		}
	}
	wasmBytes, err := fuel.Instrument(wasmBytes)
	if err != nil {
		return nil, fmt.Errorf("host: %s: %w", r.describe(), err)
	}
	seenDir := cacheKnown(cfg.CacheDir)
	cache, err := compilationCache(cfg.CacheDir)
	if err != nil && defaultCache {
		// Only a directory the caller named is worth failing for: without
		// the default one the module compiles on every start, slower but
		// correct.
		r.logger.Warn("compilation cache unusable; compiling in memory (slower start)", "dir", cfg.CacheDir, "err", err)
		cfg.CacheDir = NoDiskCache
		r.cfg.CacheDir = NoDiskCache
		cache, err = compilationCache(NoDiskCache)
	}
	if err != nil {
		return nil, err
	}
	// Each instance bounds its own memory (boundedMemory), by the groups
	// it hosts; wazero's limit is only what 32 bits address.
	rc := wazero.NewRuntimeConfig().
		WithCompilationCache(cache).
		WithMemoryLimitPages(maxMemoryBytes / 65536)
	r.wr = wazero.NewRuntimeWithConfig(ctx, rc)
	fail := func(err error) (*Runtime, error) {
		r.wr.Close(ctx)
		return nil, err
	}
	// Compiling the module takes seconds, loading it from the cache
	// milliseconds: say so when it will (a cache this process has not used
	// yet that is empty or memory-only: the first start on this machine),
	// and how long it took whenever it did (the cache grew).
	before := cacheFiles(cfg.CacheDir)
	announced := !seenDir && before == 0
	if announced {
		r.logger.Info("compiling the electcore module for this machine (the first start: seconds; later starts load it from the cache)", "cache_dir", cfg.CacheDir)
	}
	t0 := time.Now()
	if r.compiled, err = r.wr.CompileModule(ctx, wasmBytes); err != nil {
		return fail(fmt.Errorf("host: compiling %s: %w", r.describe(), err))
	}
	if announced || cacheFiles(cfg.CacheDir) > before {
		r.logger.Info("compiled the electcore module", "took", time.Since(t0).Round(time.Millisecond), "cache_dir", cfg.CacheDir)
	}
	if err := r.checkExports(); err != nil {
		return fail(err)
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r.wr); err != nil {
		return fail(fmt.Errorf("host: wasi: %w", err))
	}
	if err := r.defineImports(ctx); err != nil {
		return fail(err)
	}
	return r, nil
}

func (r *Runtime) describe() string {
	switch {
	case r.path != "":
		return r.path
	case r.cfg.Wasm != nil:
		return "module"
	}
	return builtIn
}

// Logger is the runtime's logger (never nil).
func (r *Runtime) Logger() *slog.Logger { return r.logger }

// Path is the module file loaded ("" if given as bytes or built in).
func (r *Runtime) Path() string { return r.path }

// Config returns the runtime's configuration with defaults filled in.
func (r *Runtime) Config() Config { return r.cfg }

// HostDriven reports whether the module is the host-driven build (it imports
// the "electcore" functions and exports hd_*).
func (r *Runtime) HostDriven() bool { return r.hd }

var rawExports = []string{"ec_input", "ec_step", "ec_join", "ec_status", "ec_error", "ec_reset", "ec_abi_version", "_initialize"}

func (r *Runtime) checkExports() error {
	ex := r.compiled.ExportedFunctions()
	for _, name := range rawExports {
		if _, ok := ex[name]; !ok {
			return fmt.Errorf("host: %s is not an electcore module: export %q missing (rebuild with `make wasm`)", r.describe(), name)
		}
	}
	return nil
}

// defineImports provides every non-WASI import: stubs for the Extism kernel
// (extism:host/env, used only by the Extism exports, which this host never
// calls) and the host-driven "electcore" functions, which route to the
// HostFuncs of the calling instance.
func (r *Runtime) defineImports(ctx context.Context) error {
	builders := map[string]wazero.HostModuleBuilder{}
	for _, def := range r.compiled.ImportedFunctions() {
		mod, name, _ := def.Import()
		if mod == wasi_snapshot_preview1.ModuleName {
			continue
		}
		b, ok := builders[mod]
		if !ok {
			b = r.wr.NewHostModuleBuilder(mod)
			builders[mod] = b
		}
		fn := r.importFunc(mod, name)
		if fn == nil {
			return fmt.Errorf("host: module imports %s.%s, which this host does not provide", mod, name)
		}
		b.NewFunctionBuilder().WithGoModuleFunction(fn, def.ParamTypes(), def.ResultTypes()).Export(name)
	}
	for mod, b := range builders {
		if _, err := b.Instantiate(ctx); err != nil {
			return fmt.Errorf("host: providing imports of %q: %w", mod, err)
		}
	}
	return nil
}

func (r *Runtime) importFunc(mod, name string) api.GoModuleFunction {
	switch mod {
	case "extism:host/env":
		return api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			panic(fmt.Sprintf("electcore host: Extism kernel function %s called through the raw ABI", name))
		})
	case "electcore":
		r.hd = true
		return hostDrivenImport(name)
	case fuel.CheckModule:
		if name == fuel.CheckName {
			return api.GoModuleFunc(func(ctx context.Context, _ api.Module, _ []uint64) {
				if i, ok := ctx.Value(instanceKey{}).(*Instance); ok {
					i.check()
				}
			})
		}
	}
	return nil
}

// Close releases the runtime and every instance it created.
func (r *Runtime) Close(ctx context.Context) error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	return r.wr.Close(ctx)
}
