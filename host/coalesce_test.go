package host

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cockroachdb/datadriven"

	"github.com/electcore/electcore/core"
)

// swarm is a deterministic model of agents that coalesce: each node steps
// a native core every 10 ms of a shared fake clock with what the bus
// delivered since its last step, turns its output into bus messages with
// its coalescer (an old node publishes the core's messages as they are and
// reads no peer topic), and the bus delivers each message to every node
// subscribed to its topic (itself included, as NATS echoes) at the next
// step. It records every payload each group's core was handed, step by
// step, so that runs with and without coalescing can be compared.
type swarm struct {
	now     int64
	nodes   []*snode
	queue   []busMsg
	drops   []dropRule
	trace   *strings.Builder
	noCoal  bool // no node coalesces (the reference run)
	hbMs    int64
	etMs    int64
	members map[string][]string // group → members
	groups  []string            // in order of declaration
	sentN   sentCounts
}

type snode struct {
	id    string
	old   bool // understands no envelope
	eng   *core.Engine
	coal  *coalescer
	subs  map[string]bool // topics
	in    []core.Message
	out   core.Output
	wake  int64
	seen  map[string][]string // group → "t=… payload" handed to its core
	state map[string]core.GroupState
}

type busMsg struct {
	from  string
	topic string
	p     []byte
}

type dropRule struct {
	from     string
	envelope bool
	n        int
}

func newSwarm(ids, old []string, groups []string, members map[string][]string, hb, et int64, noCoal bool) *swarm {
	s := &swarm{hbMs: hb, etMs: et, members: members, groups: groups, noCoal: noCoal, sentN: sentCounts{}}
	for _, id := range ids {
		n := &snode{id: id, old: slices.Contains(old, id), eng: core.NewEngine(), coal: newCoalescer(0),
			subs: map[string]bool{}, seen: map[string][]string{}, state: map[string]core.GroupState{}}
		var in core.Input
		for _, g := range groups {
			if !slices.Contains(members[g], id) {
				continue
			}
			in.Join = append(in.Join, core.GroupSpec{Config: core.Config{ID: id, Group: g, Members: members[g], HeartbeatMs: hb, ElectionTimeoutMs: et}})
			n.subs[core.Topic(g)] = true
			cg := n.coal.join(g, id, members[g])
			if !n.old && !noCoal {
				n.subs[cg.topic] = true
				n.coal.ready(cg.topic, id, 0)
			}
		}
		n.eng.Step(&in, &n.out)
		s.nodes = append(s.nodes, n)
		s.publish(n)
	}
	return s
}

// publish puts what n's last step produced on the bus.
func (s *swarm) publish(n *snode) {
	msgs := n.out.Publishes
	if !n.old && !s.noCoal {
		msgs, _ = n.coal.plan(s.now, slices.Clone(n.out.Publishes))
	}
	c := s.sentN[n.id]
	for _, m := range msgs {
		s.queue = append(s.queue, busMsg{from: n.id, topic: m.Topic, p: bytes.Clone(m.Payload)})
		if strings.HasPrefix(m.Topic, PeersTopicPrefix) {
			env, _ := decodeEnvelope(m.Payload)
			c[1]++
			c[2] += len(env.Entries)
		} else {
			c[0]++
		}
	}
	s.sentN[n.id] = c
	for _, p := range n.out.Persist {
		n.state[p.Group] = p
	}
	n.wake = n.out.WakeAt
}

// deliver hands the queued messages to their subscribers (lost ones are
// traced as such).
func (s *swarm) deliver() {
	q := s.queue
	s.queue = nil
	for _, m := range q {
		env := strings.HasPrefix(m.topic, PeersTopicPrefix)
		if s.trace != nil {
			fmt.Fprintf(s.trace, "t=%d %s> %s\n", s.now, m.from, describeBusMsg(m))
		}
		if s.dropped(m.from, env) {
			if s.trace != nil {
				fmt.Fprintf(s.trace, "  (lost)\n")
			}
			continue
		}
		for _, n := range s.nodes {
			if !n.subs[m.topic] {
				continue
			}
			if !env {
				n.in = append(n.in, core.Message{Topic: m.topic, Payload: m.p})
				continue
			}
			msgs, _, refused, err := n.coal.receive(s.now, m.topic, m.p, nil)
			if err != nil || refused > 0 {
				panic(fmt.Sprintf("%s: envelope refused: %v (%d)", n.id, err, refused))
			}
			for _, m := range msgs {
				n.in = append(n.in, m.Message)
			}
		}
	}
}

func (s *swarm) dropped(from string, env bool) bool {
	for i := range s.drops {
		r := &s.drops[i]
		if r.n > 0 && r.from == from && r.envelope == env {
			r.n--
			return true
		}
	}
	return false
}

// describeBusMsg is one line per bus message: a bare message's type and
// group, or an envelope's sender and each entry's group and type.
func describeBusMsg(m busMsg) string {
	if !strings.HasPrefix(m.topic, PeersTopicPrefix) {
		return fmt.Sprintf("%s %s", m.topic, wireType(m.p))
	}
	env, err := decodeEnvelope(m.p)
	if err != nil {
		return "bad envelope: " + err.Error()
	}
	var parts []string
	for _, e := range env.Entries {
		parts = append(parts, e.Group+":"+wireType(e.Payload))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("envelope from %s: hello", env.From)
	}
	return fmt.Sprintf("envelope from %s: %s", env.From, strings.Join(parts, " "))
}

func wireType(p []byte) string {
	t, _, _ := strings.Cut(strings.TrimPrefix(string(p), `{"type":"`), `"`)
	return t
}

// run advances the clock by ms in 10 ms steps; each step delivers what
// was published in the one before, then steps every node.
func (s *swarm) run(ms int64) {
	for end := s.now + ms; s.now < end; {
		s.now += 10
		s.deliver()
		for _, n := range s.nodes {
			if len(n.in) == 0 && (n.wake == 0 || n.wake > s.now) {
				continue
			}
			in := core.Input{Now: s.now, Inbound: n.in}
			n.in = nil
			for _, m := range in.Inbound {
				g := strings.TrimPrefix(m.Topic, "election:")
				n.seen[g] = append(n.seen[g], fmt.Sprintf("t=%d %s", s.now, m.Payload))
			}
			n.out.Reset()
			n.eng.Step(&in, &n.out)
			s.publish(n)
		}
	}
}

func (s *swarm) status() string {
	var b strings.Builder
	for _, n := range s.nodes {
		for _, g := range s.groups {
			st, ok := n.eng.Status(g)
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "%s %s: %s term=%d leader=%s\n", n.id, g, st.Role, st.Term, st.Leader)
		}
	}
	return b.String()
}

// TestCoalesceTranscripts replays testdata/coalesce/*.txt. Rewrite after
// an intended change: go test ./host -run CoalesceTranscripts -rewrite
//
//	swarm ids=(a,b,c) [old=(c)] [hb=MS et=MS]   then one line per group: NAME MEMBER,MEMBER,...
//	run ms=N       advance; prints how many bus messages each node sent, bare and in envelopes
//	trace ms=N     advance; prints every bus message
//	drop from=X [envelope] [n=N]   lose X's next N (default 1) envelopes (or bare messages)
//	status         each node's role, term and leader in each group
func TestCoalesceTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata/coalesce", func(t *testing.T, path string) {
		var s *swarm
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "swarm":
				var ids, old []string
				d.ScanArgs(t, "ids", &ids)
				d.MaybeScanArgs(t, "old", &old)
				hb, et := int64(50), int64(200)
				d.MaybeScanArgs(t, "hb", &hb)
				d.MaybeScanArgs(t, "et", &et)
				members := map[string][]string{}
				var groups []string
				for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
					name, ms, _ := strings.Cut(line, " ")
					groups = append(groups, name)
					members[name] = strings.Split(ms, ",")
				}
				s = newSwarm(ids, old, groups, members, hb, et, false)
				return "ok"
			case "run", "trace":
				var ms int64
				d.ScanArgs(t, "ms", &ms)
				before := counts(s)
				var tr strings.Builder
				if d.Cmd == "trace" {
					s.trace = &tr
				}
				s.run(ms)
				s.trace = nil
				if d.Cmd == "trace" {
					return tr.String()
				}
				return diffCounts(before, counts(s))
			case "drop":
				r := dropRule{n: 1}
				d.ScanArgs(t, "from", &r.from)
				r.envelope = d.HasArg("envelope")
				d.MaybeScanArgs(t, "n", &r.n)
				s.drops = append(s.drops, r)
				return "ok"
			case "status":
				return s.status()
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

// sentCounts: per node, bus messages sent bare and as envelopes, and the
// payloads the envelopes carried. The swarm counts as it publishes.
type sentCounts map[string][3]int

func counts(s *swarm) sentCounts { return maps.Clone(s.sentN) }

func diffCounts(before, after sentCounts) string {
	var b strings.Builder
	var ids []string
	for id := range after {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		a, o := after[id], before[id]
		fmt.Fprintf(&b, "%s: %d bare, %d envelopes carrying %d payloads\n", id, a[0]-o[0], a[1]-o[1], a[2]-o[2])
	}
	return b.String()
}

// Each group's core gets exactly the payloads, in the same steps, with
// coalescing as without: the envelopes change only how they travel. Three
// agents share four groups, two more groups have two of them each, and one
// of them is lost for a while (its messages with it) to force elections.
func TestCoalescingChangesNoGroupsInputs(t *testing.T) {
	members := map[string][]string{
		"g0": {"a", "b", "c"}, "g1": {"a", "b", "c"}, "g2": {"c", "b", "a"}, "g3": {"a", "b", "c"},
		"h0": {"a", "b"}, "h1": {"b", "c"},
	}
	groups := []string{"g0", "g1", "g2", "g3", "h0", "h1"}
	var runs [2]*swarm
	for i, noCoal := range []bool{true, false} {
		s := newSwarm([]string{"a", "b", "c"}, nil, groups, members, 50, 200, noCoal)
		s.run(2000)
		s.drops = []dropRule{{from: "c", envelope: true, n: 1000}, {from: "c", n: 1000}} // all of c is lost for a while
		s.run(1000)
		s.drops = nil
		s.run(2000)
		runs[i] = s
	}
	coalesced := 0
	for _, c := range runs[1].sentN {
		coalesced += c[2]
	}
	if coalesced == 0 {
		t.Fatal("nothing was coalesced: the comparison proves nothing")
	}
	for i, n := range runs[0].nodes {
		for _, g := range groups {
			want, got := n.seen[g], runs[1].nodes[i].seen[g]
			if !slices.Equal(want, got) {
				t.Fatalf("%s's core in %s got different inputs with coalescing:\n%s\nwithout:\n%s", n.id, g, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	}
	if st := runs[1].status(); !strings.Contains(st, "term=2") {
		t.Fatalf("no group elected again while c was cut off:\n%s", st)
	}
	if a, b := runs[0].status(), runs[1].status(); a != b {
		t.Fatalf("status with coalescing:\n%s\nwithout:\n%s", b, a)
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	entries := []envEntry{{"g1", []byte(`{"type":"ack","group":"g1","from":"a"}`)}, {"g2", []byte{}}}
	p := appendEnvelope(nil, "a", entries)
	env, err := decodeEnvelope(p)
	if err != nil || env.From != "a" || len(env.Entries) != 2 || env.Entries[0].Group != "g1" || !bytes.Equal(env.Entries[0].Payload, entries[0].Payload) || env.Entries[1].Group != "g2" {
		t.Fatalf("decode(encode) = %+v, %v", env, err)
	}
	// Text, as pilot carries only UTF-8 without NUL.
	if !utf8.Valid(p) || bytes.IndexByte(p, 0) >= 0 {
		t.Fatalf("envelope %q is not text", p)
	}
	hello, err := decodeEnvelope(appendEnvelope(nil, "b", nil))
	if err != nil || hello.From != "b" || len(hello.Entries) != 0 {
		t.Fatalf("hello: %+v, %v", hello, err)
	}
	long := strings.Repeat("x", core.MaxIDLen+1)
	for name, bad := range map[string][]byte{
		"empty":          nil,
		"magic":          append([]byte("ECENV0"), p[6:]...),
		"truncated":      p[:len(p)-1],
		"trailing":       append(slices.Clone(p), 0),
		"no sender":      appendEnvelope(nil, "", nil),
		"long sender":    appendEnvelope(nil, long, nil),
		"long group":     appendEnvelope(nil, "a", []envEntry{{long, nil}}),
		"empty group":    appendEnvelope(nil, "a", []envEntry{{"", nil}}),
		"long payload":   appendEnvelope(nil, "a", []envEntry{{"g", make([]byte, core.MaxPayload+1)}}),
		"count too high": append([]byte(envelopeMagic+"\x01a"), 0xff, 0xff, 0xff, 0x7f),
		"count beyond":   append([]byte(envelopeMagic+"\x01a"), 0x02, 0x01, 'g', 0x00),
		"leading zero":   []byte(envelopeMagic + " a 01\ng 0\n\n"),
		"signed":         []byte(envelopeMagic + " a +1\ng 0\n\n"),
		"no newline":     []byte(envelopeMagic + " a 1\ng 2\n{}"),
		"space in name":  []byte(envelopeMagic + " a 1\ng h 0\n\n"),
		"short payload":  []byte(envelopeMagic + " a 1\ng 5\n{}\n"),
	} {
		if env, err := decodeEnvelope(bad); err == nil {
			t.Errorf("%s: decoded %+v", name, env)
		}
	}
}

// An envelope carries only what its sender could have published on each
// group's topic itself: a payload in another member's name is refused, a
// payload for a group not joined is ignored.
func TestEnvelopeCarriesOnlyItsSendersPayloads(t *testing.T) {
	c := newCoalescer(0)
	c.join("g", "b", []string{"a", "b"})
	p := appendEnvelope(nil, "a", []envEntry{
		{"g", []byte(`{"type":"ack","group":"g","from":"a","leader":"b","term":1}`)},
		{"g", []byte(`{"type":"ack","group":"g","from":"c","leader":"b","term":1}`)},
		{"other", []byte(`{"type":"ack","group":"other","from":"a","leader":"b","term":1}`)},
	})
	msgs, from, refused, err := c.receive(5, "election-peers:x", p, nil)
	if err != nil || from != "a" || refused != 1 || len(msgs) != 1 || msgs[0].Topic != core.Topic("g") || senderOf(msgs[0].Payload) != "a" {
		t.Fatalf("receive = %+v, refused %d, %v", msgs, refused, err)
	}
}

// A peer is coalesced towards only while it was heard on the peer topic
// within capableMs, and a group only while its member set is the one it
// joined with.
func TestCoalesceOnlyTowardsPeersHeard(t *testing.T) {
	c := newCoalescer(0)
	g := c.join("g", "a", []string{"b", "a"})
	c.ready(g.topic, "a", 0)
	hb := []core.Message{{Topic: core.Topic("g"), Payload: []byte(`{"type":"heartbeat","group":"g","from":"a"}`)}}
	if _, n := c.plan(10, hb); n != 0 {
		t.Fatal("coalesced before b was heard")
	}
	if _, _, _, err := c.receive(20, g.topic, appendEnvelope(nil, "b", nil), nil); err != nil {
		t.Fatal(err)
	}
	if _, n := c.plan(30, hb); n != 1 {
		t.Fatal("not coalesced once b was heard")
	}
	c.config("g", []string{"a", "b", "c"})
	if _, n := c.plan(40, hb); n != 0 {
		t.Fatal("coalesced after the member set changed")
	}
	c.config("g", []string{"b", "a"})
	if _, n := c.plan(50, hb); n != 1 {
		t.Fatal("not coalesced once the member set was the joined one again")
	}
	if _, n := c.plan(20+capableMs+1, hb); n != 0 {
		t.Fatal("coalesced towards b after it went quiet")
	}
	few := newCoalescer(2) // an agent in fewer groups than it coalesces for
	fg := few.join("g", "a", []string{"b", "a"})
	few.ready(fg.topic, "a", 0)
	few.receive(10, fg.topic, appendEnvelope(nil, "b", nil), nil)
	if out, n := few.plan(20, hb); n != 0 || len(out) != len(hb) {
		t.Fatalf("in one group, with minGroups 2: %d coalesced, %d messages out for %d (a hello?)", n, len(out), len(hb))
	}
	if at := few.nextHello(); at != 0 {
		t.Fatalf("in one group, with minGroups 2: a hello planned at %d", at)
	}
	mixed := append(slices.Clone(hb), core.Message{Topic: core.Topic("g"), Payload: []byte(`{"type":"resign","group":"g","from":"a"}`)})
	c.receive(100, g.topic, appendEnvelope(nil, "b", nil), nil)
	if out, n := c.plan(110, mixed); n != 0 || len(out) != 2 || out[0].Topic != core.Topic("g") {
		t.Fatalf("a step with a resign: %d coalesced, %d out: its group's heartbeat went ahead of it", n, len(out))
	}
}

// Election traffic travels in envelopes, and so does a configuration
// listing exactly the members the group joined with (the peer set that
// reads the envelope); a configuration of another member set may be for
// someone outside that set, so it stays on the group's topic, and with it
// the rest of its group's step.
func TestCoalesceElectionsAndOnlyTheJoinedConfig(t *testing.T) {
	c := newCoalescer(0)
	g := c.join("g", "a", []string{"c", "b", "a"})
	c.ready(g.topic, "a", 0)
	c.receive(10, g.topic, appendEnvelope(nil, "b", nil), nil)
	c.receive(10, g.topic, appendEnvelope(nil, "c", nil), nil)
	msg := func(p string) core.Message { return core.Message{Topic: core.Topic("g"), Payload: []byte(p)} }
	election := []core.Message{
		msg(`{"type":"election","group":"g","from":"a","candidate":"a","term":2,"pre":true}`),
		msg(`{"type":"vote","group":"g","from":"a","candidate":"b","term":2,"granted":true}`),
		msg(`{"type":"config","group":"g","from":"a","conf_term":1,"conf_index":1,"members":["a","b","c"]}`),
		msg(`{"type":"config","group":"g","from":"a","conf_term":1,"conf_index":1,"members":["a","b","c"],"keys":["x","y","z"]}`),
		msg(`{"type":"leader","group":"g","from":"a","leader":"a","term":2}`),
	}
	if out, n := c.plan(20, election); n != len(election) || len(out) != 1 {
		t.Fatalf("election traffic: %d of %d coalesced, %d messages out", n, len(election), len(out))
	}
	for _, other := range []string{
		`{"type":"config","group":"g","from":"a","conf_term":1,"conf_index":2,"members":["a","b","c","d"]}`,
		`{"type":"config","group":"g","from":"a","conf_term":1,"conf_index":2,"members":["a","b"]}`,
		`{"type":"resign","group":"g","from":"a","leader":"a","term":2,"to":"b"}`,
		`{"type":"change","group":"g","from":"a","leader":"b","term":2,"op":"add","member":"d"}`,
	} {
		step := []core.Message{election[4], msg(other)}
		if out, n := c.plan(30, step); n != 0 || len(out) != 2 || out[0].Topic != core.Topic("g") {
			t.Fatalf("a step with %s: %d coalesced, %d out", other, n, len(out))
		}
	}
}

// The decoder never panics and never accepts what it would not write.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(appendEnvelope(nil, "a", []envEntry{{"g", []byte(`{"type":"ack"}`)}}))
	f.Add(appendEnvelope(nil, "b", nil))
	f.Add([]byte(envelopeMagic + "\x01a\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, p []byte) {
		env, err := decodeEnvelope(p)
		if err != nil {
			return
		}
		if again := appendEnvelope(nil, env.From, env.Entries); !bytes.Equal(again, p) {
			t.Fatalf("decoded %x, which encodes as %x", p, again)
		}
	})
}
