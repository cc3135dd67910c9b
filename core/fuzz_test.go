package core

import (
	"reflect"
	"testing"
)

// seedPayloads are well-formed and malformed wire messages; the committed
// corpus in testdata/fuzz holds more.
var seedPayloads = []string{
	`{"type":"election","candidate":"b","priority":9,"term":3}`,
	`{"type":"election","group":"g","from":"b","candidate":"b","priority":9,"term":3,"pre":true}`,
	`{"type":"vote","group":"g","from":"b","priority":1,"candidate":"a","term":2,"granted":true}`,
	`{"type":"leader","leader":"b","term":3,"elected_at":"2026-11-30T12:00:00Z"}`,
	`{"type":"heartbeat","leader":"b","term":3,"timestamp":"1796040000"}`,
	`{"type":"heartbeat","group":"g","from":"b","leader":"b","priority":7,"term":9,"seq":4}`,
	`{"type":"ack","group":"g","from":"b","leader":"a","term":2,"seq":1}`,
	`{"type":"resign","group":"g","from":"b","leader":"b","term":2,"to":"c"}`,
	`{"type":"leader","group":"g","from":"b","leader":"b","priority":7,"term":9,"seq":1,"value_ver":1,"value":"10.0.0.2:8080"}`,
	`{"type":"heartbeat","group":"g","from":"b","leader":"b","priority":7,"term":9,"seq":5,"value_ver":3,"value":"say \"hi\" \\ \u00e9"}`,
	`{"type":"heartbeat"`, `[]`, `null`, `{"type":7}`, "",
}

func FuzzDecodeWire(f *testing.F) {
	for _, s := range seedPayloads {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var m wireMsg
		if err := decodeWire(payload, &m); err != nil {
			return
		}
		for _, name := range []string{m.From, m.Candidate, m.Leader, m.To, m.Group} {
			if name != "" && checkName("name", name) != nil {
				t.Fatalf("accepted unchecked name %q", name)
			}
		}
		if m.From == "" {
			t.Fatal("accepted a message without a sender")
		}
		if max(m.Term, m.ConfTerm, m.ConfIndex, m.Seq, m.Epoch, m.Ctr) > MaxTerm || m.Hold > maxHold {
			t.Fatalf("accepted a count beyond its bound: %+v", m)
		}
	})
}

// FuzzStep delivers arbitrary bytes to a member of a settled group: nothing
// panics, and a payload the core rejects changes neither its state nor its
// persisted state, and publishes nothing.
func FuzzStep(f *testing.F) {
	for _, s := range seedPayloads {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, payload []byte, bully bool) {
		mode := ModeQuorum
		if bully {
			mode = ModeBully
		}
		n := newTestNet(t, mode, "a", "b", "c")
		n.quiet = true
		n.advance(3000, 50)
		e := n.nodes["a"]
		before, _ := e.Status("g")
		var out Output
		e.Step(&Input{Now: n.now, Inbound: []Message{{Topic: Topic("g"), Payload: payload}}}, &out)
		after, _ := e.Status("g")
		rejected := len(out.Events) > 0 && out.Events[len(out.Events)-1].Kind == EventRejected
		if !rejected {
			return
		}
		if len(out.Publishes) > 0 || len(out.Persist) > 0 || len(out.Events) != 1 {
			t.Fatalf("rejected payload %q still produced %+v", payload, out)
		}
		after.Rejected--
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("rejected payload %q changed state:\n%+v\n%+v", payload, before, after)
		}
	})
}
