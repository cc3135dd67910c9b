package wasmhost

import (
	"context"
	"os"
	"testing"

	"github.com/electcore/electcore/internal/testwasm"
)

// MaxModuleBytes is electcore.wasm's size budget.
const MaxModuleBytes = 4_000_000

// TestModuleSize fails if the module under test (built like `make wasm`, or
// $ELECTCORE_WASM) or its host-driven build is over the budget, and checks that it loads. A module
// built with the plain go build (without wasm/build's lazy msgp JSON tables)
// is ≈580 KB larger and fails here.
func TestModuleSize(t *testing.T) {
	for _, path := range []string{testWasm, testwasm.HostDriven(t)} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > MaxModuleBytes {
			t.Fatalf("%s: %d bytes, over the %d-byte budget (build it with `make wasm` / go run ./wasm/build)", path, fi.Size(), MaxModuleBytes)
		}
		t.Logf("%s: %d bytes (budget %d, %d to spare)", path, fi.Size(), MaxModuleBytes, MaxModuleBytes-fi.Size())
	}
	ctx := context.Background()
	inst, err := testRuntime(t).NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	if _, ok, err := inst.Status("nope"); ok || err != nil {
		t.Fatalf("status of an unknown group: %v %v", ok, err)
	}
}
