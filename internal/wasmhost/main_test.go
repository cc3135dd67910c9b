package wasmhost

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"

	"github.com/electcore/electcore/internal/testwasm"
)

// testWasm is the module under test (see internal/testwasm).
var testWasm string

func TestMain(m *testing.M) { os.Exit(testwasm.Main(m, &testWasm)) }

// sharedRuntime is the process's runtime, compiled once.
var sharedRuntime = sync.OnceValues(func() (*Runtime, error) {
	return NewRuntime(context.Background(), Config{WasmPath: testWasm, CacheDir: testwasm.CacheDir(), Logger: testwasm.Logger()})
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
