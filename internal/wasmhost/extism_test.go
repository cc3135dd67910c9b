package wasmhost

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
)

var (
	extismOnce     sync.Once
	extismCompiled *extism.CompiledPlugin
	extismErr      error
)

// newExtismPlugin loads electcore.wasm, unchanged, in the Extism Go SDK
// (compiled once per test process, with an in-memory compilation cache).
func newExtismPlugin(t testing.TB) *extism.Plugin {
	ctx := context.Background()
	extismOnce.Do(func() {
		manifest := extism.Manifest{Wasm: []extism.Wasm{extism.WasmFile{Path: testWasm}}}
		rc := wazero.NewRuntimeConfig().WithCompilationCache(wazero.NewCompilationCache())
		extismCompiled, extismErr = extism.NewCompiledPlugin(ctx, manifest, extism.PluginConfig{EnableWasi: true, RuntimeConfig: rc}, nil)
	})
	if extismErr != nil {
		t.Fatal(extismErr)
	}
	p, err := extismCompiled.Instance(ctx, extism.PluginInstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// extismDual steps a native engine and the Extism plugin side by side.
type extismDual struct {
	nat   *core.Engine
	p     *extism.Plugin
	nout  core.Output
	steps *int
	diff  *string
	label string
}

func (d *extismDual) Step(in *core.Input, out *core.Output) error {
	b, err := abi.MarshalInput(nil, in)
	if err != nil {
		return err
	}
	d.nout.Reset()
	d.nat.Step(in, &d.nout)
	want, _ := abi.EncodeOutput(nil, &d.nout)
	rc, got, err := d.p.Call("step", b)
	if err != nil || rc != 0 {
		return fmt.Errorf("extism step: rc %d: %v", rc, err)
	}
	*d.steps++
	if !bytes.Equal(got, want) && *d.diff == "" {
		*d.diff = fmt.Sprintf("%s step %d: Extism output differs from native", d.label, *d.steps)
	}
	var sc core.Output
	return decodeOutput(got, out, &sc)
}

func TestExtismSDK(t *testing.T) {
	p := newExtismPlugin(t)
	defer p.Close(context.Background())

	// join, status, and a refused second join.
	cfg := core.Config{ID: "x", Group: "gx", Members: []string{"x", "y", "z"}}
	in, _ := abi.MarshalInput(nil, &core.Input{Now: 5, Join: []core.GroupSpec{{Config: cfg}}})
	rc, outb, err := p.Call("join", in)
	if err != nil || rc != 0 {
		t.Fatalf("join: %d %v", rc, err)
	}
	var out core.Output
	if _, err := abi.UnmarshalOutput(outb, &out); err != nil || len(out.Events) == 0 || out.Events[0].Kind != core.EventJoined {
		t.Fatalf("join output %+v %v", out, err)
	}
	if rc, _, err := p.Call("join", in); rc == 0 || err == nil {
		t.Fatalf("second join accepted: %d %v", rc, err)
	} else {
		t.Logf("second join refused as expected: %v", err)
	}
	rc, sb, err := p.Call("status", []byte("gx"))
	var st core.Status
	if err != nil || rc != 0 {
		t.Fatalf("status: %d %v", rc, err)
	}
	if _, err := abi.UnmarshalStatus(sb, &st); err != nil || st.ID != "x" {
		t.Fatalf("status %+v %v", st, err)
	}
	if rc, _, err := p.Call("status", []byte("nope")); rc == 0 || err == nil {
		t.Fatal("status of an unknown group succeeded")
	}
	if rc, _, err := p.Call("step", []byte{0xc1}); rc == 0 || err == nil {
		t.Fatal("garbage step succeeded")
	}

	// Differential through Extism on a few swarms (Extism calls cost ~30 µs).
	plugins := []*extism.Plugin{}
	defer func() {
		for _, p := range plugins {
			p.Close(context.Background())
		}
	}()
	seeds := 20
	if testing.Short() {
		seeds = 5
	}
	total := 0
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		var diff string
		steps, next := 0, 0
		err := runSwarm(seed, func(id string) interface {
			Step(*core.Input, *core.Output) error
		} {
			if next == len(plugins) {
				plugins = append(plugins, newExtismPlugin(t))
			}
			pl := plugins[next]
			next++
			if rc, _, err := pl.Call("reset", nil); err != nil || rc != 0 {
				t.Fatalf("reset: %d %v", rc, err)
			}
			return &extismDual{nat: core.NewEngine(), p: pl, steps: &steps, diff: &diff, label: fmt.Sprintf("seed %d node %s", seed, id)}
		})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if diff != "" {
			t.Fatalf("seed %d: %s", seed, diff)
		}
		total += steps
	}
	t.Logf("Extism: %d seeds, %d batches byte-identical to native", seeds, total)
}
