package wasmhost

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
)

// instancePool hands out module instances reset to a fresh engine, so a
// differential run does not pay ~20 ms of instantiation per node.
type instancePool struct {
	rt   *Runtime
	mu   sync.Mutex
	free []*Instance
	used []*Instance
}

func (p *instancePool) get(t testing.TB) *Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	var i *Instance
	if n := len(p.free); n > 0 {
		i, p.free = p.free[n-1], p.free[:n-1]
	} else {
		var err error
		if i, err = p.rt.NewInstance(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	p.used = append(p.used, i)
	return i
}

// recycle resets every instance handed out since the last recycle.
func (p *instancePool) recycle(t testing.TB) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, i := range p.used {
		if err := i.Reset(); err != nil {
			t.Fatal(err)
		}
		p.free = append(p.free, i)
	}
	p.used = p.used[:0]
}

func (p *instancePool) close() {
	for _, i := range append(p.free, p.used...) {
		i.Close(context.Background())
	}
}

// dualStepper steps a native core.Engine and a wasm instance with the same
// batch and records any difference between their msgp-encoded outputs. The
// wasm output is what the caller gets.
type dualStepper struct {
	nat      *core.Engine
	inst     *Instance
	nout     core.Output
	in, want []byte
	steps    *int
	diff     *string
	label    string
}

func (d *dualStepper) Step(in *core.Input, out *core.Output) error {
	var err error
	if d.in, err = abi.MarshalInput(d.in[:0], in); err != nil {
		return err
	}
	d.nout.Reset()
	d.nat.Step(in, &d.nout)
	if d.want, err = abi.EncodeOutput(d.want[:0], &d.nout); err != nil {
		return err
	}
	got, err := d.inst.StepBytes(d.in)
	if err != nil {
		return err
	}
	*d.steps++
	if !bytes.Equal(got, d.want) && *d.diff == "" {
		var g core.Output
		abi.UnmarshalOutput(got, &g)
		*d.diff = fmt.Sprintf("%s step %d: outputs differ\ninput:  %+v\nnative: %+v\nwasm:   %+v", d.label, *d.steps, *in, d.nout, g)
	}
	var sc core.Output
	return decodeOutput(got, out, &sc)
}

// swarm is a small deterministic simulation used for the differential test:
// virtual time, random delays, loss, duplication, garbage payloads, crashes
// with restarts from persisted state, and random commands.
type swarm struct {
	r      *rand.Rand
	ids    []string
	cfg    core.Config
	nodes  []*swarmNode
	flight []flight
	now    int64
	steps  int
}

type swarmNode struct {
	id string
	st interface {
		Step(*core.Input, *core.Output) error
	}
	up    bool
	state core.GroupState
	wake  int64
	inbox []core.Message
	out   core.Output
}

type flight struct {
	at int64
	to int
	m  core.Message
}

func runSwarm(seed uint64, newStepper func(id string) interface {
	Step(*core.Input, *core.Output) error
}) error {
	r := rand.New(rand.NewPCG(seed, 0xd1ff))
	s := &swarm{r: r}
	n := 3 + r.IntN(3)
	for i := range n {
		s.ids = append(s.ids, "n"+strconv.Itoa(i))
	}
	hb := 20 + r.Int64N(30)
	s.cfg = core.Config{Group: "g" + strconv.FormatUint(seed, 10), HeartbeatMs: hb, ElectionTimeoutMs: 4 * hb, Mode: core.ModeQuorum, Members: s.ids}
	if r.IntN(2) == 0 {
		s.cfg.Mode = core.ModeBully
		if r.IntN(2) == 0 {
			s.cfg.Members = nil
		}
	}
	loss := []float64{0, 0.02, 0.1}[r.IntN(3)]
	dup := []float64{0, 0.05}[r.IntN(2)]
	maxDelay := 1 + r.Int64N(hb)
	for _, id := range s.ids {
		nd := &swarmNode{id: id}
		s.nodes = append(s.nodes, nd)
		if err := s.start(nd, newStepper); err != nil {
			return err
		}
	}
	end := 40 * hb
	for s.now = 0; s.now < end; s.now += 5 {
		// deliver what is due
		keep := s.flight[:0]
		for _, f := range s.flight {
			if f.at <= s.now {
				if s.nodes[f.to].up {
					s.nodes[f.to].inbox = append(s.nodes[f.to].inbox, f.m)
				}
			} else {
				keep = append(keep, f)
			}
		}
		s.flight = keep
		for i, nd := range s.nodes {
			if !nd.up {
				if r.IntN(200) == 0 {
					if err := s.start(nd, newStepper); err != nil {
						return err
					}
				}
				continue
			}
			if r.IntN(400) == 0 { // crash
				nd.up, nd.inbox = false, nil
				continue
			}
			in := core.Input{Now: s.now, Wall: 1_700_000_000_000 + s.now}
			if r.IntN(150) == 0 {
				kind := core.CommandKind(1 + r.IntN(3))
				c := core.Command{Kind: kind, Group: s.cfg.Group}
				if kind == core.CmdTransfer {
					c.Target = s.ids[r.IntN(n)]
				}
				in.Commands = append(in.Commands, c)
			}
			if r.IntN(300) == 0 {
				garbage := [][]byte{[]byte(`{"type":"vote","term":1e30}`), []byte(`not json`), []byte(`{"type":"leader"}`), bytes.Repeat([]byte("x"), core.MaxPayload+1)}
				nd.inbox = append(nd.inbox, core.Message{Topic: core.Topic(s.cfg.Group), Payload: garbage[r.IntN(len(garbage))]})
			}
			if len(nd.inbox) == 0 && len(in.Commands) == 0 && (nd.wake == 0 || nd.wake > s.now) {
				continue
			}
			in.Inbound, nd.inbox = nd.inbox, nil
			if err := s.step(i, nd, &in, loss, dup, maxDelay); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *swarm) start(nd *swarmNode, newStepper func(string) interface {
	Step(*core.Input, *core.Output) error
}) error {
	nd.st, nd.up = newStepper(nd.id), true
	cfg := s.cfg
	cfg.ID = nd.id
	cfg.Members = slices.Clone(s.cfg.Members)
	in := core.Input{Now: s.now, Join: []core.GroupSpec{{Config: cfg, State: nd.state}}}
	return s.step(slices.Index(s.nodes, nd), nd, &in, 0, 0, 1)
}

func (s *swarm) step(i int, nd *swarmNode, in *core.Input, loss, dup float64, maxDelay int64) error {
	nd.out.Reset()
	if err := nd.st.Step(in, &nd.out); err != nil {
		return err
	}
	s.steps++
	for _, p := range nd.out.Persist {
		nd.state = p
	}
	nd.wake = nd.out.WakeAt
	for _, m := range nd.out.Publishes {
		for to := range s.nodes {
			if to == i || s.r.Float64() < loss {
				continue
			}
			copies := 1
			if s.r.Float64() < dup {
				copies = 2
			}
			for range copies {
				s.flight = append(s.flight, flight{at: s.now + 1 + s.r.Int64N(maxDelay), to: to, m: m})
			}
		}
	}
	return nil
}

// TestDifferential runs small swarms on many seeds with every node stepping
// the native core and the wasm module side by side; every output batch must
// be byte-identical (msgp). ELECTCORE_DIFF_SEEDS overrides the seed count.
func TestDifferential(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 50
	}
	if v, err := strconv.Atoi(os.Getenv("ELECTCORE_DIFF_SEEDS")); err == nil {
		seeds = v
	}
	// Most seeds on one runtime, some on another (two pools of instances).
	fast, slow := &instancePool{rt: testRuntime(t)}, &instancePool{rt: testRuntime(t)}
	defer fast.close()
	defer slow.close()
	total := 0
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		pool := fast
		if seed%10 == 0 {
			pool = slow
		}
		var diff string
		steps := 0
		err := runSwarm(seed, func(id string) interface {
			Step(*core.Input, *core.Output) error
		} {
			return &dualStepper{nat: core.NewEngine(), inst: pool.get(t), steps: &steps, diff: &diff, label: fmt.Sprintf("seed %d node %s", seed, id)}
		})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if diff != "" {
			t.Fatalf("seed %d: %s", seed, diff)
		}
		total += steps
		pool.recycle(t)
	}
	t.Logf("%d seeds, %d batches compared byte for byte", seeds, total)
}
