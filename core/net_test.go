package core

import (
	"fmt"
	"strings"
	"testing"
)

// testNet is a tiny synchronous bus for unit tests and transcripts: every
// publish is queued for every other node; deliver moves them when told.
type testNet struct {
	t     testing.TB
	ids   []string
	nodes map[string]*Engine
	down  map[string]bool
	cut   map[[2]string]bool // cut[{from,to}]: from's messages do not reach to
	queue []queued
	now   int64
	store map[string]GroupState
	log   strings.Builder
}

type queued struct {
	from, to string
	msg      Message
}

func newTestNet(t testing.TB, mode Mode, ids ...string) *testNet {
	n := &testNet{t: t, ids: ids, nodes: map[string]*Engine{}, down: map[string]bool{},
		cut: map[[2]string]bool{}, store: map[string]GroupState{}}
	for _, id := range ids {
		n.start(id, mode)
	}
	return n
}

func (n *testNet) config(id string, mode Mode) Config {
	c := Config{ID: id, Group: "g", Mode: mode}
	if mode == ModeQuorum {
		c.Members = n.ids
	}
	return c
}

func (n *testNet) start(id string, mode Mode) {
	e := NewEngine()
	n.nodes[id] = e
	delete(n.down, id)
	n.step(id, &Input{Now: n.now, Join: []GroupSpec{{Config: n.config(id, mode), State: n.store[id]}}})
}

func (n *testNet) step(id string, in *Input) {
	var out Output
	n.nodes[id].Step(in, &out)
	for _, p := range out.Persist {
		n.store[id] = p
	}
	for _, ev := range out.Events {
		fmt.Fprintf(&n.log, "%d %s: %s term=%d leader=%s lease=%d %s\n", n.now, id, ev.Kind, ev.Term, ev.Leader, ev.LeaseUntil, ev.Reason)
	}
	for _, p := range out.Publishes {
		for _, to := range n.ids {
			if to != id && !n.cut[[2]string{id, to}] {
				n.queue = append(n.queue, queued{id, to, p})
			}
		}
	}
}

// deliverAll delivers queued messages (and what they cause) until quiet.
func (n *testNet) deliverAll() {
	for len(n.queue) > 0 {
		q := n.queue[0]
		n.queue = n.queue[1:]
		if n.down[q.to] {
			continue
		}
		n.step(q.to, &Input{Now: n.now, Inbound: []Message{q.msg}})
	}
}

// advance moves time forward in steps of ms, ticking every node and
// delivering instantly.
func (n *testNet) advance(total, stepMs int64) {
	for end := n.now + total; n.now < end; {
		n.now += stepMs
		for _, id := range n.ids {
			if !n.down[id] {
				n.step(id, &Input{Now: n.now})
			}
		}
		n.deliverAll()
	}
}

func (n *testNet) leaders() []string {
	var ls []string
	for _, id := range n.ids {
		if n.down[id] {
			continue
		}
		if s, _ := n.nodes[id].Status("g"); s.Role == RoleLeader {
			ls = append(ls, fmt.Sprintf("%s@%d", id, s.Term))
		}
	}
	return ls
}

func TestFirstElectionSmoke(t *testing.T) {
	for _, mode := range []Mode{ModeQuorum, ModeBully} {
		n := newTestNet(t, mode, "a", "b", "c", "d", "e")
		n.advance(5000, 10)
		if ls := n.leaders(); len(ls) != 1 {
			t.Fatalf("%s: leaders %v\n%s", mode, ls, n.log.String())
		}
		t.Logf("%s: %v\n%s", mode, n.leaders(), n.log.String())
		n.down[strings.Split(n.leaders()[0], "@")[0]] = true
		n.advance(5000, 10)
		if ls := n.leaders(); len(ls) != 1 {
			t.Fatalf("%s after crash: leaders %v\n%s", mode, ls, n.log.String())
		}
	}
}
