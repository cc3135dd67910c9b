package core

import (
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"
)

// electLeader runs a fresh net until a leader is elected and returns it.
func electLeader(t *testing.T, n *testNet) string {
	t.Helper()
	n.quiet = true
	n.advance(3000, 10)
	ls := n.leaders()
	if len(ls) != 1 {
		t.Fatalf("leaders %v", ls)
	}
	id, _, _ := strings.Cut(ls[0], "@")
	return id
}

func memberIDs(s Status) []string {
	ids := make([]string, len(s.Members))
	for i, m := range s.Members {
		ids[i] = m.ID
	}
	return ids
}

// joinAwaiting starts id on n's bus, awaiting its configuration.
func joinAwaiting(n *testNet, id string) {
	if n.members == nil {
		n.members = slices.Clone(n.ids)
	}
	n.ids = append(n.ids, id)
	n.awaiting[id] = true
	n.start(id)
}

func command(n *testNet, at string, c Command) []Event {
	c.Group = "g"
	var out Output
	n.nodes[at].Step(&Input{Now: n.now, Commands: []Command{c}}, &out)
	for _, p := range out.Publishes {
		for _, to := range n.ids {
			if to != at {
				n.queue = append(n.queue, queued{at, to, p, n.now})
			}
		}
	}
	for _, st := range out.Persist {
		n.store[at] = st
	}
	return out.Events
}

// With ed25519, adding a member distributes its public key with the
// configuration, and a removed member's messages no longer verify.
func TestMembershipDistributesKeysAndRefusesRemoved(t *testing.T) {
	n := newAuthNet(t, ModeQuorum, AuthEd25519, "a", "b", "c")
	leader := electLeader(t, n)
	joinAwaiting(n, "d")
	dKey := testPriv("d").Public().(ed25519.PublicKey)

	evs := command(n, leader, Command{Kind: CmdAddMember, Target: "d"})
	if len(evs) != 1 || evs[0].Kind != EventRejected || !strings.Contains(evs[0].Reason, "public key") {
		t.Fatalf("add without a key: %+v", evs)
	}
	command(n, leader, Command{Kind: CmdAddMember, Target: "d", Key: dKey})
	n.advance(1000, 10)
	for _, id := range n.ids {
		s := n.status(id)
		if !slices.Equal(memberIDs(s), []string{"a", "b", "c", "d"}) || !s.ConfCommitted || !s.Voter {
			t.Fatalf("%s: %+v", id, s)
		}
	}
	if st := n.store["a"]; len(st.Keys) != 4 || !slices.Equal(st.Keys[3], dKey) {
		got := st.Keys
		t.Fatalf("a persisted d's key %x, want %x", got, dKey)
	}

	victim := "a"
	if leader == "a" {
		victim = "b"
	}
	command(n, leader, Command{Kind: CmdRemoveMember, Target: victim})
	n.advance(1000, 10)
	if s := n.status(leader); slices.Contains(memberIDs(s), victim) || !s.ConfCommitted {
		t.Fatalf("leader after removing %s: %+v", victim, s)
	}
	before := n.status(leader).Forged
	n.quiet = false
	ack := `{"type":"ack","group":"g","from":"` + victim + `","priority":1,"leader":"` + leader + `","term":1,"seq":1}`
	n.step(leader, &Input{Now: n.now, Inbound: []Message{{Topic: Topic("g"), Payload: signAs(AuthEd25519, victim, "g", []byte(ack), 99, 1)}}})
	if s := n.status(leader); s.Forged != before+1 {
		t.Fatalf("a removed member's message was not refused as unverifiable: %+v\n%s", s, n.take())
	}
}

// A restarted member takes its persisted configuration, not its flags.
func TestMembershipSurvivesRestart(t *testing.T) {
	n := newTestNet(t, ModeQuorum, "a", "b", "c")
	leader := electLeader(t, n)
	joinAwaiting(n, "d")
	command(n, leader, Command{Kind: CmdAddMember, Target: "d"})
	n.advance(1000, 10)
	for _, id := range []string{"a", "d"} {
		n.crash(id)
		n.start(id) // flags: Members a,b,c; d still awaiting
		if s := n.status(id); !slices.Equal(memberIDs(s), []string{"a", "b", "c", "d"}) || !s.Voter {
			t.Fatalf("%s after restart: %+v", id, s)
		}
	}
}

func TestMembershipRefusals(t *testing.T) {
	n := newTestNet(t, ModeQuorum, "a", "b", "c")
	leader := electLeader(t, n)
	follower := "a"
	if leader == "a" {
		follower = "b"
	}
	for _, tc := range []struct {
		at   string
		c    Command
		want string
	}{
		{leader, Command{Kind: CmdAddMember, Target: "b"}, "already a member"},
		{leader, Command{Kind: CmdRemoveMember, Target: "z"}, "not a member"},
		{leader, Command{Kind: CmdAddMember, Target: "bad id"}, "not in"},
		{leader, Command{Kind: CmdAddMember, Target: "d", Key: make([]byte, 32)}, "only for groups that use ed25519"},
		{follower, Command{Kind: CmdAddMember, Target: "bad id"}, "not in"},
	} {
		evs := command(n, tc.at, tc.c)
		if len(evs) != 1 || evs[0].Kind != EventRejected || !strings.Contains(evs[0].Reason, tc.want) {
			t.Errorf("%s %+v: %+v, want a refusal with %q", tc.at, tc.c, evs, tc.want)
		}
	}
	// One change at a time: a third request waits for nothing.
	command(n, leader, Command{Kind: CmdAddMember, Target: "d"})
	command(n, leader, Command{Kind: CmdAddMember, Target: "e"})
	if evs := command(n, leader, Command{Kind: CmdAddMember, Target: "f"}); len(evs) != 1 || !strings.Contains(evs[0].Reason, "another change is waiting") {
		t.Errorf("third change: %+v", evs)
	}

	b := newTestNet(t, ModeBully, "a", "b")
	if evs := command(b, "a", Command{Kind: CmdAddMember, Target: "c"}); len(evs) != 1 || !strings.Contains(evs[0].Reason, "bully mode") {
		t.Errorf("bully: %+v", evs)
	}
	lone := newTestNet(t, ModeQuorum, "a", "b", "c")
	if evs := command(lone, "a", Command{Kind: CmdRemoveMember, Target: "b"}); len(evs) != 1 || !strings.Contains(evs[0].Reason, "no leader known") {
		t.Errorf("no leader: %+v", evs)
	}
}

// A configuration too large for one message is refused, not half-sent.
func TestMembershipRefusesOversizedConfiguration(t *testing.T) {
	members := []string{"a"}
	for i := range 36 {
		members = append(members, strings.Repeat("m", 100)+uitoa(uint64(1000+i)))
	}
	e := NewEngine()
	var out Output
	if err := e.Join(GroupSpec{Config: Config{ID: "a", Group: "g", Members: members}}, 0, &out); err != nil {
		t.Fatal(err)
	}
	g := e.groups[Topic("g")]
	g.role, g.confCommitted = RoleLeader, true // as if elected, its configuration committed
	out.Reset()
	e.Step(&Input{Now: 1, Commands: []Command{{Kind: CmdAddMember, Group: "g", Target: strings.Repeat("n", 128)}}}, &out)
	if len(out.Events) == 0 || !strings.Contains(out.Events[0].Reason, "would not fit") || len(out.Publishes) != 0 {
		t.Fatalf("%+v", out)
	}
	if s, _ := e.Status("g"); len(s.Members) != len(members) {
		t.Fatalf("the refused change changed the configuration: %d members", len(s.Members))
	}
}

func TestPersistedConfigurationChecked(t *testing.T) {
	cfg := Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}}
	for name, st := range map[string]GroupState{
		"unsorted":        {Group: "g", Term: 2, ConfTerm: 2, ConfIndex: 3, Members: []string{"b", "a"}},
		"empty":           {Group: "g", Term: 2, ConfTerm: 2, ConfIndex: 3},
		"term beyond max": {Group: "g", Term: 2, ConfTerm: MaxTerm + 1, ConfIndex: 3, Members: []string{"a", "b"}},
		"bad name":        {Group: "g", Term: 2, ConfTerm: 2, ConfIndex: 3, Members: []string{"a b"}},
	} {
		var out Output
		if err := NewEngine().Join(GroupSpec{Config: cfg, State: st}, 0, &out); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A change kept waiting by a new leader whose configuration is not yet
// committed may remove the very member whose ack commits it: the ack that
// proposes the removal must not then be counted for a member no longer in
// the configuration (it dereferenced a missing member: a panic the Go host
// and the module's trap recovery both hit).
func TestMembershipPendingRemovalOfTheCommittingAcker(t *testing.T) {
	for _, target := range []string{"b", "c"} {
		n := newTestNet(t, ModeQuorum, "a", "b", "c")
		old := electLeader(t, n)
		next := "a"
		if old == "a" {
			next = "b"
		}
		if target == next || target == old {
			continue
		}
		n.step(old, &Input{Now: n.now, Commands: []Command{{Kind: CmdTransfer, Group: "g", Target: next}}})
		for i := 0; i < 20 && n.status(next).Role != RoleLeader; i++ {
			n.deliverRound()
		}
		if s := n.status(next); s.Role != RoleLeader || s.ConfCommitted {
			t.Fatalf("%s after the transfer: %+v", next, s)
		}
		if evs := command(n, next, Command{Kind: CmdRemoveMember, Target: target}); len(evs) != 0 {
			t.Fatalf("remove %s: %+v", target, evs)
		}
		n.advance(1000, 10)
		want := slices.DeleteFunc([]string{"a", "b", "c"}, func(id string) bool { return id == target })
		if s := n.status(next); !slices.Equal(memberIDs(s), want) || !s.ConfCommitted {
			t.Fatalf("removing %s: leader %s has %+v", target, next, s)
		}
	}
}

// A leader hands leadership only to a member whose acks show it holds the
// leader's configuration: pushed votes skip the election restriction, so a
// successor behind it (here one that was down while a member was added)
// would re-stamp its older configuration and lose the committed one (the
// simulator's membership mix found it, with a leader removing itself).
func TestMembershipHandoffOnlyToUpToDateMember(t *testing.T) {
	n := newTestNet(t, ModeQuorum, "a", "b", "c")
	leader := electLeader(t, n)
	behind := "a"
	if leader == behind {
		behind = "b"
	}
	n.crash(behind)
	joinAwaiting(n, "d")
	command(n, leader, Command{Kind: CmdAddMember, Target: "d"})
	n.advance(1000, 10)
	if s := n.status(leader); !s.ConfCommitted || !slices.Contains(memberIDs(s), "d") {
		t.Fatalf("d not added: %+v", s)
	}
	// The member that was down comes back and acks a heartbeat with its
	// older configuration; the leader is told to hand over to it before it
	// sent it the newer one.
	n.start(behind)
	for i := 0; n.status(behind).Leader != leader && i < 100; i++ {
		n.advance(10, 10)
	}
	if s := n.status(behind); s.Leader != leader || s.ConfIndex >= n.status(leader).ConfIndex {
		t.Fatalf("%s: %+v", behind, s)
	}
	n.take()
	n.step(leader, &Input{Now: n.now, Commands: []Command{{Kind: CmdTransfer, Group: "g", Target: behind}}})
	if out := n.take(); !strings.Contains(out, "rejected") {
		t.Errorf("transfer to %s, behind the leader's configuration, not refused:\n%s", behind, out)
	}
	n.deliverAll()
	n.advance(5000, 10)
	ls := n.leaders()
	if len(ls) != 1 {
		t.Fatalf("leaders %v", ls)
	}
	id, _, _ := strings.Cut(ls[0], "@")
	if s := n.status(id); !slices.Contains(memberIDs(s), "d") {
		t.Fatalf("%s leads without the committed addition of d: %+v", id, s)
	}
}

// A heartbeat announcing a configuration may overtake the configuration on
// the bus; the follower acks it with the older version, and acks it again
// once the configuration arrives, so that the leader does not wait a
// heartbeat to learn it holds it (a hand-off goes only to such a member).
func TestMembershipConfigAfterItsHeartbeatIsAcked(t *testing.T) {
	n := newTestNet(t, ModeQuorum, "a", "b", "c")
	leader := electLeader(t, n)
	joinAwaiting(n, "d")
	n.queue = nil
	n.step(leader, &Input{Now: n.now, Commands: []Command{{Kind: CmdAddMember, Group: "g", Target: "d"}}})
	var conf, hb Message
	follower := ""
	for _, q := range n.queue {
		if q.to == "d" || follower != "" && q.to != follower {
			continue
		}
		follower = q.to
		if strings.Contains(string(q.msg.Payload), `"type":"config"`) {
			conf = q.msg
		} else {
			hb = q.msg
		}
	}
	n.queue = nil
	acks := func(in Message) []string {
		var out Output
		n.nodes[follower].Step(&Input{Now: n.now, Inbound: []Message{in}}, &out)
		var a []string
		for _, p := range out.Publishes {
			if strings.Contains(string(p.Payload), `"type":"ack"`) {
				a = append(a, string(p.Payload))
			}
		}
		return a
	}
	first := acks(hb)
	second := acks(conf)
	if len(first) != 1 || !strings.Contains(first[0], `"conf_index":1}`) || len(second) != 1 || !strings.Contains(second[0], `"conf_index":2}`) {
		t.Fatalf("heartbeat acked with %q, then its configuration with %q", first, second)
	}
}

// A node whose configuration is out of date may not list the current
// leader: here a spare that learnt a removal, was down while the removed
// member came back and took over, and is then added by it. It must still
// take a strictly newer configuration from that leader, or it never learns
// it is a member (the simulator's membership mix: a spare refused every
// message of its leader for the whole quiet phase).
func TestMembershipNewerConfigurationFromOutsideOwn(t *testing.T) {
	n := newTestNet(t, ModeQuorum, "a", "b", "c")
	n.cfgHook = func(c *Config) { c.NoPriorityTransfer = true } // the leader stays put
	restartAll(n)
	leader := electLeader(t, n)
	back := "a"
	if leader == back {
		back = "b"
	}
	joinAwaiting(n, "s")
	command(n, leader, Command{Kind: CmdRemoveMember, Target: back})
	n.advance(1000, 10)
	if s := n.status("s"); slices.Contains(memberIDs(s), back) {
		t.Fatalf("s did not learn %s's removal: %+v", back, s)
	}
	n.crash("s")
	command(n, leader, Command{Kind: CmdAddMember, Target: back})
	n.advance(2000, 10)
	n.step(leader, &Input{Now: n.now, Commands: []Command{{Kind: CmdTransfer, Group: "g", Target: back}}})
	n.advance(2000, 10)
	if s := n.status(back); s.Role != RoleLeader {
		t.Fatalf("%s did not take over: %+v", back, s)
	}
	n.start("s")
	command(n, back, Command{Kind: CmdAddMember, Target: "s"})
	n.advance(3000, 10)
	if s := n.status("s"); s.Leader != back || !s.Voter || !slices.Contains(memberIDs(s), back) {
		t.Fatalf("s: %+v", s)
	}
}

// A member that missed its own addition does not know it votes. When the
// leader then fails and its vote is needed (here s, added to a, b, c, with
// the old leader gone), it answers the pre-votes of a candidate with a
// newer configuration by naming its own, and the candidate sends it its
// configuration; otherwise no majority ever forms (the simulator's
// membership mix: two candidates splitting every term for the whole quiet
// phase while the third vote never came).
func TestMembershipMemberThatMissedItsAdditionVotes(t *testing.T) {
	n := newTestNet(t, ModeQuorum, "a", "b", "c")
	leader := electLeader(t, n)
	joinAwaiting(n, "s")
	n.cut[[2]string{leader, "s"}] = true
	n.step(leader, &Input{Now: n.now, Commands: []Command{{Kind: CmdAddMember, Group: "g", Target: "s"}}})
	n.advance(2000, 10)
	if s := n.status(leader); !s.ConfCommitted || !slices.Contains(memberIDs(s), "s") {
		t.Fatalf("s not added: %+v", s)
	}
	if s := n.status("s"); s.Voter {
		t.Fatalf("s learnt of its addition: %+v", s)
	}
	n.crash(leader)
	n.advance(15000, 10)
	if ls := n.leaders(); len(ls) != 1 || !n.status("s").Voter {
		t.Fatalf("leaders %v after %s's crash; s: %+v", ls, leader, n.status("s"))
	}
}

// A spare whose configuration lists neither itself nor the current leader
// (it learnt the group before it was added, and was away while it was added
// and leadership moved to a member added after it) must still learn the
// leader's configuration. It refused that leader's heartbeats as from a
// non-member and never acked, and a leader sends its committed
// configuration only to a member whose ack shows it behind: it never
// learnt it was a member (the simulator's membership mix, seed 538 of
// electhost sim --membership). It now follows and acks a leader outside its
// configuration whose heartbeat announces a newer one, and the ack brings
// it the configuration. With ed25519 that leader's messages do not even
// verify (the spare holds no key for it): the spare asks a member it lists,
// whose ack to that leader shows a newer configuration, to send it.
func TestMembershipSpareHearsLeaderOutsideItsConfiguration(t *testing.T) {
	for _, auth := range []AuthMode{AuthOff, AuthEd25519} {
		t.Run(string(auth), func(t *testing.T) {
			n := newTestNet(t, ModeQuorum, "a", "b", "c")
			ids := slices.Clone(n.ids)
			n.cfgHook = func(c *Config) {
				authConfig(c, auth, ids)
				c.NoPriorityTransfer = true // the leader moves only when told
			}
			restartAll(n)
			leader := electLeader(t, n)
			joinAwaiting(n, "d")
			joinAwaiting(n, "s")
			n.advance(1000, 10)
			// (With ed25519 the leader cannot verify an outsider's ack, so s
			// keeps the members it started with, at version 0: the same.)
			if s := n.status("s"); (s.ConfIndex == 0) != (auth == AuthEd25519) || !slices.Equal(memberIDs(s), []string{"a", "b", "c"}) {
				t.Fatalf("s did not learn the configuration: %+v", s)
			}
			for _, id := range n.ids {
				n.cut[[2]string{id, "s"}], n.cut[[2]string{"s", id}] = true, true
			}
			key := func(id string) []byte {
				if auth != AuthEd25519 {
					return nil
				}
				return testPriv(id).Public().(ed25519.PublicKey)
			}
			for _, c := range []Command{{Kind: CmdAddMember, Target: "d", Key: key("d")}, {Kind: CmdAddMember, Target: "s", Key: key("s")}, {Kind: CmdTransfer, Target: "d"}} {
				c.Group = "g"
				n.step(leader, &Input{Now: n.now, Commands: []Command{c}})
				n.advance(1000, 10)
			}
			if s := n.status("d"); s.Role != RoleLeader || !s.ConfCommitted || !slices.Contains(memberIDs(s), "s") {
				t.Fatalf("d did not take over with s added: %+v", s)
			}
			clear(n.cut)
			n.advance(5000, 10)
			if s := n.status("s"); s.Leader != "d" || !s.Voter || !slices.Contains(memberIDs(s), "d") {
				t.Fatalf("s, 5 s after the heal: %+v", s)
			}
		})
	}
}

// A member added while it was down, whose vote is then needed, answers a
// candidate outside its configuration (Raft thesis §4.2.1), as
// membership_readded_while_down.txt shows without authentication: n3,
// down since it learnt the first configuration, is added, then every
// member it lists is removed and leadership ends with n4, which needs n3's
// vote; n3 comes back listing neither itself nor n4. With ed25519 it holds
// no key for n4 either, so n4's requests do not even verify: it asks the
// members it lists, which may all have been removed, for their
// configuration.
func TestMembershipReaddedWhileDownVotes(t *testing.T) {
	for _, auth := range []AuthMode{AuthOff, AuthEd25519} {
		t.Run(string(auth), func(t *testing.T) {
			n := newTestNet(t, ModeQuorum, "n0", "n1", "n2")
			ids := slices.Clone(n.ids)
			n.cfgHook = func(c *Config) { authConfig(c, auth, ids) }
			restartAll(n)
			leader := electLeader(t, n)
			joinAwaiting(n, "n3")
			joinAwaiting(n, "n4")
			n.advance(1000, 10)
			n.crash("n3")
			key := func(id string) []byte {
				if auth != AuthEd25519 {
					return nil
				}
				return testPriv(id).Public().(ed25519.PublicKey)
			}
			steps := []Command{{Kind: CmdAddMember, Target: "n3", Key: key("n3")}, {Kind: CmdAddMember, Target: "n4", Key: key("n4")}}
			for _, id := range ids {
				if id != leader {
					steps = append(steps, Command{Kind: CmdRemoveMember, Target: id})
				}
			}
			steps = append(steps, Command{Kind: CmdRemoveMember, Target: leader})
			for _, c := range steps {
				c.Group = "g"
				n.step(leader, &Input{Now: n.now, Commands: []Command{c}})
				n.advance(1000, 10)
			}
			if s := n.status("n4"); !slices.Equal(memberIDs(s), []string{"n3", "n4"}) || s.ConfCommitted {
				t.Fatalf("n4 after the changes: %+v", s)
			}
			n.advance(5000, 10) // n4's lease lapses: n3's vote is needed
			n.start("n3")
			n.advance(8000, 10)
			if ls := n.leaders(); len(ls) != 1 {
				t.Fatalf("leaders %v 8 s after n3 came back; n3: %+v; n4: %+v", ls, n.status("n3"), n.status("n4"))
			}
		})
	}
}

// A member may vote for a candidate outside its configuration (one added
// since, with a newer configuration: TestMembershipReaddedWhileDownVotes),
// and must rejoin with that vote persisted: the join once refused a vote
// for anyone outside Config.Members (electhost sim --targeted seed 8999: a
// member that never learnt a configuration voted for the spare s0, then
// could not restart).
func TestJoinKeepsVoteForCandidateOutsideConfiguration(t *testing.T) {
	e := NewEngine()
	var out Output
	c := Config{ID: "a", Group: "g", Mode: ModeQuorum, Members: []string{"a", "b", "c"}}
	e.Step(&Input{Now: 1000, Join: []GroupSpec{{Config: c, State: GroupState{Group: "g", Term: 2, Vote: "s0"}}}}, &out)
	for _, ev := range out.Events {
		if ev.Kind == EventRejected {
			t.Fatalf("join refused: %s", ev.Reason)
		}
	}
	if s, ok := e.Status("g"); !ok || s.Term != 2 || s.Vote != "s0" {
		t.Fatalf("after the join: %+v", s)
	}
}

// One forged configuration (authentication off) in the leader's name and
// term, at the largest index, stalled every change: its holders took no
// version of the leader's again, so the configuration never committed,
// `members add` answered "another change is waiting" forever and no
// hand-off could name a successor. Now the leader whose followers ack a
// newer version of its own term than its own steps down, the next
// leader's re-stamp restarts the index in its term, and a change commits
// and a hand-off makes its successor leader within a few election timeouts.
func TestForgedConfigIndexCannotStallChanges(t *testing.T) {
	n := newTestNet(t, ModeQuorum, "a", "b", "c")
	l := electLeader(t, n)
	st := n.status(l)
	forged := `{"type":"config","group":"g","from":"` + l + `","conf_term":` + uitoa(st.ConfTerm) + `,"conf_index":` + uitoa(MaxTerm) + `,"members":["a","b","c"]}`
	for _, id := range n.others(l) {
		n.step(id, &Input{Now: n.now, Inbound: []Message{{Topic: Topic("g"), Payload: []byte(forged)}}})
		if s := n.status(id); s.ConfIndex != MaxTerm {
			t.Fatalf("%s did not take the forged version: %+v", id, s)
		}
	}
	forgedAt := n.now
	leader := func() string {
		if ls := n.leaders(); len(ls) == 1 {
			id, _, _ := strings.Cut(ls[0], "@")
			if n.status(id).ConfCommitted {
				return id
			}
		}
		return ""
	}
	added := func() bool {
		l := leader()
		return l != "" && slices.Contains(memberIDs(n.status(l)), "d") && n.status(l).ConfCommitted
	}
	for n.now < forgedAt+5*DefaultElectionTimeoutMs && !added() {
		n.advance(100, 10)
		if l := leader(); l != "" && !slices.Contains(memberIDs(n.status(l)), "d") {
			command(n, l, Command{Kind: CmdAddMember, Target: "d"})
		}
	}
	if !added() {
		t.Fatalf("no change committed %d ms after a forged configuration at index 2^53−1: leaders %v, %+v", n.now-forgedAt, n.leaders(), n.status("a"))
	}
	committedAt := n.now
	from := leader()
	rejected := n.status(from).Rejected
	n.step(from, &Input{Now: n.now, Commands: []Command{{Kind: CmdResign, Group: "g"}}})
	if s := n.status(from); s.Rejected != rejected || s.Role == RoleLeader {
		t.Fatalf("resign at %s refused: %+v", from, s)
	}
	for n.now < committedAt+DefaultElectionTimeoutMs && (leader() == "" || leader() == from) {
		n.advance(10, 1)
	}
	to := leader()
	if to == "" || to == from {
		t.Fatalf("no successor led %d ms after %s resigned: leaders %v", n.now-committedAt, from, n.leaders())
	}
	t.Logf("d added and committed %d ms after the forged configuration; %s handed over to %s in %d ms", committedAt-forgedAt, from, to, n.now-committedAt)
}

// A re-stamp never writes an index beyond the bound: near it, a new term's
// restarts at 1 (the term orders it); a version of the leader's own term at
// the bound (forged, adopted before a hand-off made it leader) stays.
func TestRestampStaysWithinTheBound(t *testing.T) {
	cfg := Config{Group: "g", ID: "a", Mode: ModeQuorum, Members: []string{"a", "b", "c"}}
	for _, tc := range []struct {
		term, confTerm, confIndex, want uint64
	}{
		{5, 4, 7, 8},
		{5, 4, MaxTerm - 1<<32 - 1, MaxTerm - 1<<32},
		{5, 4, MaxTerm - 1<<32, 1},
		{5, 4, MaxTerm, 1},
		{5, 5, MaxTerm - 1, MaxTerm},
		{5, 5, MaxTerm, MaxTerm},
	} {
		g := newGroup(cfg, GroupState{Term: tc.term, ConfTerm: tc.confTerm, ConfIndex: tc.confIndex, Members: cfg.Members}, 0)
		g.restamp()
		if g.conf.ver != (confVersion{tc.term, tc.want}) {
			t.Errorf("term %d, version (%d, %d): re-stamped (%d, %d), want (%d, %d)", tc.term, tc.confTerm, tc.confIndex, g.conf.ver.term, g.conf.ver.index, tc.term, tc.want)
		}
	}
}
