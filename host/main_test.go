package host

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/electcore/electcore/internal/testwasm"
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
var sharedRuntime = sync.OnceValues(func() (*Runtime, error) {
	return NewRuntime(context.Background(), RuntimeConfig{WasmPath: testWasm, CacheDir: testwasm.CacheDir(), Logger: testwasm.Logger()})
})

func testRuntime(t testing.TB) *Runtime {
	r, err := sharedRuntime()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// discardLogger drops everything (for tests that provoke errors on purpose).
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
