// Package nodeexample holds the Go side of the Node example's byte-identical
// check: testdata/trace-in.msgp is a recorded sequence of msgp core.Input
// batches for one engine, testdata/trace-out.msgp the msgp core.Output the Go
// core (core.Engine) returns for each. TestTrace records and verifies both
// files with what a Go user has (core.Engine and msgp); test/trace.test.mjs
// checks that the module in Node (Extism SDK and node:wasi) returns the same
// bytes. That the module under wazero returns them too is the differential
// tests' job (internal/wasmhost). Regenerate with
//
//	go test ./examples/node -run TestTrace -update
package nodeexample

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
	"github.com/tinylib/msgp/msgp"
)

var update = flag.Bool("update", false, "re-record testdata/trace-in.msgp and trace-out.msgp")

const (
	inFile  = "testdata/trace-in.msgp"
	outFile = "testdata/trace-out.msgp"
)

func TestTrace(t *testing.T) {
	if *update {
		ins := record(t)
		writeFrames(t, inFile, ins)
		t.Logf("recorded %d batches", len(ins))
	}
	ins := readFrames(t, inFile)
	if len(ins) < 100 {
		t.Fatalf("%s: %d batches, want a real trace", inFile, len(ins))
	}

	eng := core.NewEngine()
	outs := make([][]byte, len(ins))
	var in core.Input
	var out core.Output
	for i, b := range ins {
		in = core.Input{}
		if rest, err := abi.UnmarshalInput(b, &in); err != nil || len(rest) != 0 {
			t.Fatalf("batch %d: %v (%d bytes left over)", i, err, len(rest))
		}
		out.Reset()
		eng.Step(&in, &out)
		var err error
		if outs[i], err = abi.EncodeOutput(nil, &out); err != nil {
			t.Fatal(err)
		}
	}
	if *update {
		writeFrames(t, outFile, outs)
	}
	want := readFrames(t, outFile)
	if len(want) != len(outs) {
		t.Fatalf("%s has %d outputs, %s %d inputs", outFile, len(want), inFile, len(ins))
	}
	for i := range outs {
		if !bytes.Equal(outs[i], want[i]) {
			t.Fatalf("batch %d: the core's output differs from %s (regenerate with -update if the core changed on purpose)\n got %x\nwant %x", i, outFile, outs[i], want[i])
		}
	}
	summarize(t, want)
}

// summarize logs what the trace exercises and insists it covers elections,
// resign, transfer and rejected inputs.
func summarize(t *testing.T, outs [][]byte) {
	kinds := map[string]int{}
	pubs := 0
	for _, b := range outs {
		var o core.Output
		if _, err := abi.UnmarshalOutput(b, &o); err != nil {
			t.Fatal(err)
		}
		pubs += len(o.Publishes)
		for _, e := range o.Events {
			kinds[e.Kind.String()]++
		}
	}
	t.Logf("%d batches, %d publishes, events %v", len(outs), pubs, kinds)
	for _, k := range []string{"became-leader", "stepped-down", "leader-changed", "rejected", "lease", "joined"} {
		if kinds[k] == 0 {
			t.Errorf("the trace has no %q event", k)
		}
	}
}

func writeFrames(t *testing.T, file string, frames [][]byte) {
	b := msgp.AppendArrayHeader(nil, uint32(len(frames)))
	for _, f := range frames {
		b = msgp.AppendBytes(b, f)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFrames(t *testing.T, file string) [][]byte {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (record it with -update)", err)
	}
	n, b, err := msgp.ReadArrayHeaderBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	frames := make([][]byte, n)
	for i := range frames {
		if frames[i], b, err = msgp.ReadBytesBytes(b, nil); err != nil {
			t.Fatalf("%s frame %d: %v", file, i, err)
		}
	}
	return frames
}

// record runs a 3-member quorum group (n1, n2, n3) in virtual time on three
// engines and returns n1's input batches: elections, heartbeats, a
// resign, a transfer, a campaign, a crashed and restarted peer, and inputs
// the core must refuse (garbage, another group, an oversized payload, a
// non-member, a stale term).
func record(t *testing.T) [][]byte {
	const (
		group   = "trace"
		latency = 15 // ms, every delivery
		end     = 12_000
		wall0   = 1_760_000_000_000
	)
	ids := []string{"n1", "n2", "n3"}
	prio := map[string]uint32{"n1": 30, "n2": 20, "n3": 10}
	type node struct {
		eng     *core.Engine
		state   core.GroupState
		wake    int64
		inbox   []core.Message
		cmds    []core.Command
		join    []core.GroupSpec
		down    bool
		persist core.GroupState
	}
	type flight struct {
		at   int64
		to   string
		m    core.Message
		from string
	}
	nodes := map[string]*node{}
	var air []flight
	var trace [][]byte
	spec := func(id string, st core.GroupState) core.GroupSpec {
		return core.GroupSpec{Config: core.Config{ID: id, Group: group, Members: ids, Priority: prio[id],
			HeartbeatMs: 100, ElectionTimeoutMs: 600}, State: st}
	}
	start := func(id string) {
		n := &node{eng: core.NewEngine()}
		if old := nodes[id]; old != nil {
			n.persist = old.persist
		}
		n.join = []core.GroupSpec{spec(id, n.persist)}
		nodes[id] = n
	}
	for _, id := range ids {
		start(id)
	}
	topic := core.Topic(group)
	inject := func(now int64, payload string) {
		air = append(air, flight{at: now, to: "n1", m: core.Message{Topic: topic, Payload: []byte(payload)}, from: "x"})
	}
	var out core.Output
	for now := int64(0); now <= end; now++ {
		switch now {
		case 2500:
			nodes["n1"].cmds = append(nodes["n1"].cmds, core.Command{Kind: core.CmdResign, Group: group})
		case 4000:
			inject(now, "not json at all")
			inject(now, `{"type":"heartbeat","leader":"intruder","term":99,"timestamp":"1"}`)
			inject(now, `{"type":"election","candidate":"n2","priority":20,"term":0}`)
			inject(now, `{"type":"leader","leader":"n3"`)
			inject(now, `{"type":"heartbeat","leader":"n2","term":1,"group":"other"}`)
			inject(now, `{"type":"`+string(bytes.Repeat([]byte("x"), core.MaxPayload+10))+`"}`)
			air = append(air, flight{at: now, to: "n1", m: core.Message{Topic: "election:other", Payload: []byte(`{"type":"heartbeat","leader":"n2","term":1}`)}, from: "x"})
		case 5000:
			nodes["n1"].cmds = append(nodes["n1"].cmds, core.Command{Kind: core.CmdTransfer, Group: group, Target: "n3"})
			nodes["n1"].cmds = append(nodes["n1"].cmds, core.Command{Kind: core.CmdTransfer, Group: "nope", Target: "n3"})
		case 6500:
			nodes["n2"].down = true // crash: no more steps, nothing delivered
		case 8000:
			nodes["n1"].cmds = append(nodes["n1"].cmds, core.Command{Kind: core.CmdCampaign, Group: group})
		case 9000:
			start("n2") // restart from what it persisted
		}
		// Deliver what arrives now.
		rest := air[:0]
		for _, f := range air {
			if f.at <= now {
				if n := nodes[f.to]; !n.down {
					n.inbox = append(n.inbox, f.m)
				}
			} else {
				rest = append(rest, f)
			}
		}
		air = rest
		for _, id := range ids {
			n := nodes[id]
			if n.down || (len(n.join) == 0 && len(n.inbox) == 0 && len(n.cmds) == 0 && (n.wake == 0 || n.wake > now)) {
				continue
			}
			in := core.Input{Now: now, Wall: wall0 + now, Join: n.join, Inbound: n.inbox, Commands: n.cmds}
			b, err := abi.MarshalInput(nil, &in)
			if err != nil {
				t.Fatal(err)
			}
			if id == "n1" {
				trace = append(trace, b)
			}
			n.join, n.inbox, n.cmds = nil, nil, nil
			out = core.Output{}
			n.eng.Step(&in, &out)
			for _, p := range out.Persist {
				n.persist = p
			}
			for _, m := range out.Publishes {
				for _, to := range ids { // NATS echoes a publish to its sender too
					air = append(air, flight{at: now + latency, to: to, m: core.Message{Topic: m.Topic, Payload: slices.Clone(m.Payload)}, from: id})
				}
			}
			n.wake = out.WakeAt
		}
	}
	if len(trace) == 0 {
		t.Fatal(fmt.Errorf("empty trace"))
	}
	return trace
}
