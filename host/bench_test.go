package host

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/electcore/electcore/core"
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
type msgpStepper struct {
	e         *core.Engine
	inb, outb []byte
	in        core.Input
	out       core.Output
}

func (m *msgpStepper) Step(in *core.Input, out *core.Output) error {
	var err error
	if m.inb, err = in.MarshalMsg(m.inb[:0]); err != nil {
		return err
	}
	m.stepBytes()
	_, err = out.UnmarshalMsg(m.outb)
	return err
}

func (m *msgpStepper) stepBytes() {
	if err := core.CheckBatch(m.inb); err != nil {
		panic(err)
	}
	m.in = core.Input{Join: m.in.Join[:0], Inbound: m.in.Inbound[:0], Commands: m.in.Commands[:0]}
	if _, err := m.in.UnmarshalMsg(m.inb); err != nil {
		panic(err)
	}
	m.out.Reset()
	m.e.Step(&m.in, &m.out)
	var err error
	if m.outb, err = m.out.MarshalMsg(m.outb[:0]); err != nil {
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

// BenchmarkStep: the same batches through the native core (Step alone;
// native-msgp: the module's work, i.e. msgp-decode the Input, Step,
// msgp-encode the Output) and the module (every call under its deadline).
// The wasm figures also include the host's encoding of the Input and
// decoding of the Output, so their ratio to native-msgp is conservative.
func BenchmarkStep(b *testing.B) {
	for _, batch := range []string{"heartbeat", "empty"} {
		for _, impl := range []string{"native", "native-msgp", "wasm"} {
			b.Run("batch="+batch+"/impl="+impl, func(b *testing.B) {
				if impl == "native-msgp" {
					benchModuleWork(b, batch == "empty")
					return
				}
				var st interface {
					Step(*core.Input, *core.Output) error
				} = nativeStepper{core.NewEngine()}
				if impl != "native" {
					inst, err := testRuntime(b).NewInstance(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					defer inst.Close(context.Background())
					st = inst
				}
				benchStep(b, st, batch == "empty")
			})
		}
	}
}

// benchModuleWork times msgpStepper.stepBytes on pre-encoded batches.
func benchModuleWork(b *testing.B, empty bool) {
	m := &msgpStepper{e: core.NewEngine()}
	in := benchSetup(b, m)
	if empty {
		in.Inbound = nil
	}
	encs := make([][]byte, 50)
	for k := range encs {
		in.Now = 3 + int64(k)
		encs[k], _ = in.MarshalMsg(nil)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		m.inb = encs[i%len(encs)]
		m.stepBytes()
	}
}

// BenchmarkExtismCall: the same heartbeat batch through the Extism Go SDK.
func BenchmarkExtismCall(b *testing.B) {
	p := newExtismPlugin(b)
	defer p.Close(context.Background())
	st := extismStepper{p}
	in := benchSetup(b, st)
	buf, _ := in.MarshalMsg(nil)
	b.ReportAllocs()
	for b.Loop() {
		if rc, _, err := p.Call("step", buf); err != nil || rc != 0 {
			b.Fatal(rc, err)
		}
	}
}

type extismStepper struct {
	p interface {
		Call(string, []byte) (uint32, []byte, error)
	}
}

func (s extismStepper) Step(in *core.Input, out *core.Output) error {
	b, _ := in.MarshalMsg(nil)
	rc, ob, err := s.p.Call("step", b)
	if err != nil || rc != 0 {
		return fmt.Errorf("rc %d: %v", rc, err)
	}
	_, err = out.UnmarshalMsg(ob)
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
			r, err := NewRuntime(ctx, RuntimeConfig{Wasm: wasm, CacheDir: dir, Logger: discardLogger()})
			if err != nil {
				b.Fatal(err)
			}
			r.Close(ctx)
			forgetCache(dir)
		}
	})
	b.Run("op=load-warm", func(b *testing.B) {
		dir := b.TempDir()
		r, err := NewRuntime(ctx, RuntimeConfig{Wasm: wasm, CacheDir: dir, Logger: discardLogger()})
		if err != nil {
			b.Fatal(err)
		}
		r.Close(ctx)
		forgetCache(dir)
		for b.Loop() {
			// As a new process would: read the file, open the cache, compile.
			r, err := NewRuntime(ctx, RuntimeConfig{WasmPath: testWasm, CacheDir: dir, Logger: discardLogger()})
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
			var inst interface {
				Step(*core.Input, *core.Output) error
				Status(string) (core.Status, bool, error)
			}
			memory := func() uint64 { return 0 }
			if rc.rt == nil {
				inst = nativeStatus{core.NewEngine()}
			} else {
				wi, err := rc.rt(b).NewInstance(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				defer wi.Close(context.Background())
				inst, memory = wi, wi.MemoryBytes
			}
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
