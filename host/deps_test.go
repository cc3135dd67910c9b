package host

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestNativeAgentLinksNoWebAssembly: a program using only NewNativeAgent
// (package host, a transport, a store) does not link wazero or the module
// built into the program; package wasmrt, which runs the module, does.
func TestNativeAgentLinksNoWebAssembly(t *testing.T) {
	deps := func(pkgs ...string) []string {
		t.Helper()
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"list", "-deps"}, pkgs...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkgs, err)
		}
		return strings.Fields(string(out))
	}
	wasm := func(list []string) (found []string) {
		for _, p := range list {
			if strings.HasPrefix(p, "github.com/tetratelabs/wazero") || p == "github.com/electcore/electcore/internal/module" || p == "github.com/electcore/electcore/internal/wasmhost" {
				found = append(found, p)
			}
		}
		return found
	}
	native := deps("github.com/electcore/electcore/host", "github.com/electcore/electcore/transport/mem", "github.com/electcore/electcore/statestore")
	if found := wasm(native); len(found) > 0 {
		t.Errorf("a native-only program links %d WebAssembly packages, e.g. %s", len(found), found[0])
	}
	if found := wasm(deps("github.com/electcore/electcore/host/wasmrt")); len(found) == 0 {
		t.Error("wasmrt links no WebAssembly package: this test no longer sees what it looks for")
	}
	t.Logf("a native-only program (host, transport/mem, statestore): %d packages", len(native))
}
