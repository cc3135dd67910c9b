// Package testwasm gives tests the electcore.wasm module: $ELECTCORE_WASM if
// set (the plain build; `make test` sets it to the module it just built), else
// a fresh build with ./wasm/build — what `make wasm` runs — into a temporary
// directory, once per test process and build flavour, so `go test ./...`
// never runs a stale module.
package testwasm

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// TB is what the helpers need of a *testing.T or *testing.B: an interface,
// so that this package does not import "testing" outside test files.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
}

// Build tags of the module's other flavours.
const (
	HostDrivenTag = "electcore_hostdriven" // the host-driven mode (wasm/hostdriven.go)
	TrapTestTag   = "electcore_traptest"   // test-only exports that trap (wasm/traptest.go)
)

// RepoRoot is the module root (the directory of go.mod).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var (
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// Path returns the plain module (Extism and raw exports).
func Path(t TB) string { return must(t, "") }

// HostDriven returns the host-driven build.
func HostDriven(t TB) string { return must(t, HostDrivenTag) }

func must(t TB, tag string) string {
	t.Helper()
	p, err := Module(tag)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Module returns the module built with the build tag tag ("" for the plain
// one), building it on first use. For TestMain, which has no testing.TB.
func Module(tag string) (string, error) {
	if p := os.Getenv("ELECTCORE_WASM"); p != "" && tag == "" {
		return p, nil
	}
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[tag]; ok {
		return p, nil
	}
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "electcore-test-wasm-"); err != nil {
			return "", err
		}
	}
	out := filepath.Join(dir, "electcore.wasm")
	args := []string{"run", "./wasm/build", "-o"}
	if tag != "" {
		out = filepath.Join(dir, "electcore-"+tag+".wasm")
		args = append(args, out, "--", "-tags="+tag)
	} else {
		args = append(args, out)
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building electcore.wasm (tag %q): %v\n%s", tag, err, b)
	}
	built[tag] = out
	return out, nil
}

// BuildBinary builds the Go package pkg (relative to the repo root, e.g.
// "./cmd/electhost") into a temporary directory and returns the binary.
func BuildBinary(t TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// Main runs a package's tests with *module set to the plain module (see
// Module) and removes what was built afterwards:
// func TestMain(m *testing.M) { os.Exit(testwasm.Main(m, &testWasm)) }.
func Main(m interface{ Run() int }, module *string) int {
	defer Cleanup()
	p, err := Module("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*module = p
	return m.Run()
}

// Cleanup removes the built modules; call it from TestMain after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
	}
}

// CacheDir is the compilation cache for tests' runtimes:
// $ELECTCORE_TEST_CACHE, else "" (the default user cache, so a second test
// run loads compiled code instead of compiling).
func CacheDir() string { return os.Getenv("ELECTCORE_TEST_CACHE") }

// Logger logs warnings and errors only ($ELECTCORE_TEST_LOG=debug: all).
func Logger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("ELECTCORE_TEST_LOG") == "debug" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
