package wasmhost

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/core/sim"
)

func hostTestPriv(id string) ed25519.PrivateKey {
	s := sha256.Sum256([]byte("electcore host test key " + id))
	return ed25519.NewKeyFromSeed(s[:])
}

func hostTestGroupKey() []byte {
	s := sha256.Sum256([]byte("electcore host test group key"))
	return s[:]
}

// authTestConfig is id's config in a quorum group of ids with auth mode.
func authTestConfig(mode core.AuthMode, id, group string, ids []string) core.Config {
	c := core.Config{ID: id, Group: group, Members: ids, Auth: mode, HeartbeatMs: 50, ElectionTimeoutMs: 200}
	switch mode {
	case core.AuthHMAC:
		c.Key = hostTestGroupKey()
	case core.AuthEd25519:
		c.Key = hostTestPriv(id)
		c.MemberKeys = map[string][]byte{}
		for _, m := range ids {
			c.MemberKeys[m] = hostTestPriv(m).Public().(ed25519.PublicKey)
		}
	}
	return c
}

// wasmNet is a synchronous bus between module instances.
type wasmNet struct {
	t     *testing.T
	ids   []string
	nodes map[string]*Instance
	now   int64
	queue []core.Message
	last  map[string]core.Message // last publish by sender+" "+type
}

func newWasmNet(t *testing.T, mode core.AuthMode, ids ...string) *wasmNet {
	n := &wasmNet{t: t, ids: ids, nodes: map[string]*Instance{}, last: map[string]core.Message{}}
	for _, id := range ids {
		inst, err := testRuntime(t).NewInstance(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { inst.Close(context.Background()) })
		n.nodes[id] = inst
		var out core.Output
		if err := inst.Join(core.GroupSpec{Config: authTestConfig(mode, id, "g", ids)}, 0, &out); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func (n *wasmNet) step(id string, in *core.Input) core.Output {
	var out core.Output
	if err := n.nodes[id].Step(in, &out); err != nil {
		n.t.Fatal(err)
	}
	for _, p := range out.Publishes {
		n.queue = append(n.queue, p)
		typ := strings.SplitN(strings.TrimPrefix(string(p.Payload), `{"type":"`), `"`, 2)[0]
		n.last[id+" "+typ] = p
	}
	return out
}

// advance ticks every node every 5 ms for ms, delivering at once.
func (n *wasmNet) advance(ms int64) {
	for end := n.now + ms; n.now < end; {
		n.now += 5
		for _, id := range n.ids {
			n.step(id, &core.Input{Now: n.now})
		}
		for len(n.queue) > 0 {
			q := n.queue
			n.queue = nil
			for _, id := range n.ids {
				n.step(id, &core.Input{Now: n.now, Inbound: q})
			}
		}
	}
}

func (n *wasmNet) status(id string) core.Status {
	s, ok, err := n.nodes[id].Status("g")
	if err != nil || !ok {
		n.t.Fatalf("status %s: %v %v", id, ok, err)
	}
	return s
}

// TestAuthThroughWasm: the module (not the native core) refuses a forged
// leader claim, a forged vote, a replayed heartbeat, an unsigned seed-format
// claim, an oversized payload and a deeply nested one, each with its reason
// and without any change of state.
func TestAuthThroughWasm(t *testing.T) {
	for _, mode := range []core.AuthMode{core.AuthEd25519, core.AuthHMAC} {
		t.Run(string(mode), func(t *testing.T) {
			n := newWasmNet(t, mode, "a", "b", "c")
			n.advance(1000)
			var leader, f string
			for _, id := range n.ids {
				if n.status(id).Role == core.RoleLeader {
					leader = id
				}
			}
			for _, id := range n.ids {
				if id != leader {
					f = id
					break
				}
			}
			if leader == "" {
				t.Fatal("no leader")
			}
			hb, ok := n.last[leader+" heartbeat"]
			if !ok {
				t.Fatal("no heartbeat captured")
			}
			term := n.status(f).Term
			bogus := strings.Repeat("A", 86)
			if mode == core.AuthHMAC {
				bogus = strings.Repeat("A", 43)
			}
			var other string
			for _, id := range n.ids {
				if id != leader && id != f {
					other = id
				}
			}
			cases := []struct{ payload, reason string }{
				{fmt.Sprintf(`{"type":"leader","group":"g","from":"%s","leader":"%s","priority":9999,"term":%d,"seq":1,"epoch":5,"ctr":1,"sig":"%s"}`, other, other, term+3, bogus), "auth: bad signature"},
				{fmt.Sprintf(`{"type":"vote","group":"g","from":"%s","priority":1,"candidate":"%s","term":%d,"granted":true,"epoch":5,"ctr":2,"sig":"%s"}`, other, f, term+1, bogus), "auth: bad signature"},
				{string(hb.Payload), "auth: replayed"},
				{fmt.Sprintf(`{"type":"leader","leader":"%s","term":%d}`, other, term+3), "auth: unsigned"},
				{`{"type":"heartbeat","from":"` + other + `","x":"` + strings.Repeat("x", core.MaxPayload) + `"}`, "oversized"},
				{`{"type":"heartbeat","from":"` + other + `","x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, "malformed: "},
			}
			for _, c := range cases {
				before := n.status(f)
				out := n.step(f, &core.Input{Now: n.now, Inbound: []core.Message{{Topic: core.Topic("g"), Payload: []byte(c.payload)}}})
				after := n.status(f)
				if len(out.Events) != 1 || out.Events[0].Kind != core.EventRejected || !strings.HasPrefix(out.Events[0].Reason, c.reason) {
					t.Fatalf("%.80s…: %+v, want a rejection %q", c.payload, out.Events, c.reason)
				}
				if len(out.Publishes)+len(out.Persist) > 0 {
					t.Fatalf("a refused message published or persisted: %+v", out)
				}
				before.Rejected, before.Forged, before.Replayed, before.Unsigned = 0, 0, 0, 0
				after.Rejected, after.Forged, after.Replayed, after.Unsigned = 0, 0, 0, 0
				if !reflect.DeepEqual(before, after) {
					t.Fatalf("state changed:\n%+v\n%+v", before, after)
				}
			}
			s := n.status(f)
			if s.Forged != 2 || s.Replayed != 1 || s.Unsigned != 1 || s.Rejected != 6 || s.Auth != mode || s.Epoch != 1 {
				t.Fatalf("counters %+v", s)
			}
			n.queue = nil
			n.advance(500)
			if s := n.status(f); s.Leader != leader || s.Term != term {
				t.Fatalf("after the attack: %+v", s)
			}
		})
	}
}

// TestAuthDifferentialSim: the simulator's adversary runs against swarms
// stepping the native core and the module side by side, authenticated:
// outputs byte-identical (signatures included) and no invariant broken.
func TestAuthDifferentialSim(t *testing.T) {
	pool := &instancePool{rt: testRuntime(t)}
	defer pool.close()
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		mode, auth := core.ModeQuorum, core.AuthHMAC
		if seed%2 == 0 {
			mode = core.ModeBully
		}
		nodes := 3 + int(seed%3)
		if seed == 1 {
			auth, nodes = core.AuthEd25519, 3
		}
		var diff string
		steps := 0
		res, err := sim.Run(sim.Options{
			Seed: seed, Mode: mode, Nodes: nodes, Adversary: true, Config: core.Config{Auth: auth},
			NewStepper: func(id string) (sim.Stepper, error) {
				return &dualStepper{nat: core.NewEngine(), inst: pool.get(t), steps: &steps, diff: &diff,
					label: fmt.Sprintf("seed %d %s %s node %s", seed, mode, auth, id)}, nil
			},
		})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if diff != "" {
			t.Fatalf("seed %d: %s", seed, diff)
		}
		for _, v := range res.Violations {
			t.Errorf("seed %d %s %s: %v", seed, mode, auth, v)
		}
		t.Logf("seed %d %s %s: %d batches identical, %d adversary deliveries, %d rejections", seed, mode, auth, steps, res.Injected, res.Rejected)
		pool.recycle(t)
	}
}

// BenchmarkVerifyWasm: the cost of one inbound heartbeat through the module
// (decode, verify, replay check, step, encode), signed or not; the
// difference is the per-message cost of verification in wasm. Compare with
// core's BenchmarkVerify (native).
func BenchmarkVerifyWasm(b *testing.B) {
	for _, rtName := range []string{"interrupt", "nointerrupt"} {
		for _, mode := range []core.AuthMode{core.AuthOff, core.AuthHMAC, core.AuthEd25519} {
			for _, kind := range []string{"vote", "heartbeat"} {
				b.Run(rtName+"/"+string(mode)+"/"+kind, func(b *testing.B) {
					r := testRuntime(b)
					if rtName == "nointerrupt" {
						r = testRuntime(b)
					}
					inst, err := r.NewInstance(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					defer inst.Close(context.Background())
					benchVerify(b, inst, mode, kind)
				})
			}
		}
	}
}

// benchVerify steps st (member "b") with one message from "a" per batch,
// each signed with a fresh counter: kind "vote" (a vote for someone else:
// verified, then ignored; the cost of verification alone) or "heartbeat"
// (verified, then acknowledged: verification plus signing the ack).
func benchVerify(b *testing.B, st interface {
	Step(*core.Input, *core.Output) error
}, mode core.AuthMode, kind string) {
	plainMsg := func(i int) []byte {
		if kind == "vote" {
			return []byte(fmt.Sprintf(`{"type":"vote","group":"g","from":"a","priority":7,"candidate":"c","term":0,"seq":%d}`, i+1))
		}
		return []byte(fmt.Sprintf(`{"type":"heartbeat","group":"g","from":"a","leader":"a","priority":7,"term":1,"seq":%d}`, i+1))
	}
	ids := []string{"a", "b", "c", "d", "e"}
	cfg := authTestConfig(mode, "b", "g", ids)
	cfg.HeartbeatMs, cfg.ElectionTimeoutMs = 0, 0
	var out core.Output
	if err := st.Step(&core.Input{Now: 1, Join: []core.GroupSpec{{Config: cfg}}}, &out); err != nil {
		b.Fatal(err)
	}
	msg := func(i int) []byte {
		p := plainMsg(i)
		if mode == core.AuthOff {
			return p
		}
		key := []byte(hostTestPriv("a"))
		if mode == core.AuthHMAC {
			key = hostTestGroupKey()
		}
		s, err := core.Seal(mode, key, "g", p, 1, uint64(i+1))
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	const pre = 4096
	msgs := make([][]byte, pre)
	for i := range msgs {
		msgs[i] = msg(i)
	}
	in := core.Input{Inbound: make([]core.Message, 1)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i > 0 && i%pre == 0 {
			// Fresh counters: a new epoch of the sender.
			b.StopTimer()
			for j := range msgs {
				p := msgs[j]
				if mode != core.AuthOff {
					key := []byte(hostTestPriv("a"))
					if mode == core.AuthHMAC {
						key = hostTestGroupKey()
					}
					p, _ = core.Seal(mode, key, "g", plainMsg(j), uint64(1+i/pre), uint64(j+1))
				}
				msgs[j] = p
			}
			b.StartTimer()
		}
		in.Now = 2 + int64(i%100)
		in.Inbound[0] = core.Message{Topic: core.Topic("g"), Payload: msgs[i%pre]}
		out.Reset()
		if err := st.Step(&in, &out); err != nil {
			b.Fatal(err)
		}
		if len(out.Events) > 0 && out.Events[0].Kind == core.EventRejected {
			b.Fatalf("rejected: %s", out.Events[0].Reason)
		}
		if kind == "vote" && len(out.Publishes) > 0 {
			b.Fatalf("published %s", out.Publishes[0].Payload)
		}
	}
}

// BenchmarkVerifyNativeStep is benchVerify on the native core, for the same
// comparison outside wasm.
func BenchmarkVerifyNativeStep(b *testing.B) {
	for _, mode := range []core.AuthMode{core.AuthOff, core.AuthHMAC, core.AuthEd25519} {
		for _, kind := range []string{"vote", "heartbeat"} {
			b.Run(string(mode)+"/"+kind, func(b *testing.B) { benchVerify(b, nativeStepper{core.NewEngine()}, mode, kind) })
		}
	}
}
