package core

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// testNet is a tiny synchronous bus for unit tests and golden transcripts:
// every publish is queued for every other node that is up and not cut off,
// and delivered when the test says so. Optionally it records what happened
// for printing.
type testNet struct {
	t     testing.TB
	mode  Mode
	ids   []string
	prio  map[string]uint32
	nodes map[string]*Engine
	down  map[string]bool
	cut   map[[2]string]bool // cut[{from,to}]: from's messages do not reach to
	queue []queued
	now   int64
	store map[string]GroupState
	// voted[id][term] is the vote id published in term, to catch double votes.
	voted map[string]map[uint64]string
	out   strings.Builder // what the steps printed since the last take()
	quiet bool            // print events only, not publishes or lease renewals (but a lease regained)
	// cfgHook, if set, adjusts every node's config (auth_test.go); sent, if
	// set, sees every publish.
	cfgHook func(*Config)
	sent    func(from string, m Message)
	// leaseUntil[id] is the end of the lease id holds (0: none). Every
	// step checks that no two nodes hold one at the same instant: the
	// harness has one clock, so this is lease exclusivity in real time.
	leaseUntil map[string]int64
	// members, if set, is the Members every node starts with (a node that
	// joins later, awaiting its configuration, is on the bus but not in
	// it); awaiting marks such nodes.
	members  []string
	awaiting map[string]bool
	// values[id], if set, is id's Config.Value.
	values map[string]string
	// balanced sets every node's Config.BalancedPriority.
	balanced bool
	// paused nodes are up but not stepped (a stalled process: GC, SIGSTOP);
	// what is sent to one waits in held until it resumes.
	paused map[string]bool
	held   map[string][]Message
	// show, if set, prints a one-line summary, with the time, of every
	// publish of these types while quiet (elapse show=...).
	show map[string]bool
}

type queued struct {
	from, to string
	msg      Message
	sent     int64 // when it was published (advanceDelayed)
}

func newTestNet(t testing.TB, mode Mode, ids ...string) *testNet {
	n := &testNet{t: t, mode: mode, ids: ids, prio: map[string]uint32{}, nodes: map[string]*Engine{},
		down: map[string]bool{}, cut: map[[2]string]bool{}, store: map[string]GroupState{},
		voted: map[string]map[uint64]string{}, leaseUntil: map[string]int64{}, awaiting: map[string]bool{},
		paused: map[string]bool{}, held: map[string][]Message{}}
	for _, id := range ids {
		n.start(id)
	}
	return n
}

func (n *testNet) config(id string) Config {
	c := Config{ID: id, Group: "g", Mode: n.mode, Priority: n.prio[id]}
	if n.mode == ModeQuorum {
		c.Members = n.ids
		if n.members != nil {
			c.Members = n.members
		}
		c.AwaitConfig = n.awaiting[id]
	}
	c.Value = n.values[id]
	c.BalancedPriority = n.balanced
	if n.cfgHook != nil {
		n.cfgHook(&c)
	}
	return c
}

func (n *testNet) start(id string) {
	n.nodes[id] = NewEngine()
	delete(n.down, id)
	delete(n.leaseUntil, id)
	n.step(id, &Input{Now: n.now, Join: []GroupSpec{{Config: n.config(id), State: n.store[id]}}})
}

func (n *testNet) step(id string, in *Input) {
	var out Output
	n.nodes[id].Step(in, &out)
	for _, p := range out.Persist {
		if old := n.store[id]; p.Term < old.Term {
			n.t.Fatalf("%s persisted term %d after %d", id, p.Term, old.Term)
		}
		n.store[id] = p
	}
	for _, ev := range out.Events {
		// A lease after the one this leadership held had ended: the
		// leader kept its term without a lease and regained one.
		prev, held := n.leaseUntil[id]
		regained := ev.Kind == EventLease && prev > 0 && prev <= n.now
		first := ev.Kind == EventLease && !held // a leader elected without one
		n.trackLease(id, ev)
		if n.quiet && ev.Kind == EventLease && !regained && !first {
			continue // one per heartbeat: too many to read
		}
		fmt.Fprintf(&n.out, "%s: %s", id, ev.Kind)
		if ev.Kind != EventRejected {
			fmt.Fprintf(&n.out, " term=%d", ev.Term)
		}
		if ev.Leader != "" {
			fmt.Fprintf(&n.out, " leader=%s", ev.Leader)
		}
		if ev.LeaseUntil != 0 {
			fmt.Fprintf(&n.out, " lease=%d", ev.LeaseUntil)
		}
		if ev.Kind == EventConfig {
			fmt.Fprintf(&n.out, " conf=%d members=(%s)", ev.ConfIndex, strings.Join(ev.Members, ","))
		}
		if ev.Kind == EventValue {
			fmt.Fprintf(&n.out, " value=%q", ev.Value)
		}
		if ev.Reason != "" {
			fmt.Fprintf(&n.out, " (%s)", ev.Reason)
		}
		if regained {
			fmt.Fprintf(&n.out, " @%d regained: the lease before ended at %d", n.now, prev)
		}
		n.out.WriteByte('\n')
	}
	for _, p := range out.Publishes {
		if n.sent != nil {
			n.sent(id, p)
		}
		n.checkVote(id, p.Payload)
		if !n.quiet {
			fmt.Fprintf(&n.out, "%s> %s\n", id, p.Payload)
		} else if n.show != nil {
			n.showPublish(id, p.Payload)
		}
		for _, to := range n.ids {
			switch {
			case to == id || n.cut[[2]string{id, to}]:
			case n.paused[to]:
				n.held[to] = append(n.held[to], p)
			default:
				n.queue = append(n.queue, queued{id, to, p, n.now})
			}
		}
	}
}

// trackLease follows id's lease through its events and fails the test when
// two nodes hold a valid lease at once.
func (n *testNet) trackLease(id string, ev Event) {
	switch ev.Kind {
	case EventBecameLeader, EventLease:
		if ev.LeaseUntil <= n.now {
			return
		}
		n.leaseUntil[id] = ev.LeaseUntil
		for other, until := range n.leaseUntil {
			if other != id && !n.down[other] && until > n.now {
				n.t.Fatalf("t=%d: %s holds a lease until %d while %s holds one until %d (term %d)\n%s",
					n.now, id, ev.LeaseUntil, other, until, ev.Term, n.out.String())
			}
		}
	case EventSteppedDown:
		delete(n.leaseUntil, id)
	}
}

// crash stops id; its lease ends with it.
func (n *testNet) crash(id string) {
	n.down[id] = true
	delete(n.leaseUntil, id)
}

// checkVote fails the test if id publishes two different granted votes in
// one term (Raft §5.2: one vote per term, across restarts).
func (n *testNet) checkVote(id string, payload []byte) {
	var m wireMsg
	if decodeWire(payload, &m) != nil || m.Type != typeVote || !m.Granted || m.Pre {
		return
	}
	if n.voted[id] == nil {
		n.voted[id] = map[uint64]string{}
	}
	if prev, ok := n.voted[id][m.Term]; ok && prev != m.Candidate {
		n.t.Fatalf("%s voted for %s and %s in term %d", id, prev, m.Candidate, m.Term)
	}
	n.voted[id][m.Term] = m.Candidate
}

// deliverRound delivers what is queued now; what that produces stays queued.
func (n *testNet) deliverRound() {
	round := n.queue
	n.queue = nil
	for _, q := range round {
		if !n.down[q.to] {
			n.step(q.to, &Input{Now: n.now, Inbound: []Message{q.msg}})
		}
	}
}

// deliverAll delivers until nothing is queued.
func (n *testNet) deliverAll() {
	for len(n.queue) > 0 {
		n.deliverRound()
	}
}

// advance moves time forward in steps of stepMs, ticking every node and
// delivering instantly.
func (n *testNet) advance(total, stepMs int64) {
	for end := n.now + total; n.now < end; {
		n.now = min(n.now+stepMs, end)
		for _, id := range n.ids {
			if !n.down[id] && !n.paused[id] {
				n.step(id, &Input{Now: n.now})
			}
		}
		n.deliverAll()
	}
}

// advanceDelayed is advance on a slow network: every message arrives delay
// ms after it was published (each receiver steps once per message, at the
// first 10 ms step on or after that).
func (n *testNet) advanceDelayed(total, delay int64) {
	for end := n.now + total; n.now < end; {
		n.now = min(n.now+10, end)
		for _, id := range n.ids {
			if !n.down[id] && !n.paused[id] {
				n.step(id, &Input{Now: n.now})
			}
		}
		var due []queued
		n.queue = slices.DeleteFunc(n.queue, func(q queued) bool {
			if q.sent+delay <= n.now {
				due = append(due, q)
				return true
			}
			return false
		})
		for _, q := range due {
			if !n.down[q.to] {
				n.step(q.to, &Input{Now: n.now, Inbound: []Message{q.msg}})
			}
		}
	}
}

// showPublish prints one line for a publish of a type in n.show: when, who,
// what, its term and flags, and whom a vote or request is for.
func (n *testNet) showPublish(id string, payload []byte) {
	var m wireMsg
	if decodeWire(payload, &m) != nil || !n.show[m.Type] {
		return
	}
	fmt.Fprintf(&n.out, "@%d %s> %s term=%d", n.now, id, m.Type, m.Term)
	if m.Candidate != "" {
		fmt.Fprintf(&n.out, " candidate=%s", m.Candidate)
	}
	if m.Pre {
		n.out.WriteString(" pre")
	}
	if m.Granted {
		n.out.WriteString(" granted")
	}
	n.out.WriteByte('\n')
}

func (n *testNet) partition(sides ...[]string) {
	clear(n.cut)
	for i, a := range sides {
		for j, b := range sides {
			if i == j {
				continue
			}
			for _, x := range a {
				for _, y := range b {
					n.cut[[2]string{x, y}] = true
				}
			}
		}
	}
}

func (n *testNet) status(id string) Status {
	s, _ := n.nodes[id].Status("g")
	return s
}

// leaders lists the live nodes that believe they lead, as id@term.
func (n *testNet) leaders() []string {
	var ls []string
	for _, id := range n.ids {
		if s := n.status(id); !n.down[id] && s.Role == RoleLeader {
			ls = append(ls, fmt.Sprintf("%s@%d", id, s.Term))
		}
	}
	return ls
}

func (n *testNet) take() string {
	s := n.out.String()
	n.out.Reset()
	return s
}

func (n *testNet) live() []string {
	return slices.DeleteFunc(slices.Clone(n.ids), func(id string) bool { return n.down[id] })
}

// others lists the members other than id, in the net's order.
func (n *testNet) others(id string) []string {
	return slices.DeleteFunc(slices.Clone(n.ids), func(x string) bool { return x == id })
}

// electThenCrashLeader lets the nodes elect a leader, crashes it, checks
// that another is elected, and returns the crashed one.
func (n *testNet) electThenCrashLeader(t *testing.T) string {
	t.Helper()
	n.advance(5000, 10)
	ls := n.leaders()
	if len(ls) != 1 {
		t.Fatalf("leaders %v\n%s", ls, n.take())
	}
	old := strings.Split(ls[0], "@")[0]
	n.crash(old)
	n.advance(5000, 10)
	if ls := n.leaders(); len(ls) != 1 || strings.HasPrefix(ls[0], old+"@") {
		t.Fatalf("after %s crashed: leaders %v\n%s", old, ls, n.take())
	}
	return old
}

func TestFirstElectionAndFailover(t *testing.T) {
	for _, mode := range []Mode{ModeQuorum, ModeBully} {
		t.Run(string(mode), func(t *testing.T) {
			n := newTestNet(t, mode, "a", "b", "c", "d", "e")
			old := n.electThenCrashLeader(t)
			for _, id := range n.live() {
				if s := n.status(id); s.Leader == "" || s.Leader == old {
					t.Fatalf("%s follows %q", id, s.Leader)
				}
			}
		})
	}
}
