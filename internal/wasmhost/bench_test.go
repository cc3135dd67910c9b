package wasmhost

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
	"github.com/electcore/electcore/internal/testwasm"
	"github.com/tinylib/msgp/msgp"
)

// benchBatch builds a realistic batch for member "b" of a 5-member quorum
// group: a leader's heartbeat arriving, as msgp, plus the engine state to
// receive it (joined, and a leader "a" known).
func benchSetup(tb testing.TB, st interface {
	Step(*core.Input, *core.Output) error
}) *core.Input {
	ids := []string{"a", "b", "c", "d", "e"}
	var out core.Output
	if err := st.Step(&core.Input{Now: 1, Join: []core.GroupSpec{{Config: core.Config{ID: "b", Group: "g", Members: ids}}}}, &out); err != nil {
		tb.Fatal(err)
	}
	// A leader "a" at term 1 announces itself; then heartbeats follow.
	lead := core.Message{Topic: core.Topic("g"), Payload: []byte(`{"type":"leader","leader":"a","term":1,"from":"a","group":"g"}`)}
	out.Reset()
	if err := st.Step(&core.Input{Now: 2, Inbound: []core.Message{lead}}, &out); err != nil {
		tb.Fatal(err)
	}
	return &core.Input{Now: 3, Inbound: []core.Message{{Topic: core.Topic("g"), Payload: []byte(`{"type":"heartbeat","leader":"a","term":1,"from":"a","group":"g","seq":1}`)}}}
}

type nativeStepper struct{ e *core.Engine }

func (n nativeStepper) Step(in *core.Input, out *core.Output) error { n.e.Step(in, out); return nil }

// msgpStepper is the native core doing the module's work for a batch
// (stepBytes: check and decode the msgp Input, Step, encode the Output); its
// Step also encodes the Input and decodes the Output, as Instance.Step does.
// Like the module's, its engine reuses payload memory (every Output is
// encoded before the next step).
type msgpStepper struct {
	e         *core.Engine
	inb, outb []byte
	in        core.Input
	out       core.Output
}

func newMsgpStepper() *msgpStepper {
	m := &msgpStepper{e: core.NewEngine()}
	m.e.ReusePayloads()
	return m
}

func (m *msgpStepper) Step(in *core.Input, out *core.Output) error {
	var err error
	if m.inb, err = abi.MarshalInput(m.inb[:0], in); err != nil {
		return err
	}
	m.stepBytes()
	_, err = abi.UnmarshalOutput(m.outb, out)
	return err
}

func (m *msgpStepper) stepBytes() {
	if err := abi.DecodeInput(m.inb, &m.in); err != nil {
		panic(err)
	}
	m.out.Reset()
	m.e.Step(&m.in, &m.out)
	var err error
	if m.outb, err = abi.EncodeOutput(m.outb[:0], &m.out); err != nil {
		panic(err)
	}
}

func benchStep(b *testing.B, st interface {
	Step(*core.Input, *core.Output) error
}, empty bool) {
	in := benchSetup(b, st)
	if empty {
		in.Inbound = nil
	}
	var out core.Output
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		in.Now = 3 + int64(i%50) // stay inside the election timeout
		out.Reset()
		if err := st.Step(in, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStep: the same batches through every way of running the core,
// side by side in one run:
//
//   - native: core.Engine.Step alone;
//   - native-msgp: the module's work done natively (decode the msgp Input,
//     Step, encode the Output), what the wasm figures are compared against;
//   - wasm: the module on wazero through the raw ABI (Instance.Step, every
//     call under its deadline);
//   - extism-go: the same module through the Extism Go SDK's Plugin.Call;
//   - wasm-baseline: with $ELECTCORE_WASM_BASELINE naming another build of
//     the module, that build, like wasm (before/after comparisons of a
//     module change in one run: benchstat -col /impl);
//   - node-raw, node-extism: the same module in Node (node:wasi with the raw
//     ABI; the Extism JS SDK), timed by examples/node/bench/step.mjs, which
//     first checks that Node returns the Go host's bytes.
//
// The wasm, extism-go and node figures include their host's encoding of the
// Input and (Go hosts) decoding of the Output, so their ratios to
// native-msgp are conservative.
func BenchmarkStep(b *testing.B) {
	for _, batch := range []string{"heartbeat", "empty"} {
		empty := batch == "empty"
		impls := []string{"native", "native-msgp", "wasm", "extism-go", "node-raw", "node-extism"}
		if os.Getenv("ELECTCORE_WASM_BASELINE") != "" {
			impls = slices.Insert(impls, 2, "wasm-baseline")
		}
		for _, impl := range impls {
			b.Run("batch="+batch+"/impl="+impl, func(b *testing.B) {
				var st interface {
					Step(*core.Input, *core.Output) error
				}
				switch impl {
				case "native":
					st = nativeStepper{core.NewEngine()}
				case "native-msgp":
					benchModuleWork(b, empty)
					return
				case "wasm", "wasm-baseline":
					rt := testRuntime(b)
					if impl == "wasm-baseline" {
						rt = baselineRuntime(b)
					}
					inst, err := rt.NewInstance(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					defer inst.Close(context.Background())
					st = inst
				case "extism-go":
					p := newExtismPlugin(b)
					defer p.Close(context.Background())
					st = extismStepper{p}
				default:
					benchNode(b, strings.TrimPrefix(impl, "node-"), empty)
					return
				}
				benchStep(b, st, empty)
			})
		}
	}
}

var (
	baselineOnce sync.Once
	baselineRT   *Runtime
	baselineErr  error
)

// baselineRuntime runs $ELECTCORE_WASM_BASELINE (compiled once).
func baselineRuntime(tb testing.TB) *Runtime {
	baselineOnce.Do(func() {
		baselineRT, baselineErr = NewRuntime(context.Background(), Config{WasmPath: os.Getenv("ELECTCORE_WASM_BASELINE"), CacheDir: testwasm.CacheDir(), Logger: testwasm.Logger()})
	})
	if baselineErr != nil {
		tb.Fatal(baselineErr)
	}
	return baselineRT
}

// recordingStepper keeps the msgp encoding of every Input it is given.
type recordingStepper struct{ ins [][]byte }

func (r *recordingStepper) Step(in *core.Input, out *core.Output) error {
	b, err := abi.MarshalInput(nil, in)
	r.ins = append(r.ins, b)
	return err
}

// benchNode runs benchStep's batches in Node (engine raw or extism): it
// writes the setup batches, the 50 loop batches and the Go host's outputs
// for them, and reports the per-step time examples/node/bench/step.mjs
// measures (one Node process per call, timing max(b.N, 5000) steps).
func benchNode(b *testing.B, engine string, empty bool) {
	nodeDir, err := filepath.Abs("../../examples/node")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		b.Skip("node not found")
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules")); err != nil {
		b.Skip("examples/node has no node_modules: run npm ci there")
	}
	rec := &recordingStepper{}
	in := benchSetup(b, rec)
	if empty {
		in.Inbound = nil
	}
	var loop [][]byte
	for k := range 50 {
		in.Now = 3 + int64(k)
		enc, err := abi.MarshalInput(nil, in)
		if err != nil {
			b.Fatal(err)
		}
		loop = append(loop, enc)
	}
	inst, err := testRuntime(b).NewInstance(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close(context.Background())
	var want [][]byte
	for k, batch := range append(slices.Clone(rec.ins), loop...) {
		out, err := inst.StepBytes(batch)
		if err != nil {
			b.Fatal(err)
		}
		if k >= len(rec.ins) {
			want = append(want, out)
		}
	}
	frames := msgp.AppendArrayHeader(nil, 3)
	for _, list := range [][][]byte{rec.ins, loop, want} {
		frames = msgp.AppendArrayHeader(frames, uint32(len(list)))
		for _, f := range list {
			frames = msgp.AppendBytes(frames, f)
		}
	}
	path := filepath.Join(b.TempDir(), "frames.msgp")
	if err := os.WriteFile(path, frames, 0o644); err != nil {
		b.Fatal(err)
	}
	// Node's own loop times at least 5,000 steps whatever b.N is: with a
	// duration -benchtime, the process start makes b.N tiny.
	steps := max(b.N, 5000)
	cmd := exec.Command("node", "bench/step.mjs", engine, path, strconv.Itoa(steps))
	cmd.Dir = nodeDir
	wasmPath, err := filepath.Abs(testWasm) // node runs in examples/node
	if err != nil {
		b.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "ELECTCORE_WASM="+wasmPath)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		b.Fatalf("node bench/step.mjs %s: %v: %s", engine, err, stderr.String())
	}
	var res struct {
		NsPerStep float64 `json:"ns_per_step"`
	}
	if err := json.Unmarshal(stdout, &res); err != nil || res.NsPerStep <= 0 {
		b.Fatalf("node bench/step.mjs %s printed %q: %v", engine, stdout, err)
	}
	b.ReportMetric(res.NsPerStep, "ns/op")
}

// benchModuleWork times msgpStepper.stepBytes on pre-encoded batches.
func benchModuleWork(b *testing.B, empty bool) {
	m := newMsgpStepper()
	in := benchSetup(b, m)
	if empty {
		in.Inbound = nil
	}
	encs := make([][]byte, 50)
	for k := range encs {
		in.Now = 3 + int64(k)
		encs[k], _ = abi.MarshalInput(nil, in)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		m.inb = encs[i%len(encs)]
		m.stepBytes()
	}
}

// BenchmarkStepRatio measures the module's cost against the same work done
// natively, in one run: blocks of 64 steps alternate between the module
// (Instance.Step, BenchmarkStep's wasm) and the native core doing the
// module's work (BenchmarkStep's native-msgp). Each block is timed in the
// thread's CPU time where the OS offers it (threadCPU), so time spent
// descheduled on a shared machine counts for neither side, and the reported
// figures are medians over the blocks: each side's ns/step and
// x-native-msgp, the median of the per-block-pair ratios (the target is ≤ 8
// for the heartbeat). One op is one step on each side.
func BenchmarkStepRatio(b *testing.B) {
	for _, batch := range []string{"heartbeat", "empty"} {
		b.Run("batch="+batch, func(b *testing.B) {
			runtime.LockOSThread() // threadCPU reads this thread's clock
			defer runtime.UnlockOSThread()
			native := newMsgpStepper()
			nin := benchSetup(b, native)
			inst, err := testRuntime(b).NewInstance(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			defer inst.Close(context.Background())
			win := benchSetup(b, inst)
			if batch == "empty" {
				nin.Inbound, win.Inbound = nil, nil
			}
			encs := make([][]byte, 50)
			for k := range encs {
				nin.Now = 3 + int64(k)
				encs[k], _ = abi.MarshalInput(nil, nin)
			}
			var out core.Output
			var nativeNs, wasmNs, ratios []float64
			const block = 64
			b.ResetTimer()
			for n := 0; n < b.N; {
				k := min(block, b.N-n)
				t0 := threadCPU()
				for j := n; j < n+k; j++ {
					native.inb = encs[j%len(encs)]
					native.stepBytes()
				}
				t1 := threadCPU()
				for j := n; j < n+k; j++ {
					win.Now = 3 + int64(j%len(encs)) // the same batches
					out.Reset()
					if err := inst.Step(win, &out); err != nil {
						b.Fatal(err)
					}
				}
				t2 := threadCPU()
				nat, wasm := float64(t1-t0)/float64(k), float64(t2-t1)/float64(k)
				nativeNs, wasmNs = append(nativeNs, nat), append(wasmNs, wasm)
				if nat > 0 {
					ratios = append(ratios, wasm/nat)
				}
				n += k
			}
			b.ReportMetric(median(nativeNs), "native-msgp-ns/step")
			b.ReportMetric(median(wasmNs), "wasm-ns/step")
			b.ReportMetric(median(ratios), "x-native-msgp")
		})
	}
}

// BenchmarkStepAB compares two builds of the module in one run, the way
// BenchmarkStepRatio compares the module with native code: blocks of 64
// steps alternate between the module under test and the build
// $ELECTCORE_WASM_BASELINE names, each block timed in thread CPU time, and
// x-baseline is the median of the per-block ratios (< 1: the module under
// test is faster). A module against itself reads 1.000 ± 0.003 here, even
// on a loaded machine. Without $ELECTCORE_WASM_BASELINE there is nothing to
// compare and it skips, saying so. Batches: BenchmarkStep's heartbeat and
// empty batch in one group, and followers-1000: a follower in 1,000
// groups stepped every 20 ms with the heartbeats of 40 of them (each group
// hears its leader every 500 ms, as in a settled swarm at default timings),
// so that the per-group work (the group lookup, the timer heap) runs at a
// realistic size.
func BenchmarkStepAB(b *testing.B) {
	if os.Getenv("ELECTCORE_WASM_BASELINE") == "" {
		b.Skip("set ELECTCORE_WASM_BASELINE to the module to compare with")
	}
	for _, batch := range []string{"heartbeat", "empty", "followers-1000"} {
		b.Run("batch="+batch, func(b *testing.B) {
			runtime.LockOSThread() // threadCPU reads this thread's clock
			defer runtime.UnlockOSThread()
			var insts [2]*Instance
			var ins [2]*core.Input
			for k, rt := range []*Runtime{testRuntime(b), baselineRuntime(b)} {
				inst, err := rt.NewInstance(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				defer inst.Close(context.Background())
				insts[k] = inst
				switch batch {
				case "followers-1000":
					ins[k] = followersSetup(b, inst)
				default:
					ins[k] = benchSetup(b, inst)
				}
				if batch == "empty" {
					ins[k].Inbound = nil
				}
			}
			next := func(side, j int) {
				if batch == "followers-1000" {
					followersNext(ins[side], j)
					return
				}
				ins[side].Now = 3 + int64(j%50)
			}
			var out core.Output
			var ratios []float64
			const block = 64
			b.ResetTimer()
			for n := 0; n < b.N; {
				k := min(block, b.N-n)
				var t [3]int64
				t[0] = threadCPU()
				for side := range insts {
					for j := n; j < n+k; j++ {
						next(side, j)
						out.Reset()
						if err := insts[side].Step(ins[side], &out); err != nil {
							b.Fatal(err)
						}
					}
					t[side+1] = threadCPU()
				}
				if base := t[2] - t[1]; base > 0 {
					ratios = append(ratios, float64(t[1]-t[0])/float64(base))
				}
				n += k
			}
			b.ReportMetric(median(ratios), "x-baseline")
		})
	}
}

// followersGroups is followers-1000's size: member "b" of this many
// 3-member groups, each led by "a".
const followersGroups = 1000

// followersSetup joins followersGroups groups and has "a" announce itself
// leader in each; the Input it returns is followersNext's to fill.
func followersSetup(tb testing.TB, st interface {
	Step(*core.Input, *core.Output) error
}) *core.Input {
	var out core.Output
	for start := 0; start < followersGroups; start += 250 {
		in := core.Input{Now: 1}
		for g := start; g < start+250; g++ {
			in.Join = append(in.Join, core.GroupSpec{Config: core.Config{ID: "b", Group: followersGroup(g), Members: []string{"a", "b", "c"}}})
		}
		out.Reset()
		if err := st.Step(&in, &out); err != nil {
			tb.Fatal(err)
		}
	}
	in := core.Input{Now: 2}
	for g := range followersGroups {
		in.Inbound = append(in.Inbound, core.Message{Topic: core.Topic(followersGroup(g)), Payload: []byte(`{"type":"leader","leader":"a","term":1,"from":"a","group":"` + followersGroup(g) + `"}`)})
	}
	out.Reset()
	if err := st.Step(&in, &out); err != nil {
		tb.Fatal(err)
	}
	if len(out.Publishes) != followersGroups {
		tb.Fatalf("%d acks of %d leaders", len(out.Publishes), followersGroups)
	}
	return &core.Input{}
}

func followersGroup(g int) string { return "group-" + strconv.Itoa(10000 + g)[1:] }

// followersHeartbeats[k] is the batch of step k mod 25: heartbeats of
// groups k, k+25, k+50, ...
var followersHeartbeats = sync.OnceValue(func() [][]core.Message {
	batches := make([][]core.Message, 25)
	for g := range followersGroups {
		batches[g%25] = append(batches[g%25], core.Message{Topic: core.Topic(followersGroup(g)), Payload: []byte(`{"type":"heartbeat","leader":"a","term":1,"from":"a","group":"` + followersGroup(g) + `","seq":` + strconv.Itoa(g) + `}`)})
	}
	return batches
})

// followersNext makes in step j: 20 ms after step j-1, with its batch.
func followersNext(in *core.Input, j int) {
	in.Now = 3 + 20*int64(j)
	in.Inbound = followersHeartbeats()[j%25]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

type extismStepper struct {
	p interface {
		Call(string, []byte) (uint32, []byte, error)
	}
}

func (s extismStepper) Step(in *core.Input, out *core.Output) error {
	b, _ := abi.MarshalInput(nil, in)
	rc, ob, err := s.p.Call("step", b)
	if err != nil || rc != 0 {
		return fmt.Errorf("rc %d: %v", rc, err)
	}
	_, err = abi.UnmarshalOutput(ob, out)
	return err
}

// BenchmarkLoad: cold compile (empty cache directory), warm load (a cache
// directory filled by an earlier process: the in-process cache is dropped),
// and instantiation (with _initialize).
func BenchmarkLoad(b *testing.B) {
	ctx := context.Background()
	wasm, err := LoadModule(testWasm)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("op=compile-cold", func(b *testing.B) {
		for b.Loop() {
			dir := b.TempDir()
			r, err := NewRuntime(ctx, Config{Wasm: wasm, CacheDir: dir, Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			r.Close(ctx)
			forgetCache(dir)
		}
	})
	b.Run("op=load-warm", func(b *testing.B) {
		dir := b.TempDir()
		r, err := NewRuntime(ctx, Config{Wasm: wasm, CacheDir: dir, Logger: discardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		r.Close(ctx)
		forgetCache(dir)
		for b.Loop() {
			// As a new process would: read the file, open the cache, compile.
			r, err := NewRuntime(ctx, Config{WasmPath: testWasm, CacheDir: dir, Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			r.Close(ctx)
			forgetCache(dir)
		}
	})
	b.Run("op=instantiate", func(b *testing.B) {
		r := testRuntime(b)
		for b.Loop() {
			inst, err := r.NewInstance(ctx)
			if err != nil {
				b.Fatal(err)
			}
			inst.Close(ctx)
		}
	})
}

// forgetCache drops the process-wide compilation cache of dir, so the next
// NewRuntime reads it from disk like a new process.
func forgetCache(dir string) {
	cachesMu.Lock()
	defer cachesMu.Unlock()
	if c, ok := caches[dir]; ok {
		c.Close(context.Background())
		delete(caches, dir)
	}
}

// BenchmarkInstanceMemory reports an instance's linear memory: fresh, and
// after hosting one 5-member group through 1,000 steps.
func BenchmarkInstanceMemory(b *testing.B) {
	r := testRuntime(b)
	for b.Loop() {
		inst, err := r.NewInstance(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		fresh := inst.MemoryBytes()
		in := benchSetup(b, inst)
		var out core.Output
		for i := range 1000 {
			in.Now = 3 + int64(i%50)
			out.Reset()
			inst.Step(in, &out)
		}
		b.ReportMetric(float64(fresh)/(1<<20), "MiB-fresh")
		b.ReportMetric(float64(inst.MemoryBytes())/(1<<20), "MiB-used")
		inst.Close(context.Background())
	}
}

// BenchmarkManyGroups: 10,000 groups in one instance (native and wasm).
// Setup joins them; one op is one batch carrying one heartbeat for
// each of 100 groups; the timers of all 10,000 groups run as time advances.
func BenchmarkManyGroups(b *testing.B) {
	const groups = 10_000
	for _, rc := range []struct {
		name string
		rt   func(testing.TB) *Runtime
	}{{"native", nil}, {"default", testRuntime}} {
		b.Run("rt="+rc.name, func(b *testing.B) {
			inst, memory := benchInstance(b, rc.rt)
			ids := []string{"a", "b", "c"}
			var out core.Output
			for start := 0; start < groups; start += 1000 {
				in := core.Input{Now: 1}
				for g := start; g < start+1000; g++ {
					in.Join = append(in.Join, core.GroupSpec{Config: core.Config{ID: "b", Group: fmt.Sprintf("group-%05d", g), Members: ids, HeartbeatMs: 1000, ElectionTimeoutMs: 600_000}})
				}
				out.Reset()
				if err := inst.Step(&in, &out); err != nil {
					b.Fatal(err)
				}
			}
			var in core.Input
			for g := range 100 {
				topic := core.Topic(fmt.Sprintf("group-%05d", g*97))
				in.Inbound = append(in.Inbound, core.Message{Topic: topic, Payload: fmt.Appendf(nil, `{"type":"heartbeat","leader":"a","from":"a","term":1,"seq":%d}`, g)})
			}
			now := int64(2)
			b.ResetTimer()
			for b.Loop() {
				now += 10
				in.Now = now
				out.Reset()
				if err := inst.Step(&in, &out); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if m := memory(); m > 0 {
				b.ReportMetric(float64(m)/(1<<20), "MiB")
			}
			st, ok, _ := inst.Status("group-09999")
			if !ok || st.ID != "b" {
				b.Fatal("group missing")
			}
		})
	}
}

// BenchmarkStepAllDue: 10,000 quorum groups whose timers all came due
// together (a host stalled for longer than an election timeout); one op
// steps at one time until no timer is left due. The core runs at most 1,024
// due timers per Step, so longest-step-ms, the longest single Step (what a
// call deadline must allow), stays a tenth of the op.
func BenchmarkStepAllDue(b *testing.B) {
	const groups = 10_000
	for _, rc := range []struct {
		name string
		rt   func(testing.TB) *Runtime
	}{{"native", nil}, {"default", testRuntime}} {
		b.Run("rt="+rc.name, func(b *testing.B) {
			inst, _ := benchInstance(b, rc.rt)
			ids := []string{"a", "b", "c"}
			var out core.Output
			for start := 0; start < groups; start += 250 {
				in := core.Input{Now: 1}
				for g := start; g < start+250; g++ {
					in.Join = append(in.Join, core.GroupSpec{Config: core.Config{ID: "b", Group: fmt.Sprintf("group-%05d", g), Members: ids}})
				}
				out.Reset()
				if err := inst.Step(&in, &out); err != nil {
					b.Fatal(err)
				}
			}
			now := int64(1)
			var longest time.Duration
			for b.Loop() {
				now += 20_000 // past every campaign's deadline
				for {
					out.Reset()
					start := time.Now()
					if err := inst.Step(&core.Input{Now: now}, &out); err != nil {
						b.Fatal(err)
					}
					longest = max(longest, time.Since(start))
					if out.WakeAt > now {
						break
					}
				}
			}
			b.ReportMetric(float64(longest.Microseconds())/1000, "longest-step-ms")
		})
	}
}

// benchInstance is a native engine (rt nil) or a wasm instance of rt, closed
// when b ends, and a reader of its linear memory (0 natively).
func benchInstance(b *testing.B, rt func(testing.TB) *Runtime) (interface {
	Step(*core.Input, *core.Output) error
	Status(string) (core.Status, bool, error)
}, func() uint64) {
	if rt == nil {
		return nativeStatus{core.NewEngine()}, func() uint64 { return 0 }
	}
	wi, err := rt(b).NewInstance(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { wi.Close(context.Background()) })
	return wi, wi.MemoryBytes
}

type nativeStatus struct{ e *core.Engine }

func (n nativeStatus) Step(in *core.Input, out *core.Output) error { n.e.Step(in, out); return nil }
func (n nativeStatus) Status(g string) (core.Status, bool, error) {
	st, ok := n.e.Status(g)
	return st, ok, nil
}

// BenchmarkInstanceRSS reports the resident memory each extra instance costs
// the process (Linux: /proc/self/statm), with one group stepped 100 times.
func BenchmarkInstanceRSS(b *testing.B) {
	r := testRuntime(b)
	const n = 20
	for b.Loop() {
		runtime.GC()
		before := rssBytes()
		var insts []*Instance
		for range n {
			inst, err := r.NewInstance(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			in := benchSetup(b, inst)
			var out core.Output
			for i := range 100 {
				in.Now = 3 + int64(i%50)
				out.Reset()
				inst.Step(in, &out)
			}
			insts = append(insts, inst)
		}
		runtime.GC()
		after := rssBytes()
		for _, inst := range insts {
			inst.Close(context.Background())
		}
		if before > 0 {
			b.ReportMetric(float64(after-before)/n/(1<<20), "MiB-RSS/instance")
		}
	}
}

func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
