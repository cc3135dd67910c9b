package host

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/electcore/electcore/internal/testwasm"
	"github.com/electcore/electcore/internal/wasmhost"
	"go.uber.org/goleak"
)

// testWasm is the module under test (see internal/testwasm).
var testWasm string

// TestMain fails the run if a goroutine outlives the tests (an agent's loop,
// publisher, callbacks, or a transport's subscriptions).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(runFunc(func() int { return testwasm.Main(m, &testWasm) }))
}

// runFunc is a goleak.TestingM that runs the tests through testwasm.Main.
type runFunc func() int

func (f runFunc) Run() int { return f() }

// sharedRuntime is the process's runtime, compiled once.
var sharedRuntime = sync.OnceValues(func() (*testRT, error) {
	w, err := wasmhost.NewRuntime(context.Background(), wasmhost.Config{WasmPath: testWasm, CacheDir: testwasm.CacheDir(), Logger: testwasm.Logger()})
	return &testRT{w}, err
})

// testRT starts agents on the module as wasmrt.Runtime does (these tests
// are inside package host, which wasmrt imports).
type testRT struct{ w *wasmhost.Runtime }

func (r *testRT) NewAgent(ctx context.Context, cfg AgentConfig) (*Agent, error) {
	if cfg.Logger == nil {
		cfg.Logger = r.w.Logger()
	}
	eng, err := r.w.NewEngine(ctx, wasmhost.EngineConfig{Logger: cfg.Logger, OnTrap: cfg.OnTrap})
	if err != nil {
		return nil, err
	}
	return NewAgentOn(cfg, eng)
}

func testRuntime(t testing.TB) *testRT {
	r, err := sharedRuntime()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// discardLogger drops everything (for tests that provoke errors on purpose).
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
