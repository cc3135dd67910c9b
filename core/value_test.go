package core

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// valuesNet is a settled 3-node net of mode in which every node has a value
// of its own ("addr-<id>"); it returns the leader.
func valuesNet(t *testing.T, mode Mode, am AuthMode) (*testNet, string) {
	t.Helper()
	n := newTestNet(t, mode, "a", "b", "c")
	n.values = map[string]string{"a": "addr-a", "b": "addr-b", "c": "addr-c"}
	if am != "" {
		n = withTranscriptAuth(n, am)
	} else {
		n = restartAll(n)
	}
	return n, electLeader(t, n)
}

// requireValues checks that every live node reports want as its leader's
// value, with version ver, in one term.
func requireValues(t *testing.T, n *testNet, want string, ver uint64) {
	t.Helper()
	var term uint64
	for _, id := range n.live() {
		s := n.status(id)
		if s.Value != want || s.ValueVersion != ver || term != 0 && s.Term != term {
			t.Fatalf("%s: value %q ver %d term %d (leader %s), want %q ver %d in one term", id, s.Value, s.ValueVersion, s.Term, s.Leader, want, ver)
		}
		term = s.Term
	}
}

func TestValueFollowsLeadership(t *testing.T) {
	for _, mode := range []Mode{ModeQuorum, ModeBully} {
		t.Run(string(mode), func(t *testing.T) {
			n, leader := valuesNet(t, mode, "")
			requireValues(t, n, "addr-"+leader, 1)
			n.crash(leader)
			n.advance(6000, 10)
			ls := n.leaders()
			if len(ls) != 1 {
				t.Fatalf("leaders %v", ls)
			}
			next, _, _ := strings.Cut(ls[0], "@")
			requireValues(t, n, "addr-"+next, 1)
		})
	}
}

// A proclaim reaches every follower in the same term, and with
// authentication on, a value altered in flight is refused as forged.
func TestProclaim(t *testing.T) {
	for _, am := range []AuthMode{"", AuthHMAC, AuthEd25519} {
		for _, mode := range []Mode{ModeQuorum, ModeBully} {
			t.Run(string(mode)+"/"+string(am), func(t *testing.T) {
				n, leader := valuesNet(t, mode, am)
				term := n.status(leader).Term
				evs := command(n, leader, Command{Kind: CmdProclaim, Value: `new "addr" \ é`})
				if len(evs) != 1 || evs[0].Kind != EventValue || evs[0].Value != `new "addr" \ é` || evs[0].Term != term {
					t.Fatalf("proclaim events %+v", evs)
				}
				var hb []byte
				for _, q := range n.queue {
					hb = q.msg.Payload
				}
				if am != "" { // altered in flight, before the real one arrives
					forged := bytes.Replace(hb, []byte(`new \"addr\"`), []byte(`bad \"addr\"`), 1)
					if bytes.Equal(forged, hb) {
						t.Fatalf("no value in %s", hb)
					}
					for _, id := range n.others(leader) {
						deliverRejected(t, n, id, forged, reasonForged)
					}
				}
				n.deliverAll()
				requireValues(t, n, `new "addr" \ é`, 2)
				if s := n.status(leader); s.Term != term || s.Role != RoleLeader {
					t.Fatalf("proclaim moved leadership: %+v", s)
				}
			})
		}
	}
}

// A proclaim that is refused changes nothing and sends nothing.
func TestProclaimRefusals(t *testing.T) {
	n, leader := valuesNet(t, ModeQuorum, "")
	follower := n.others(leader)[0]
	for _, c := range []struct{ at, value, want string }{
		{follower, "x", "proclaim: not the leader"},
		{leader, strings.Repeat("x", MaxValueLen+1), "proclaim: value: 1025 bytes, at most 1024"},
		{leader, "a\nb", "proclaim: value: byte 1: control character"},
		{leader, "a\x00", "proclaim: value: byte 1: control character"},
		{leader, "a\xff", "proclaim: value: byte 1: invalid UTF-8"},
	} {
		before := n.status(c.at)
		var out Output
		n.nodes[c.at].Step(&Input{Now: n.now, Commands: []Command{{Kind: CmdProclaim, Group: "g", Value: c.value}}}, &out)
		if len(out.Events) != 1 || out.Events[0].Kind != EventRejected || !strings.HasPrefix(out.Events[0].Reason, c.want) {
			t.Errorf("proclaim %q at %s: events %+v, want rejection %q", c.value, c.at, out.Events, c.want)
		}
		if len(out.Publishes) > 0 {
			t.Errorf("proclaim %q at %s published %d", c.value, c.at, len(out.Publishes))
		}
		if after := n.status(c.at); after.Value != before.Value || after.ValueVersion != before.ValueVersion {
			t.Errorf("proclaim %q at %s changed the value to %q", c.value, c.at, after.Value)
		}
	}
	// The largest value is accepted.
	if evs := command(n, leader, Command{Kind: CmdProclaim, Value: strings.Repeat("é", MaxValueLen/2)}); len(evs) != 1 || evs[0].Kind != EventValue {
		t.Fatalf("largest value: %+v", evs)
	}
}

func TestValueConfigValidation(t *testing.T) {
	good := Config{ID: "a", Group: "g", Members: []string{"a"}, Value: strings.Repeat("v", MaxValueLen)}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		value  string
		offset int
		reason string
	}{
		{strings.Repeat("v", MaxValueLen+1), -1, "too long"},
		{"tab\there", 3, "control character"},
		{"del\x7f", 3, "control character"},
		{"c1\u0085", 2, "control character"},
		{"bad\xc3", 3, "invalid UTF-8"},
	} {
		ve, ok := CheckValue(c.value).(*ValueError)
		if !ok || ve.Offset != c.offset || ve.Reason != c.reason || ve.Bytes != len(c.value) {
			t.Errorf("value %q: %+v, want offset %d, %s", c.value, ve, c.offset, c.reason)
		}
		cfg := good
		cfg.Value = c.value
		var ce *ConfigError
		if err := cfg.Validate(); !errors.As(err, &ce) || ce.Field != "value" || err.Error() != ve.Error() {
			t.Errorf("config value %q: %v, want a ConfigError of value saying %q", c.value, err, ve)
		} else if c.offset < 0 && (ce.Rule != "value-length" || ce.Max != MaxValueLen) || c.offset >= 0 && (ce.Rule != "value-byte" || ce.Min != int64(c.offset)) {
			t.Errorf("config value %q: %+v", c.value, ce)
		}
	}
	if err := CheckValue("\ufffd is a character"); err != nil {
		t.Errorf("U+FFFD refused: %v", err)
	}
}

func TestValueWireChecks(t *testing.T) {
	for payload, want := range map[string]string{
		`{"type":"vote","from":"b","candidate":"a","term":1,"value_ver":1,"value":"x"}`:                                            "malformed: a value on a vote message",
		`{"type":"heartbeat","from":"b","leader":"b","term":1,"value":"x"}`:                                                        "malformed: a value without value_ver",
		`{"type":"heartbeat","from":"b","leader":"b","term":1,"value_ver":9007199254740992}`:                                       "malformed: value_ver 9007199254740992 exceeds",
		`{"type":"heartbeat","from":"b","leader":"b","term":1,"value_ver":1,"value":"a\u0000"}`:                                    "malformed: value: byte 1: control character",
		`{"type":"heartbeat","from":"b","leader":"b","term":1,"value_ver":1,"value":"` + strings.Repeat("x", MaxValueLen+1) + `"}`: "malformed: value: 1025 bytes",
	} {
		var m wireMsg
		if err := decodeWire([]byte(payload), &m); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %q", payload, err, want)
		}
	}
	var m wireMsg
	ok := `{"type":"leader","from":"b","leader":"b","term":1,"value_ver":1,"value":"\"q\" \\ \u00e9"}`
	if err := decodeWire([]byte(ok), &m); err != nil || m.Value != `"q" \ é` || m.ValueVer != 1 {
		t.Fatalf("%v %+v", err, m)
	}
}

// The bound on values keeps every heartbeat, at its longest (names of
// MaxIDLen, a value of MaxValueLen quotes that each take two bytes, an
// ed25519 signature), inside MaxPayload: a follower hears it.
func TestValueBoundFitsPayload(t *testing.T) {
	id := func(c string) string { return strings.Repeat(c, MaxIDLen) }
	ids := []string{id("a"), id("b")}
	group := id("g")
	value := strings.Repeat(`"`, MaxValueLen)
	engines := map[string]*Engine{}
	var queue []Message
	step := func(who string, in *Input) []Event {
		var out Output
		engines[who].Step(in, &out)
		queue = append(queue, out.Publishes...)
		for _, p := range out.Publishes {
			if len(p.Payload) > MaxPayload {
				t.Fatalf("%d-byte payload: %s", len(p.Payload), p.Payload)
			}
		}
		return out.Events
	}
	for i, who := range ids {
		c := Config{ID: who, Group: group, Members: ids, Priority: uint32(2 - i), Value: value, Seed: uint64(i + 1)}
		authConfig(&c, AuthEd25519, ids)
		engines[who] = NewEngine()
		step(who, &Input{Join: []GroupSpec{{Config: c}}})
	}
	var longest int
	var learned bool
	for now := int64(0); now < 5000 && !learned; now += 10 {
		for _, who := range ids {
			step(who, &Input{Now: now})
		}
		for len(queue) > 0 {
			msgs := queue
			queue = nil
			for _, who := range ids {
				for _, m := range msgs {
					longest = max(longest, len(m.Payload))
					for _, ev := range step(who, &Input{Now: now, Inbound: []Message{m}}) {
						if ev.Kind == EventValue && ev.Leader != who && ev.Value == value {
							learned = true
						}
						if ev.Kind == EventRejected && !strings.Contains(ev.Reason, "replay") {
							t.Fatalf("%s… rejected: %s", who[:4], ev.Reason)
						}
					}
				}
			}
		}
	}
	if !learned {
		t.Fatal("the follower never took the leader's value")
	}
	t.Logf("longest heartbeat: %d bytes of %d", longest, MaxPayload)
}
