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
		g.becomeLeaderBully(e)
	case now >= g.electionDeadline:
		g.campaignBully(e)
	}
}

func (g *group) campaignBully(e *Engine) {
	g.elections++
	g.setTerm(g.term + 1)
	g.role = RoleCandidate
	g.setLeader(e, "", 0)
	g.collectEnd = e.now + g.cfg.CollectMs
	g.resetElectionTimer(e.now)
	g.sendElection(e, g.term, false)
}

func (g *group) becomeLeaderBully(e *Engine) {
	g.role = RoleLeader
	g.setLeader(e, g.cfg.ID, g.term)
	e.event(Event{Kind: EventBecameLeader, Group: g.cfg.Group, Term: g.term, Leader: g.cfg.ID})
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
	case g.role == RoleCandidate && better:
		g.role = RoleFollower // defer; its victory should follow
		g.resetElectionTimer(now)
	case g.role == RoleFollower && !better && now-g.lastLeaderContact >= g.cfg.ElectionTimeoutMs:
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
		keep := g.leader != "" && g.leader != l.id && now-g.lastLeaderContact < g.cfg.ElectionTimeoutMs &&
			!claimBeats(m.Term, l.priority, l.id, g.leaderTerm, g.leaderPrio, g.leader)
		if keep {
			return // our live leader outranks this claim and will assert itself
		}
	}
	g.role = RoleFollower
	g.setLeader(e, l.id, m.Term)
	g.leaderPrio = l.priority
	g.lastLeaderContact = now
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
		g.setTerm(max(g.term, m.Term) + 1)
		g.becomeLeaderBully(e)
	case "":
		g.lastLeaderContact = now - g.cfg.ElectionTimeoutMs
		g.resetElectionTimer(now - g.cfg.ElectionTimeoutMs) // campaign at once, best first
	default:
		g.lastLeaderContact = now
		g.resetElectionTimer(now) // the successor announces itself
	}
}
