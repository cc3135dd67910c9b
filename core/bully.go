package core

// Bully mode: the seed skill's priority election (Garcia-Molina, "Elections
// in a Distributed Computing System", 1982) over a pub/sub bus, with terms.
// A candidate announces itself and, unless it hears a better candidate or a
// live leader within CollectMs, declares victory. Claims are ordered by
// (term, priority, id); when two leaders meet (a healed partition), the lesser
// steps down on the first heartbeat it hears from the greater, and the greater
// answers any lesser claim at once, so one leader remains within one
// heartbeat interval of the heal. There are no votes, hence no safety across
// a partition: that is what quorum mode is for.

func (g *group) tickBully(e *Engine) {
	now := e.now
	switch {
	case g.role == RoleLeader:
		g.heartbeat(e, typeHeartbeat)
	case g.role == RoleCandidate && now >= g.collectEnd:
		g.becomeLeaderBully(e, g.claimTerm)
	case now >= g.electionDeadline:
		g.campaignBully(e)
	}
}

func (g *group) campaignBully(e *Engine) {
	if g.term >= MaxTerm {
		g.resetElectionTimer(e.now)
		g.termSpent(e)
		return // the term space is spent (terms never wrap)
	}
	g.elections++
	g.setTerm(g.term + 1)
	g.role = RoleCandidate
	g.setLeader(e, "", 0)
	g.collectEnd = e.now + g.cfg.CollectMs
	g.claimTerm = g.term
	g.resetElectionTimer(e.now)
	g.sendElection(e, g.term, false)
}

// becomeLeaderBully claims term, which is the term this agent campaigned for
// (or was handed), never one merely heard: while collecting, a lesser
// candidate's election can raise our term to the one that candidate itself
// will claim if it misses our election, and two leaders of one term on a
// connected network is what the simulator caught (seed 5 of the bully fault
// mix). The lesser candidate hears our election within its own collect
// window and defers, so our claim of the term we announced is the only one.
func (g *group) becomeLeaderBully(e *Engine, term uint64) {
	g.role = RoleLeader
	e.event(Event{Kind: EventBecameLeader, Group: g.cfg.Group, Term: term, Leader: g.cfg.ID})
	g.setLeader(e, g.cfg.ID, term)
	g.announceValue(e)
	g.heartbeat(e, typeLeader)
}

// claimBeats orders leadership claims: higher term, then priority, then id.
func claimBeats(t1 uint64, p1 uint32, id1 string, t2 uint64, p2 uint32, id2 string) bool {
	if t1 != t2 {
		return t1 > t2
	}
	return outranks(p1, id1, p2, id2)
}

func (g *group) stepBully(e *Engine, m *wireMsg) string {
	if m.Type == typeVote || m.Type == typeAck {
		return m.Type + " is not used in bully mode"
	}
	sender := g.heard(m.From, m.Priority, e.now)
	if sender == nil {
		return "sender " + m.From + " is not a member"
	}
	if reason := g.implausibleTerm(m, e.now); reason != "" {
		return reason
	}
	switch m.Type {
	case typeElection:
		g.onCandidacy(e, m, sender)
	case typeLeader, typeHeartbeat:
		g.onClaim(e, m, sender)
	case typeResign:
		g.onResignBully(e, m)
	}
	return ""
}

func (g *group) onCandidacy(e *Engine, m *wireMsg, c *member) {
	now := e.now
	g.setTerm(m.Term)
	better := outranks(c.priority, c.id, g.cfg.Priority, g.cfg.ID)
	switch {
	case g.role == RoleLeader:
		g.heartbeat(e, typeHeartbeat) // a live leader answers at once
	case better && g.role != RoleLeader:
		// Defer: its victory should follow. Deferring counts as contact, so
		// that we neither campaign nor bully a lesser candidate while the
		// better one collects; otherwise our candidacy raises the better
		// one's term mid-collection and two claims of one term follow.
		g.role = RoleFollower
		g.lastLeaderContact = now
		g.resetElectionTimer(now)
	case g.role == RoleFollower && now-g.lastLeaderContact >= g.cfg.ElectionTimeoutMs:
		g.campaignBully(e) // no live leader and we outrank it: bully it
	}
}

func (g *group) onClaim(e *Engine, m *wireMsg, l *member) {
	now := e.now
	g.setTerm(m.Term)
	switch g.role {
	case RoleLeader:
		if !claimBeats(m.Term, l.priority, l.id, g.leaderTerm, g.cfg.Priority, g.cfg.ID) {
			g.heartbeat(e, typeHeartbeat) // assert: the lesser leader steps down
			return
		}
		g.stepDown(e, "a greater leader "+l.id+" claims term "+uitoa(m.Term))
	case RoleFollower:
		// Keep a leader we heard claim within an election timeout: its own
		// claim, not any contact (deferring to a candidate also counts as
		// contact), or a follower clings to a leader long gone while better
		// candidates come and go (the simulator's bully seed 102294).
		keep := g.leader != "" && g.leader != l.id && now-g.leaderHeard < g.cfg.ElectionTimeoutMs &&
			!claimBeats(m.Term, l.priority, l.id, g.leaderTerm, g.leaderPrio, g.leader)
		if keep {
			return // our live leader outranks this claim and will assert itself
		}
	}
	g.role = RoleFollower
	g.setLeader(e, l.id, m.Term)
	g.learnValue(e, m)
	g.leaderPrio = l.priority
	g.lastLeaderContact, g.leaderHeard = now, now
	g.resetElectionTimer(now)
}

func (g *group) onResignBully(e *Engine, m *wireMsg) {
	now := e.now
	if m.Leader != g.leader {
		return
	}
	g.setLeader(e, "", 0)
	g.role = RoleFollower
	switch m.To {
	case g.cfg.ID:
		if max(g.term, m.Term) >= MaxTerm {
			return
		}
		g.setTerm(max(g.term, m.Term) + 1)
		g.becomeLeaderBully(e, g.term)
	case "":
		g.lastLeaderContact = now - g.cfg.ElectionTimeoutMs
		g.resetElectionTimer(now - g.cfg.ElectionTimeoutMs) // campaign at once, best first
	default:
		// The successor announces itself within a message delay. Bully
		// followers never speak, so the leader named the best member it ever
		// heard, which may be gone: wait two collect windows for its claim,
		// not a whole election timeout, then campaign, best first.
		wait := 2 * g.cfg.CollectMs
		g.lastLeaderContact = now - g.cfg.ElectionTimeoutMs + wait
		g.resetElectionTimer(g.lastLeaderContact)
	}
}
