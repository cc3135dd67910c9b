package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/wasmhost"
	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/mem"
	"github.com/electcore/electcore/transport/transporttest"
)

// gatedCore is the native core that, while closed, holds every Step until
// opened, and records what each Step received.
type gatedCore struct {
	nativeCore
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	entered chan struct{} // a Step is waiting at the gate
	steps   [][]core.Message
}

func (g *gatedCore) Step(in *core.Input, out *core.Output) error {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		g.entered <- struct{}{}
		<-gate
	}
	g.mu.Lock()
	g.steps = append(g.steps, append([]core.Message(nil), in.Inbound...))
	g.mu.Unlock()
	return g.nativeCore.Step(in, out)
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFloodKeepsMembersMessages: while the core is busy, a flood of messages
// from outside the group fills and drops only the shared queue — counted
// and logged — and the members' messages wait in their own queues, taken
// first by the next step; a flood in one member's name drops only that
// member's messages. Before, the members' heartbeats were dropped with the
// flood, silently.
func TestFloodKeepsMembersMessages(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	gc := &gatedCore{nativeCore: nativeCore{e: core.NewEngine()}, entered: make(chan struct{})}
	logs := &syncBuffer{}
	ag := startAgent(AgentConfig{Transport: bus.Transport("a"), MaxPending: 100,
		Logger: slog.New(slog.NewJSONHandler(logs, nil))}, gc)
	defer ag.Close(ctx)
	cfg := core.Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}, HeartbeatMs: 600_000, ElectionTimeoutMs: 1_800_000}
	if _, err := ag.Join(ctx, cfg, Callbacks{}); err != nil {
		t.Fatal(err)
	}
	// Hold the loop in a step while the flood arrives.
	gate := make(chan struct{})
	gc.mu.Lock()
	gc.gate = gate
	gc.mu.Unlock()
	ag.wake()
	<-gc.entered
	gc.mu.Lock()
	gc.gate = nil
	gc.mu.Unlock()
	topic := core.Topic("g")
	msg := func(from string, seq int) transport.Message {
		return transport.Message{Topic: topic, Payload: []byte(fmt.Sprintf(
			`{"type":"heartbeat","group":"g","from":"%s","leader":"%s","priority":1,"term":1,"seq":%d}`, from, from, seq))}
	}
	for i := range 1000 {
		ag.deliver(msg("mallory", i))
		if i%200 == 100 {
			ag.deliver(msg("b", i))
		}
	}
	// b flooded in its own name (anyone can, with auth off), and one of c.
	for i := range 300 {
		ag.deliver(msg("b", 1000+i))
	}
	ag.deliver(msg("c", 1))
	st := ag.Stats()
	if st.Dropped != 900+(5+300-memberLane) || st.DroppedFromMembers != 5+300-memberLane {
		t.Fatalf("dropped %d (from members %d), want %d (%d)", st.Dropped, st.DroppedFromMembers, 900+(5+300-memberLane), 5+300-memberLane)
	}
	close(gate)
	// The next step takes the members' queues first, one of each in turn.
	var first []core.Message
	transporttest.WaitForWithin(t, time.Minute, "a step to receive the queued messages", func() bool {
		gc.mu.Lock()
		defer gc.mu.Unlock()
		for _, s := range gc.steps {
			if len(s) > 0 {
				first = s
				return true
			}
		}
		return false
	})
	var senders []string
	for _, m := range first[:4] {
		senders = append(senders, senderOf(m.Payload))
	}
	if got := strings.Join(senders, ","); got != "b,c,b,b" {
		t.Fatalf("the first step's first senders %s, want b,c,b,b", got)
	}
	if !strings.Contains(string(first[0].Payload), `"seq":100}`) {
		t.Fatalf("b's first message is not its oldest: %s", first[0].Payload)
	}
	// Logged once, with the counts.
	transporttest.WaitForWithin(t, time.Minute, "a log line about the drops", func() bool {
		return strings.Contains(logs.String(), "received messages dropped")
	})
	if n := strings.Count(logs.String(), "received messages dropped"); n != 1 || !strings.Contains(logs.String(), fmt.Sprintf(`"dropped":%d,"from_members":%d`, st.Dropped, st.DroppedFromMembers)) {
		t.Fatalf("%d drop lines:\n%s", n, logs.String())
	}
}

func TestSenderOf(t *testing.T) {
	for p, want := range map[string]string{
		`{"type":"ack","from":"b","term":1}`:          "b",
		`{"type":"ack","xfrom":"b","from":"c"}`:       "c",
		`{"type":"ack","leader":"\"from\":\"b\""}`:    "",
		`{"type":"ack","from":"b\u0031"}`:             "",
		`{"type":"ack","from":""}`:                    "",
		`{"type":"ack","from":"b`:                     "",
		`{"type":"ack","from" : "b"}`:                 "",
		`{"from":"` + strings.Repeat("x", 300) + `"}`: "",
	} {
		if got := senderOf([]byte(p)); got != want {
			t.Errorf("senderOf(%s) = %q, want %q", p, got, want)
		}
	}
}

// TestInboxSharedQueueOrder: the shared queue gives its messages back in
// arrival order, stepMessages at a time, across its compactions, and
// refuses more than maxShared waiting.
func TestInboxSharedQueueOrder(t *testing.T) {
	var in inbox
	next, want := 0, 0
	add := func(k int) {
		for range k {
			if ok, member := in.add(core.Message{Topic: "t", Payload: []byte(fmt.Sprint(next))}, 1000); !ok || member {
				t.Fatalf("message %d: queued %v member %v", next, ok, member)
			}
			next++
		}
	}
	take := func() {
		got := in.take(core.MaxBatchBytes / 2)
		if len(got) != min(stepMessages, next-want) {
			t.Fatalf("took %d, want %d", len(got), min(stepMessages, next-want))
		}
		for _, m := range got {
			if string(m.Payload) != fmt.Sprint(want) {
				t.Fatalf("took %s, want %d", m.Payload, want)
			}
			want++
		}
	}
	add(1000)
	if ok, _ := in.add(core.Message{Topic: "t", Payload: []byte("x")}, 1000); ok {
		t.Fatal("a 1001st message was queued")
	}
	for range 3 {
		take()
		add(100)
	}
	for in.len() > 0 {
		take()
	}
	if want != next {
		t.Fatalf("took %d of %d", want, next)
	}
}

// trappingCore traps (restored, as wasmhost reports it) at its first step
// that carries received messages: that batch is lost.
type trappingCore struct {
	nativeCore
	mu      sync.Mutex
	trapped bool
}

func (c *trappingCore) Step(in *core.Input, out *core.Output) error {
	c.mu.Lock()
	trap := !c.trapped && len(in.Inbound) > 0
	c.trapped = c.trapped || trap
	c.mu.Unlock()
	if trap {
		return &wasmhost.TrapError{Op: "step", Err: errors.New("injected"), Restored: true}
	}
	return c.nativeCore.Step(in, out)
}

// TestTrapLostBatchCounted: the received messages of a step lost to a trap
// count as dropped (a member's as from members too), so that every received
// message is refused, dropped or handled in Stats. Before, they vanished
// uncounted (an e2e flood under load came up ~60,000 short).
func TestTrapLostBatchCounted(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	tc := &trappingCore{nativeCore: nativeCore{e: core.NewEngine()}}
	ag := startAgent(AgentConfig{Transport: bus.Transport("a"), Logger: discardLogger()}, tc)
	defer ag.Close(ctx)
	cfg := core.Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}, HeartbeatMs: 600_000, ElectionTimeoutMs: 1_800_000}
	if _, err := ag.Join(ctx, cfg, Callbacks{}); err != nil {
		t.Fatal(err)
	}
	topic := core.Topic("g")
	ag.mu.Lock() // queue all four before the loop takes any
	for i, from := range []string{"mallory", "mallory", "b", "mallory"} {
		ag.inbox.add(core.Message{Topic: topic, Payload: []byte(fmt.Sprintf(
			`{"type":"heartbeat","group":"g","from":"%s","leader":"%s","priority":1,"term":1,"seq":%d}`, from, from, i+1))}, 100)
	}
	ag.mu.Unlock()
	ag.wake()
	var st Stats
	defer func() {
		if t.Failed() {
			t.Logf("dropped %d (from members %d), rejected %d", st.Dropped, st.DroppedFromMembers, st.Rejected)
		}
	}()
	transporttest.WaitForWithin(t, time.Minute, "the 4 messages (1 of a member) of the batch lost to a trap counted dropped, none rejected", func() bool {
		st = ag.Stats()
		return st.Dropped == 4 && st.DroppedFromMembers == 1 && st.Rejected == 0
	})
}

// Steady traffic (every member's lane emptied by each step and filled
// again) costs allocations per envelope and per step, not per message:
// unwrapping an envelope of 300 heartbeats into the lanes and taking them
// out again allocates a handful of times, whatever the number of entries.
func TestSteadyTrafficAllocatesPerEnvelope(t *testing.T) {
	const n = 300
	c := newCoalescer(0)
	var in inbox
	entries := make([]envEntry, n)
	for i := range entries {
		g := fmt.Sprintf("g%03d", i)
		in.setMembers(core.Topic(g), []string{"a", "b", "c"})
		c.join(g, "a", []string{"a", "b", "c"}).lanes = in.lanes(core.Topic(g))
		entries[i] = envEntry{Group: g, Payload: []byte(`{"type":"heartbeat","group":"` + g + `","from":"b","leader":"b","term":3,"seq":1}`)}
	}
	env := appendEnvelope(nil, "b", entries)
	topic := PeersTopic([]string{"a", "b", "c"})
	var scratch []inMsg
	round := func() {
		msgs, from, refused, err := c.receive(1, topic, env, scratch[:0])
		if err != nil || refused != 0 || len(msgs) != n {
			t.Fatalf("receive: %d messages, %d refused, %v", len(msgs), refused, err)
		}
		for _, m := range msgs {
			if queued, member := in.addIn(m, from, 1000); !queued || !member {
				t.Fatal("not queued in its member's lane")
			}
		}
		scratch = msgs
		for got := 0; got < n; {
			got += len(in.take(core.MaxBatchBytes / 2))
		}
	}
	round() // the lanes and scratch arrays exist from here on
	if allocs := testing.AllocsPerRun(20, round); allocs > 10 {
		t.Fatalf("%.0f allocations to receive and take an envelope of %d entries", allocs, n)
	}
}

// BenchmarkInboxForget is the cost of leaving one group (Agent.Close
// leaves every group) while many others have lanes: it visits only the
// group's own lanes.
func BenchmarkInboxForget(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var in inbox
			fill := func() {
				for i := range n {
					topic := core.Topic(fmt.Sprintf("g%05d", i))
					in.setMembers(topic, []string{"a", "b", "c"})
					in.add(core.Message{Topic: topic, Payload: []byte(`{"from":"b"}`)}, 10)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				if i%n == 0 {
					b.StopTimer()
					fill()
					b.StartTimer()
				}
				in.forget(core.Topic(fmt.Sprintf("g%05d", i%n)))
			}
		})
	}
}

// TestInboxBehindKeepsEachMembersNewest: while the members' lanes hold more
// than a step takes, a member's newer heartbeat (or ack) takes the place of
// the one still waiting at the end of its lane, so the core gets each
// group's newest and the work per round is one message per lane, however
// late the agent is; before it, each lane queued every heartbeat, in order,
// and a starved agent answered heartbeats ever older (its acks earned no
// lease). A replay, another incarnation, a vote, or anything while the
// agent keeps up is queued as before.
func TestInboxBehindKeepsEachMembersNewest(t *testing.T) {
	const groups = stepMessages + 44
	hb := func(g int, inc, term, seq int) core.Message {
		name := fmt.Sprintf("g%03d", g)
		return core.Message{Topic: core.Topic(name), Payload: []byte(fmt.Sprintf(
			`{"type":"heartbeat","group":"%s","from":"b","inc":%d,"leader":"b","priority":2,"term":%d,"seq":%d,"committed":true}`, name, inc, term, seq))}
	}
	ack := func(g int, seq int) core.Message {
		name := fmt.Sprintf("g%03d", g)
		return core.Message{Topic: core.Topic(name), Payload: []byte(fmt.Sprintf(
			`{"type":"ack","group":"%s","from":"c","inc":9,"priority":1,"leader":"b","term":3,"seq":%d,"leader_inc":7}`, name, seq))}
	}
	var in inbox
	for g := range groups {
		in.setMembers(core.Topic(fmt.Sprintf("g%03d", g)), []string{"a", "b", "c"})
	}
	add := func(m core.Message) {
		t.Helper()
		if ok, member := in.add(m, 1000); !ok || !member {
			t.Fatalf("not queued in a lane: %s", m.Payload)
		}
	}
	// Keeping up: every heartbeat is queued.
	add(hb(0, 7, 3, 1))
	add(hb(0, 7, 3, 2))
	if got := len(in.take(core.MaxBatchBytes / 2)); got != 2 || in.superseded != 0 {
		t.Fatalf("keeping up: took %d, superseded %d; want 2, 0", got, in.superseded)
	}
	// More than a step takes: the agent is behind.
	for g := range groups {
		add(hb(g, 7, 3, 3))
		add(ack(g, 3))
	}
	if got := len(in.take(core.MaxBatchBytes / 2)); got != stepMessages || !in.behind {
		t.Fatalf("took %d (behind %v), want %d and behind", got, in.behind, stepMessages)
	}
	for g := range groups {
		add(hb(g, 7, 3, 4))
		add(ack(g, 4))
	}
	// Of 2×groups lanes, stepMessages were emptied by the take; the others
	// still held their seq 3, which seq 4 replaced.
	if want := uint64(2*groups - stepMessages); in.superseded != want {
		t.Fatalf("superseded %d, want %d", in.superseded, want)
	}
	seqs := map[string]int{} // "hb 4": count
	for in.len() > 0 {
		for _, m := range in.take(core.MaxBatchBytes / 2) {
			kind := "hb"
			if bytes.HasPrefix(m.Payload, []byte(`{"type":"ack"`)) {
				kind = "ack"
			}
			seq, _ := numberAfter(m.Payload, seqKey)
			seqs[fmt.Sprint(kind, " ", seq)]++
		}
	}
	// The stepMessages taken first were heartbeats and acks of seq 3 (one
	// each per lane, in turn); every lane then gave its seq 4 once.
	if seqs["hb 4"] != groups || seqs["ack 4"] != groups || seqs["hb 3"]+seqs["ack 3"] != 0 {
		t.Fatalf("taken after the first step: %v; want %d heartbeats and %d acks of seq 4 only", seqs, groups, groups)
	}
	if in.behind {
		t.Fatal("still behind with nothing waiting")
	}

	// Behind again (group 0's lane of b holding a heartbeat behind
	// stepMessages others); what never replaces it:
	for g := range groups {
		add(hb(g, 7, 3, 5))
	}
	in.take(core.MaxBatchBytes / 2)
	last := groups - 1
	before := in.superseded
	for _, m := range []core.Message{
		hb(last, 7, 3, 4), // a replay of an older one
		hb(last, 8, 3, 6), // another incarnation (a second process with b's id)
		{Topic: core.Topic(fmt.Sprintf("g%03d", last)), Payload: []byte(fmt.Sprintf( // a vote
			`{"type":"vote","group":"g%03d","from":"b","inc":7,"term":4,"candidate":"c","granted":true}`, last))},
	} {
		add(m)
	}
	if in.superseded != before {
		t.Fatalf("%d replaced", in.superseded-before)
	}
	// Only a lane's last message is ever replaced, so nothing is
	// reordered: a later heartbeat behind the vote is queued after it.
	add(hb(last, 7, 4, 1))
	if in.superseded != before {
		t.Fatal("a heartbeat replaced a vote")
	}
}

func TestSupersedes(t *testing.T) {
	const h = `{"type":"heartbeat","group":"g","from":"b","inc":7,"leader":"b","priority":2,`
	for _, c := range []struct {
		p, old string
		want   bool
	}{
		{h + `"term":3,"seq":5}`, h + `"term":3,"seq":4}`, true},
		{h + `"term":4,"seq":1}`, h + `"term":3,"seq":4}`, true},
		{h + `"term":3,"seq":4}`, h + `"term":3,"seq":4}`, false}, // a duplicate
		{h + `"term":3,"seq":4}`, h + `"term":3,"seq":5}`, false},
		{h + `"term":2,"seq":9}`, h + `"term":3,"seq":5}`, false},
		{h + `"term":3}`, h + `"term":3,"seq":4}`, false},
		{`{"type":"heartbeat","group":"g","from":"b","inc":71,"leader":"b","term":3,"seq":5}`, h + `"term":3,"seq":4}`, false},
		{`{"type":"heartbeat","group":"h","from":"b","inc":7,"leader":"b","priority":2,"term":3,"seq":5}`, h + `"term":3,"seq":4}`, false},
		{`{"type":"leader","group":"g","from":"b","inc":7,"leader":"b","priority":2,"term":3,"seq":5}`, `{"type":"leader","group":"g","from":"b","inc":7,"leader":"b","priority":2,"term":3,"seq":4}`, false},
		{`{"type":"ack","group":"g","from":"c","inc":9,"priority":1,"leader":"b","term":3,"seq":5,"leader_inc":7}`, `{"type":"ack","group":"g","from":"c","inc":9,"priority":1,"leader":"b","term":3,"seq":4,"leader_inc":7}`, true},
		{`{"type":"ack","group":"g","from":"c","inc":9,"priority":1,"leader":"b","term":4}`, `{"type":"ack","group":"g","from":"c","inc":9,"priority":1,"leader":"b","term":3,"seq":4,"leader_inc":7}`, false}, // a stale reply
		{`{"type":"ack","group":"g","from":"c","inc":9,"priority":1,"leader":"b","term":3,"seq":5}`, h + `"term":3,"seq":4}`, false},
		{`{"type":"heartbeat","group":"g","from":"b","inc":`, `{"type":"heartbeat","group":"g","from":"b","inc":`, false},
		{h + `"term":3,"seq":99999999999999999999}`, h + `"term":3,"seq":4}`, false},
	} {
		if got := supersedes([]byte(c.p), []byte(c.old)); got != c.want {
			t.Errorf("supersedes(%s, %s) = %v, want %v", c.p, c.old, got, c.want)
		}
	}
}

// In an agent of thinGroups groups or more, a follower's core gets one ack
// per election timeout (here 1000 ms) of each member that addresses
// another leader; the first ack of a heartbeat addressed to this agent,
// every stale reply (seq 0) and every other message goes to it. With fewer
// groups nothing is thinned.
func TestOtherFollowersAcksThinned(t *testing.T) {
	var in inbox
	for i := range thinGroups {
		g := core.Topic("g" + strconv.Itoa(i))
		in.thinAcks(g, "a", 1000, true, 250)
		in.setMembers(g, []string{"a", "b", "c"})
	}
	g := core.Topic("g0")
	ack := func(from, leader string, seq int) core.Message {
		return core.Message{Topic: g, Payload: []byte(`{"type":"ack","group":"g0","from":"` + from + `","inc":7,"priority":3,"leader":"` + leader + `","term":2,"seq":` + strconv.Itoa(seq) + `,"leader_inc":9}`)}
	}
	hb := core.Message{Topic: g, Payload: []byte(`{"type":"heartbeat","group":"g0","from":"b","inc":7,"leader":"b","term":2,"seq":4}`)}
	for i, step := range []struct {
		now    int64
		m      core.Message
		passed bool
	}{
		{0, ack("b", "c", 5), true},    // the first goes to the core
		{400, ack("b", "c", 6), false}, // within 1000 ms of it: thinned
		{400, ack("c", "b", 6), true},  // another member's: its own slot
		{500, ack("b", "a", 6), true},  // addressed to this agent
		{500, hb, true},
		{600, ack("b", "c", 0), true},   // a stale reply
		{999, ack("b", "c", 7), false},  // still within 1000 ms
		{1000, ack("b", "c", 8), true},  // an election timeout on
		{1500, ack("b", "c", 9), false}, // thinned again
	} {
		in.now = step.now
		before, pending := in.thinned, in.pending
		if queued, member := in.add(step.m, 1000); !queued || !member {
			t.Fatalf("step %d: not queued in a member's lane", i)
		}
		if passed := in.pending > pending; passed != step.passed || (in.thinned > before) == step.passed {
			t.Fatalf("step %d at %d: passed %v (want %v), thinned %d", i, step.now, passed, step.passed, in.thinned-before)
		}
	}
	in.forget(core.Topic("g1")) // one group fewer than thinGroups: nothing thinned
	in.now = 1600
	before := in.pending
	if in.add(ack("b", "c", 10), 1000); in.pending != before+1 {
		t.Fatal("an ack thinned in an agent of fewer than thinGroups groups")
	}
}

// In a quorum group of an agent in thinGroups groups or more, the leader's
// core gets, of each heartbeat's acks, the first ones a majority needs (one
// in a group of three, two in five), and each member's acks at least every
// one and a half heartbeat intervals (here 500 ms): so its lease grows from
// every heartbeat as before, and every member stays live, in contact, and
// at most two seqs behind. Stale replies, other terms and bully groups'
// acks all go to the core; a forged seq far ahead stops the counting for
// one interval only.
func TestOwnAcksThinned(t *testing.T) {
	var in inbox
	three, five, bully := core.Topic("three"), core.Topic("five"), core.Topic("bully")
	for i := range thinGroups {
		g := core.Topic("g" + strconv.Itoa(i))
		switch i {
		case 0:
			g = three
		case 1:
			g = five
		case 2:
			g = bully
		}
		in.thinAcks(g, "a", 2000, g != bully, 500)
		in.setMembers(g, []string{"a", "b", "c"})
	}
	in.setMembers(five, []string{"d", "e"}) // learnt later: counted
	ack := func(g, from string, term, seq int) core.Message {
		return core.Message{Topic: g, Payload: []byte(`{"type":"ack","group":"x","from":"` + from + `","inc":7,"priority":3,"leader":"a","term":` + strconv.Itoa(term) + `,"seq":` + strconv.Itoa(seq) + `,"leader_inc":9}`)}
	}
	for i, step := range []struct {
		now    int64
		m      core.Message
		passed bool
	}{
		{1000, ack(three, "b", 2, 5), true},  // the first of seq 5: the majority's
		{1010, ack(three, "c", 2, 5), true},  // c's first: it is heard
		{1500, ack(three, "b", 2, 6), true},  // the first of seq 6
		{1510, ack(three, "c", 2, 6), false}, // c's last went 500 ms ago
		{2000, ack(three, "b", 2, 7), true},
		{2010, ack(three, "c", 2, 7), true}, // 1,000 ms: c heard again
		{2500, ack(three, "c", 2, 8), true}, // c first this time
		{2510, ack(three, "b", 2, 8), false},
		{2520, ack(three, "c", 2, 6), false}, // late, and c's last is recent
		{2530, ack(three, "c", 2, 0), true},  // a stale reply
		{2540, ack(three, "c", 3, 1), true},  // a new term: counted afresh
		{2550, ack(three, "b", 3, 1), false}, // b's slot: its last was at 2000
		{3000, ack(three, "b", 3, 2), true},
		{3010, ack(three, "b", 3, 999), true}, // far ahead (a forgery): counted...
		{3020, ack(three, "c", 3, 3), false},  // ...so the next heartbeat's first is not
		{3510, ack(three, "c", 3, 4), true},   // but only for one interval
		{3520, ack(three, "b", 3, 4), false},
		{1000, ack(five, "b", 1, 3), true}, // five members: two acks make a majority
		{1010, ack(five, "c", 1, 3), true},
		{1020, ack(five, "d", 1, 3), true}, // d's first
		{1500, ack(five, "b", 1, 4), true},
		{1510, ack(five, "c", 1, 4), true},
		{1520, ack(five, "d", 1, 4), false},
		{1530, ack(five, "e", 1, 4), true}, // e's first
		{2000, ack(five, "b", 1, 5), true},
		{2010, ack(five, "c", 1, 5), true},
		{2020, ack(five, "e", 1, 5), false},
		{2030, ack(five, "d", 1, 5), true},  // 1,010 ms since d's last
		{1000, ack(bully, "b", 1, 3), true}, // a bully group thins no ack of its own
		{1010, ack(bully, "c", 1, 3), true},
	} {
		in.now = step.now
		before, pending := in.thinned, in.pending
		if queued, member := in.add(step.m, 1000); !queued || !member {
			t.Fatalf("step %d: not queued in a member's lane", i)
		}
		if passed := in.pending > pending; passed != step.passed || (in.thinned > before) == step.passed {
			t.Fatalf("step %d (%s): passed %v (want %v)", i, step.m.Payload, passed, step.passed)
		}
	}
}
