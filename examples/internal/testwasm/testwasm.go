// Package testwasm locates or builds electcore.wasm for the examples' tests:
// $ELECTCORE_WASM if set (plain build only), else a fresh build of ./wasm
// (with ./wasm/build, as `make wasm` does; else GOOS=wasip1 go build
// -buildmode=c-shared) into a temporary directory, once per test process and
// build flavour, so `go test ./examples/...` never runs a stale module.
package testwasm

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// RepoRoot is the module root (the directory of go.mod).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

var (
	mu    sync.Mutex
	built = map[string]string{}
	dir   string
)

// Path returns the plain module (Extism + raw exports).
func Path(t testing.TB) string { return build(t, "") }

// HostDriven returns the host-driven build (-tags electcore_hostdriven).
func HostDriven(t testing.TB) string { return build(t, "electcore_hostdriven") }

func build(t testing.TB, tags string) string {
	t.Helper()
	if p := os.Getenv("ELECTCORE_WASM"); p != "" && tags == "" {
		return p
	}
	mu.Lock()
	defer mu.Unlock()
	if p, ok := built[tags]; ok {
		return p
	}
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "electcore-examples-wasm-"); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "electcore"+strings.ReplaceAll("-"+tags, "-electcore_", "-")+".wasm")
	if tags == "" {
		out = filepath.Join(dir, "electcore.wasm")
	}
	var cmd *exec.Cmd
	if _, err := os.Stat(filepath.Join(RepoRoot(), "wasm", "build", "main.go")); err == nil {
		// The module's own build (what `make wasm` runs).
		args := []string{"run", "./wasm/build", "-o", out}
		if tags != "" {
			args = []string{"run", "./wasm/build", "-hd", "-o", out}
		}
		cmd = exec.Command("go", args...)
	} else {
		args := []string{"build", "-buildmode=c-shared", "-ldflags=-s -w"}
		if tags != "" {
			args = append(args, "-tags="+tags)
		}
		args = append(args, "-o", out, "./wasm")
		cmd = exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	}
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building electcore.wasm (tags %q): %v\n%s", tags, err, b)
	}
	built[tags] = out
	return out
}

// BuildBinary builds the Go package pkg (relative to the repo root, e.g.
// "./cmd/electhost") into a temporary directory and returns the binary.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// Cleanup removes the built modules; call it from TestMain after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
	}
}
