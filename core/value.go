package core

// A leader value (etcd's Campaign value and Proclaim, a Consul lock's
// value): what a leader announces with its leadership, say the address
// where it serves. It rides on every leader and heartbeat message, so a
// member that joins or restarts late learns it from the next heartbeat, and
// a version (value_ver) orders it within the leader's term: messages may
// arrive out of order, and a heartbeat that left before a proclaim must not
// bring the old value back. A value belongs to one leader and term: a
// follower forgets it when its leader or term changes, and never reports a
// value of a term other than its leader's.
//
// (The go:noinline marks keep the wasm module small: inlined, each call
// site grew by a kilobyte.)

// valueState is the value a member last took: Leader's of Term, at Ver.
type valueState struct {
	leader    string
	term, ver uint64
	value     string
}

// currentValue reports the value of the leader g follows now (or leads), if
// known.
func (g *group) currentValue() (string, uint64) {
	s := &g.seen
	if g.leader == "" || s.leader != g.leader || s.term != g.leaderTerm {
		return "", 0
	}
	return s.value, s.ver
}

// announceValue starts this leader's value in its new term: version 1, if
// it has one.
//
//go:noinline
func (g *group) announceValue(e *Engine) {
	g.valueVer = 0
	if g.value != "" {
		g.valueVer = 1
		g.takeValue(e, g.cfg.ID, g.leaderTerm, g.valueVer, g.value)
	}
}

// learnValue takes the value a heartbeat carries, if it is newer than the
// one g holds for that leader and term. It is called only once g follows
// the heartbeat's leader in its term (setLeader).
//
//go:noinline
func (g *group) learnValue(e *Engine, m *wireMsg) {
	if m.ValueVer == 0 {
		return
	}
	if s := &g.seen; s.leader == m.Leader && s.term == m.Term && m.ValueVer <= s.ver {
		return // already held, or older: a late heartbeat
	}
	g.takeValue(e, m.Leader, m.Term, m.ValueVer, m.Value)
}

//go:noinline
func (g *group) takeValue(e *Engine, leader string, term, ver uint64, value string) {
	g.seen = valueState{leader: leader, term: term, ver: ver, value: value}
	e.event(Event{Kind: EventValue, Group: g.cfg.Group, Term: term, Leader: leader, Value: value})
}

// proclaim answers CmdProclaim: the new value, announced at once with the
// next version.
func (g *group) proclaim(e *Engine, value string) string {
	if err := CheckValue(value); err != nil {
		return err.Error()
	}
	if g.role != RoleLeader {
		return "not the leader"
	}
	if g.valueVer >= MaxTerm {
		return "value_ver is spent for this term: resign to start another"
	}
	g.value = value
	g.valueVer++
	g.takeValue(e, g.cfg.ID, g.leaderTerm, g.valueVer, value)
	g.heartbeat(e, typeHeartbeat)
	return ""
}

// encodeValue adds this leader's value to a leader or heartbeat message.
//
//go:noinline
func (g *group) encodeValue(e *Engine) {
	if g.valueVer > 0 {
		e.enc.num("value_ver", g.valueVer)
		e.enc.text("value", g.value)
	}
}
