package wasmhost

import (
	"context"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tinylib/msgp/msgp"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
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

// TestModuleCodeAvoidsFmt fails if the core or the module's own code imports
// fmt: with msgp's one use patched out by wasm/build, nothing else links fmt
// into the module, and fmt with the reflection its printf needs is ~280 KB
// of it. Build messages with strconv and string concatenation instead.
func TestModuleCodeAvoidsFmt(t *testing.T) {
	for _, dir := range []string{"../../core", "../../wasm"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v (%d files)", dir, err, len(files))
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				if imp.Path.Value == `"fmt"` {
					t.Errorf("%s imports fmt, which would grow the wasm module by ~280 KB", path)
				}
			}
		}
	}
}

// TestModuleDecodeErrorsMatchNative checks that the module's decoding errors
// read as the native core's: wasm/build patches how msgp writes an error's
// path (ctxString), and the native build uses msgp unchanged.
func TestModuleDecodeErrorsMatchNative(t *testing.T) {
	ctx := context.Background()
	inst, err := testRuntime(t).NewInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(ctx)
	// Input{join: [{config: {members: ["a", <bad>]}}]}, with the bad element
	// at each depth the generated decoders name: an index, a field, a map key.
	join := func(config []byte) []byte {
		b := msgp.AppendMapHeader(nil, 1)
		b = msgp.AppendString(b, "join")
		b = msgp.AppendArrayHeader(b, 2)
		b = msgp.AppendMapHeader(b, 0)
		b = msgp.AppendMapHeader(b, 1)
		b = msgp.AppendString(b, "config")
		return append(b, config...)
	}
	cases := map[string][]byte{
		"member index": join(msgp.AppendInt(msgp.AppendString(msgp.AppendArrayHeader(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "members"), 2), "a"), 7)),
		"map key":      join(msgp.AppendInt(msgp.AppendString(msgp.AppendMapHeader(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "member_keys"), 1), "b"), 7)),
		"field":        join(msgp.AppendString(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "heartbeat_ms"), "x")),
		"command":      msgp.AppendInt(msgp.AppendArrayHeader(msgp.AppendString(msgp.AppendMapHeader(nil, 1), "cmd"), 1), 3),
	}
	for name, b := range cases {
		var in core.Input
		nerr := abi.DecodeInput(b, &in)
		if nerr == nil {
			t.Fatalf("%s: the native decoder accepts % x", name, b)
		}
		_, err := inst.StepBytes(b)
		var me *ModuleError
		if !errors.As(err, &me) || me.Code != CodeDecode {
			t.Fatalf("%s: module: %v", name, err)
		}
		if want := "decode input: " + nerr.Error(); me.Msg != want {
			t.Errorf("%s: module says\n\t%s\nnative\n\t%s", name, me.Msg, want)
		}
	}
}
