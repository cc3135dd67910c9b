package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The module under test: $ELECTCORE_WASM if set, else built once per test
// process into a temporary directory (so `go test ./...` works without a
// prebuilt module; `make test` may prebuild it and set ELECTCORE_WASM).
var (
	testWasm string
	tmpDir   string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	tmpDir, err = os.MkdirTemp("", "electcore-host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmpDir)
	if p := os.Getenv(EnvWasm); p != "" {
		testWasm = p
	} else {
		testWasm = filepath.Join(tmpDir, "electcore.wasm")
		if err := buildWasm(testWasm); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// buildWasm builds the module (with extra go build flags) into out, as
// `make wasm` does (go run ./wasm/build).
func buildWasm(out string, flags ...string) error {
	args := append([]string{"run", "./wasm/build", "-o", out, "--"}, flags...)
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the wasm module: %v\n%s", err, b)
	}
	return nil
}

var (
	hdOnce sync.Once
	hdPath string
	hdErr  error
)

// hostDrivenWasm builds the host-driven variant once.
func hostDrivenWasm(t testing.TB) string {
	hdOnce.Do(func() {
		hdPath = filepath.Join(tmpDir, "electcore-hd.wasm")
		hdErr = buildWasm(hdPath, "-tags=electcore_hostdriven")
	})
	if hdErr != nil {
		t.Fatal(hdErr)
	}
	return hdPath
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

var (
	fastOnce sync.Once
	fastRT   *Runtime
	fastErr  error
)

// fastRuntime is the test runtime. (It was a NoInterrupt runtime while
// deadlines made calls ~7× slower; every runtime is fast now.)
func fastRuntime(t testing.TB) *Runtime { return testRuntime(t) }

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
