package host

import (
	"context"
	"fmt"
	"io"
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
		rt, rtErr = NewRuntime(context.Background(), RuntimeConfig{WasmPath: testWasm, CacheDir: testCacheDir(), Logger: quietLogger()})
	})
	if rtErr != nil {
		t.Fatal(rtErr)
	}
	return rt
}

// quietLogger logs warnings and errors only ($ELECTCORE_TEST_LOG=debug for all).
func quietLogger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("ELECTCORE_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// testCacheDir: $ELECTCORE_TEST_CACHE, else the default user cache (so a
// second test run loads compiled code instead of compiling).
func testCacheDir() string {
	if d := os.Getenv("ELECTCORE_TEST_CACHE"); d != "" {
		return d
	}
	return ""
}

type slogLogger = slog.Logger

// discardLogger drops everything (for tests that provoke errors on purpose).
func discardLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
