package abi

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/tinylib/msgp/msgp"
)

var update = flag.Bool("update", false, "rewrite the golden encodings under testdata/golden")

// key32 is a stand-in ed25519 public key.
func key32(c byte) []byte { return bytes.Repeat([]byte{c}, 32) }

// goldenCase is one value with its committed encoding: the ABI between
// hosts and the module, and (GroupState) the persisted state format, which
// a host reads back after an upgrade. encode: the file is what the encoder
// writes for v; otherwise it is an older encoding that must still decode.
// want is what the file decodes to, if not v.
type goldenCase struct {
	name   string
	v      any
	encode bool
	want   any
}

func goldenCases() []goldenCase {
	hb := []byte(`{"type":"heartbeat","leader":"a","term":3,"from":"a","group":"g","seq":9}`)
	cfg := core.Config{
		ID: "b", Group: "g", Priority: 7, BalancedPriority: true, Mode: core.ModeQuorum,
		Members: []string{"a", "b", "c"}, AwaitConfig: true,
		HeartbeatMs: 500, ElectionTimeoutMs: 2000, MaxDriftPPM: 50000, LeaseMs: 1500,
		HandoffHoldMs: 3000, CollectMs: 40, NoPriorityTransfer: true, Seed: 1 << 63,
		Auth: core.AuthEd25519, Key: key32('k'), MemberKeys: map[string][]byte{"a": key32('a')},
		Value: "10.0.0.2:8080",
	}
	st := core.GroupState{Group: "g", Term: 1<<32 + 5, Vote: "a", Epoch: 3, ConfTerm: 4, ConfIndex: 9,
		Members: []string{"a", "b", "c"}, Keys: [][]byte{key32('a'), key32('b'), key32('c')}}
	ev := core.Event{Kind: core.EventConfig, Group: "g", Term: 3, Leader: "a", LeaseUntil: -1, Reason: "committed",
		Request: 12, Member: "c", Members: []string{"a", "b", "c"}, ConfIndex: 9, Value: "v"}
	return []goldenCase{
		// The persisted state: what a host saves and reads back.
		{name: "state-zero", v: &core.GroupState{}, encode: true},
		{name: "state-basic", v: &core.GroupState{Group: "election:g/1", Term: 7, Vote: "node-a", Epoch: 2}, encode: true},
		{name: "state-quorum", v: &st, encode: true},
		{name: "state-empty-lists", v: &core.GroupState{Group: "g", Term: 1, Members: []string{}, Keys: [][]byte{}}, encode: true},
		// Older formats: before the epoch (group, term, vote), and before
		// the configuration (group, term, vote, epoch).
		{name: "state-v1", v: oldState(false), want: &core.GroupState{Group: "g", Term: 5, Vote: "b"}},
		{name: "state-v2", v: oldState(true), want: &core.GroupState{Group: "g", Term: 5, Vote: "b", Epoch: 2}},

		// Batches into the module.
		{name: "input-idle", v: &core.Input{Now: 5}, encode: true},
		{name: "input-heartbeat", v: &core.Input{Now: 1 << 40, Wall: 1_700_000_000_000, Inbound: []core.Message{
			{Topic: core.Topic("g"), Payload: hb}, {Topic: core.Topic("h"), Payload: []byte{}}}}, encode: true},
		{name: "input-full", v: &core.Input{Now: -3, Wall: 9,
			Join:    []core.GroupSpec{{Config: cfg, State: st, Incarnation: 1 << 60, Request: 4}, {Config: core.Config{ID: "x", Group: "h"}}},
			Inbound: []core.Message{{Topic: core.Topic("g"), Payload: hb}},
			Commands: []core.Command{{Kind: core.CmdAddMember, Group: "g", Target: "d", Key: key32('d'), Value: "v", Request: 5},
				{Kind: core.CmdProclaim, Group: "g", Value: "w"}},
			Backlog: true}, encode: true},
		{name: "input-empty-lists", v: &core.Input{Now: 5, Join: []core.GroupSpec{}, Inbound: []core.Message{}, Commands: []core.Command{}},
			encode: true, want: &core.Input{Now: 5}},

		// What the module returns.
		{name: "output-empty", v: &core.Output{}, encode: true},
		{name: "output-heartbeat", v: &core.Output{Publishes: []core.Message{{Topic: core.Topic("g"), Payload: hb}}, WakeAt: 1 << 40}, encode: true},
		{name: "output-full", v: &core.Output{
			Persist:   []core.GroupState{st, {Group: "h", Term: 1}},
			Publishes: []core.Message{{Topic: core.Topic("g"), Payload: hb}, {Topic: core.Topic("h"), Payload: make([]byte, 300)}},
			Events:    []core.Event{ev, {Kind: core.EventLeaderChanged, Group: "h", Term: 1}},
			WakeAt:    -7}, encode: true},
		{name: "output-empty-lists", v: &core.Output{Persist: []core.GroupState{}, Publishes: []core.Message{}, Events: []core.Event{}},
			encode: true, want: &core.Output{}},

		// A group's configuration (the host-driven module's join) and status.
		{name: "config-zero", v: &core.Config{}, encode: true},
		{name: "config-full", v: &cfg, encode: true},
		{name: "status", v: &core.Status{Group: "g", ID: "b", Mode: core.ModeQuorum, Role: core.RoleLeader, Leader: "b",
			Term: 3, Vote: "b", LeaseUntil: 1 << 33, Priority: 9,
			Members:  []core.MemberStatus{{ID: "a", Priority: 1, LastHeard: 5}, {ID: "b", Priority: 9}},
			ConfTerm: 3, ConfIndex: 4, ConfCommitted: true, Voter: true, Elections: 2, Received: 100, Rejected: 7,
			Duplicates: 1, Auth: core.AuthHMAC, Epoch: 2, Unsigned: 1, Forged: 2, Replayed: 3, Value: "v", ValueVersion: 2}, encode: true},
	}
}

// oldState is a GroupState as the encoder wrote it before the fields that
// came later existed.
func oldState(epoch bool) []byte {
	n := uint32(3)
	if epoch {
		n = 4
	}
	b := msgp.AppendMapHeader(nil, n)
	b = msgp.AppendString(msgp.AppendString(b, "group"), "g")
	b = msgp.AppendString(b, "term")
	b = msgp.AppendUint64(b, 5)
	b = msgp.AppendString(msgp.AppendString(b, "vote"), "b")
	if epoch {
		b = msgp.AppendUint64(msgp.AppendString(b, "epoch"), 2)
	}
	return b
}

// TestGoldenEncodings pins the bytes: every encoder writes exactly the
// committed file, and every file, older formats included, decodes to its
// value. A change of the ABI or of the persisted state fails here.
func TestGoldenEncodings(t *testing.T) {
	for _, c := range goldenCases() {
		path := filepath.Join("testdata", "golden", c.name+".msgp")
		var enc []byte
		if c.encode {
			var err error
			if enc, err = marshalGolden(c.v); err != nil {
				t.Fatalf("%s: encode: %v", c.name, err)
			}
		} else {
			enc = c.v.([]byte)
		}
		if *update {
			if err := os.WriteFile(path, enc, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		file, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run with -update to write it)", c.name, err)
		}
		if !bytes.Equal(enc, file) {
			t.Errorf("%s: encoding changed:\n got %x\nwant %x", c.name, enc, file)
		}
		want := c.want
		if want == nil {
			want = c.v
		}
		got := reflect.New(reflect.TypeOf(want).Elem()).Interface()
		if err := unmarshalGolden(file, got); err != nil {
			t.Errorf("%s: decode: %v", c.name, err)
		} else if !reflect.DeepEqual(nilEmpty(got), nilEmpty(want)) {
			t.Errorf("%s: decodes to\n %+v\nwant %+v", c.name, got, want)
		}
		if o, ok := c.v.(*core.Output); ok && c.encode {
			if b, err := EncodeOutput(nil, o); err != nil || !bytes.Equal(b, file) {
				t.Errorf("%s: EncodeOutput wrote %x, %v; want %x", c.name, b, err, file)
			}
		}
		if _, ok := c.v.(*core.Input); ok && c.encode {
			var in core.Input
			if err := DecodeInput(file, &in); err != nil || !reflect.DeepEqual(nilEmpty(&in), nilEmpty(want)) {
				t.Errorf("%s: DecodeInput: %+v, %v; want %+v", c.name, in, err, want)
			}
		}
	}
}

// marshalGolden encodes v with the generated encoder (an Output too:
// EncodeOutput is checked separately).
func marshalGolden(v any) ([]byte, error) {
	switch v := v.(type) {
	case *core.Input:
		return MarshalInput(nil, v)
	case *core.Output:
		return msgpOutput(nil, v)
	case *core.GroupState:
		return MarshalState(nil, v)
	case *core.Config:
		return MarshalConfig(nil, v)
	case *core.Status:
		return MarshalStatus(nil, v)
	}
	return nil, fmt.Errorf("no encoder for %T", v)
}

func unmarshalGolden(b []byte, v any) error {
	var rest []byte
	var err error
	switch v := v.(type) {
	case *core.Input:
		rest, err = UnmarshalInput(b, v)
	case *core.Output:
		rest, err = UnmarshalOutput(b, v)
	case *core.GroupState:
		rest, err = UnmarshalState(b, v)
	case *core.Config:
		rest, err = UnmarshalConfig(b, v)
	case *core.Status:
		rest, err = UnmarshalStatus(b, v)
	default:
		return fmt.Errorf("no decoder for %T", v)
	}
	if err == nil && len(rest) != 0 {
		err = msgp.ErrShortBytes
	}
	return err
}

// nilEmpty returns a deep copy of *v with every empty slice and map nil:
// the decoders give an empty list where the value had nil, and the reverse,
// which encode the same.
func nilEmpty(v any) any {
	c := reflect.New(reflect.TypeOf(v).Elem())
	c.Elem().Set(reflect.ValueOf(v).Elem())
	var walk func(reflect.Value)
	walk = func(x reflect.Value) {
		switch x.Kind() {
		case reflect.Slice, reflect.Map:
			if x.Len() == 0 {
				x.Set(reflect.Zero(x.Type()))
				return
			}
			if x.Kind() == reflect.Slice {
				s := reflect.MakeSlice(x.Type(), x.Len(), x.Len())
				reflect.Copy(s, x)
				x.Set(s)
				for i := 0; i < x.Len(); i++ {
					walk(x.Index(i))
				}
			}
		case reflect.Struct:
			for i := 0; i < x.NumField(); i++ {
				walk(x.Field(i))
			}
		}
	}
	walk(c.Elem())
	return c.Interface()
}
