package host

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"

	"github.com/electcore/electcore/internal/testwasm"
)

// testWasm is the module under test (see internal/testwasm).
var testWasm string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	defer testwasm.Cleanup()
	var err error
	if testWasm, err = testwasm.Module(""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

var (
	rtOnce sync.Once
	rt     *Runtime
	rtErr  error
)

// testRuntime is the process's shared runtime (compiled once).
func testRuntime(t testing.TB) *Runtime {
	rtOnce.Do(func() {
		rt, rtErr = NewRuntime(context.Background(), RuntimeConfig{WasmPath: testWasm, CacheDir: testwasm.CacheDir(), Logger: testwasm.Logger()})
	})
	if rtErr != nil {
		t.Fatal(rtErr)
	}
	return rt
}

// discardLogger drops everything (for tests that provoke errors on purpose).
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
