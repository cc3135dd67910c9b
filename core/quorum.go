package core

import "slices"

// Quorum mode: Raft's leader election (Ongaro & Ousterhout, "In Search of an
// Understandable Consensus Algorithm", §5.2) without a log, with PreVote and
// CheckQuorum (Ongaro's thesis, §9.6), leadership transfer (thesis §3.10) and
// a leader lease (thesis §6.4.1) shortened by the clock-drift bound.

// tick handles a due timer of either mode.
func (g *group) tick(e *Engine) {
	now := e.now
	if g.cfg.Mode == ModeBully {
		g.tickBully(e)
		return
	}
	switch {
	case g.leaseOver(now):
		// CheckQuorum: no majority acknowledged us within the lease.
		g.stepDown(e, "lease expired: lost contact with a majority")
		g.resetElectionTimer(now)
	case g.role == RoleLeader:
		g.heartbeat(e, typeHeartbeat)
		g.transferToBetter(e)
	case now >= g.electionDeadline:
		g.missedLeader()
		g.preCampaign(e)
	}
}

// leaseOver reports a quorum leader whose lease (or, before its first, the
// time CheckQuorum allows it) has ended: it must step down before it acts.
func (g *group) leaseOver(now int64) bool {
	return g.cfg.Mode == ModeQuorum && g.role == RoleLeader && now >= g.stepDownAt
}

// heartbeatDue reports a quorum leader whose tick now sends a heartbeat.
func (g *group) heartbeatDue(now int64) bool {
	return g.cfg.Mode == ModeQuorum && g.role == RoleLeader && !g.leaseOver(now) && now >= g.heartbeatAt
}

// campaignNow answers CmdCampaign.
func (g *group) campaignNow(e *Engine) string {
	if g.role == RoleLeader {
		return "already leader"
	}
	if !g.voter {
		return "not a member of the configuration"
	}
	if g.drained {
		return "drained: undrain it first"
	}
	if g.cfg.Mode == ModeBully {
		g.campaignBully(e)
		return ""
	}
	if g.inLease(e.now) {
		// Our own vote is a vote like any other: within an election timeout
		// of acknowledging a leader (or voting) we must not give it, even to
		// ourselves, or we help cut short a lease we vouched for. The
		// simulator caught exactly that (quorum fault mix, seed 1127: a
		// follower told to campaign 0.6 s after acking the leader won with
		// one other vote while the leader's lease still ran). So the
		// campaign waits for the first instant it is safe; a leader heard
		// meanwhile cancels it, as it resets the timer.
		g.electionDeadline = min(g.electionDeadline, g.lastLeaderContact+g.cfg.ElectionTimeoutMs)
		return ""
	}
	g.preCampaign(e)
	return ""
}

// preCampaign asks for pre-votes for term+1 without changing any state, so a
// member cut off from the others cannot raise the term and disrupt a healthy
// leader when it comes back (thesis §9.6).
func (g *group) preCampaign(e *Engine) {
	if g.term >= MaxTerm || !g.voter || g.drained {
		g.resetElectionTimer(e.now)
		g.termSpent(e)
		return // the term space is spent (terms never wrap), or not a member: no election
	}
	g.elections++
	g.role = RolePreCandidate
	g.votes = append(g.votes[:0], g.cfg.ID)
	g.resetElectionTimer(e.now)
	if len(g.votes) >= g.majority() {
		g.campaign(e)
		return
	}
	g.sendElection(e, g.term+1, true)
}

// campaign starts a real election for term+1 (§5.2). Our own vote is a vote
// like any other: within an election timeout of hearing a leader or granting
// a vote we must not give it, even to ourselves, or we help cut short a lease
// we vouched for. Every path here checks it, not only CmdCampaign: a
// pre-candidate that grants another's vote and then completes its own
// pre-vote in the same batch overlapped two leases.
func (g *group) campaign(e *Engine) {
	if g.inLease(e.now) || g.term >= MaxTerm || !g.voter || g.drained {
		g.role = RoleFollower
		g.votes = g.votes[:0]
		return
	}
	g.setTerm(g.term + 1)
	g.vote, g.dirty = g.cfg.ID, true
	g.role = RoleCandidate
	g.votes = append(g.votes[:0], g.cfg.ID)
	g.campaignAt, g.handoff, g.leaseNotBefore = e.now, false, 0
	g.setLeader(e, "", 0)
	g.resetElectionTimer(e.now)
	if len(g.votes) >= g.majority() {
		g.becomeLeader(e)
		return
	}
	g.sendElection(e, g.term, false)
}

func (g *group) sendElection(e *Engine, term uint64, pre bool) {
	e.enc.begin(typeElection, g)
	e.enc.str("candidate", g.cfg.ID)
	e.enc.num("priority", uint64(g.prio))
	e.enc.num("term", term)
	if pre {
		e.enc.flag("pre")
	}
	g.encodeConfVersion(e)
	e.publish(g, e.enc.end())
}

// encodeConfVersion adds this member's configuration version, once it has one.
func (g *group) encodeConfVersion(e *Engine) {
	if g.conf.ver.index > 0 {
		e.enc.num("conf_term", g.conf.ver.term)
		e.enc.num("conf_index", g.conf.ver.index)
	}
}

// becomeLeader takes leadership of the current term. Its first event is
// became-leader, then leader-changed naming this agent (see Event).
//
// The votes grant a lease from campaignAt only if every one of them answered
// our request (it was cast after the request left, and its voter grants
// nothing else for an election timeout) and more of that lease remains than
// the vote round took. A vote pushed by a resign was cast before we asked:
// counting it towards a lease from campaignAt overlapped another leader's
// lease. After a vote round longer than what remains, the first heartbeat's
// acks, a round trip away like the votes', would likely come after that
// lease ended: taking it would only start the application to stop it
// again. Otherwise the lease starts with the first heartbeat a majority
// acks.
//
// CheckQuorum counts from when a lease from a heartbeat may begin, never
// from the campaign: stepping down when the votes' lease ran out made every
// leader of a network whose round trip exceeds half the lease step down
// before its first acks could come back, and elect again, for ever. A leader
// whose votes' lease ends first keeps its term without a lease, acting on
// nothing, until a majority's acks give it one from that heartbeat's send.
func (g *group) becomeLeader(e *Engine) {
	g.role, g.ledTerm = RoleLeader, g.term
	g.lease, g.stepDownAt = 0, max(e.now, g.leaseNotBefore)+g.cfg.LeaseMs
	if l := g.campaignAt + g.cfg.LeaseMs; !g.handoff && l-e.now > e.now-g.campaignAt {
		g.lease = l
	}
	for i := range g.members {
		g.members[i].ackSeq = 0
	}
	g.sent = [ackWindow]sentHeartbeat{}
	g.restamp()
	e.event(Event{Kind: EventBecameLeader, Group: g.cfg.Group, Term: g.term, Leader: g.cfg.ID, LeaseUntil: g.lease})
	g.setLeader(e, g.cfg.ID, g.term)
	g.announceValue(e)
	g.heartbeat(e, typeLeader)
	g.checkCommit(e) // a group of one
	if g.leaseNotBefore > e.now {
		// The first heartbeat that can earn a lease leaves as soon as one
		// may begin, not a whole interval later.
		g.heartbeatAt = min(g.heartbeatAt, g.leaseNotBefore)
	}
}

// heartbeat announces or confirms leadership; followers ack its seq.
func (g *group) heartbeat(e *Engine, typ string) {
	g.seq++
	g.sent[g.seq%ackWindow] = sentHeartbeat{seq: g.seq, at: e.now}
	g.heartbeatAt = e.now + g.cfg.HeartbeatMs
	if g.cfg.Mode == ModeQuorum && (!g.confCommitted || g.confSend) {
		// Until a majority holds it, or for a member found behind: the
		// configuration first, so that the ack can report holding it.
		g.confSend = false
		g.sendConf(e)
	}
	e.enc.begin(typ, g)
	e.enc.str("leader", g.cfg.ID)
	e.enc.num("priority", uint64(g.prio))
	e.enc.num("term", g.leaderTerm)
	e.enc.num("seq", g.seq)
	g.encodeValue(e)
	e.enc.wall(typ, e.wall)
	if g.cfg.Mode == ModeQuorum {
		g.encodeConfVersion(e)
		if g.confCommitted {
			e.enc.flag("committed")
		}
	}
	e.publish(g, e.enc.end())
	if g.cfg.Mode == ModeQuorum && g.majority() == 1 {
		g.extendLease(e, g.sent[g.seq%ackWindow].at)
	}
}

func (g *group) extendLease(e *Engine, sentAt int64) {
	if sentAt < g.leaseNotBefore {
		return // the previous leader's application may still be acting
	}
	g.steady(sentAt) // a majority acked a heartbeat this late in our term
	if l := sentAt + g.cfg.LeaseMs; l > g.lease {
		g.lease, g.stepDownAt = l, l
		e.event(Event{Kind: EventLease, Group: g.cfg.Group, Term: g.term, Leader: g.cfg.ID, LeaseUntil: l})
	}
}

// stepDown leaves leadership (or candidacy) and reports it.
func (g *group) stepDown(e *Engine, reason string) {
	wasLeader := g.role == RoleLeader
	g.role = RoleFollower
	g.lease, g.stepDownAt = 0, 0
	g.pending = nil // a change not yet proposed dies with the leadership: the requester retries
	if wasLeader {
		e.event(Event{Kind: EventSteppedDown, Group: g.cfg.Group, Term: g.leaderTerm, Reason: reason})
		g.setLeader(e, "", 0)
	}
}

// enterTerm moves to the later term t as a follower that knows no leader
// yet: whoever sees a higher term reverts to follower (§5.1).
func (g *group) enterTerm(e *Engine, t uint64) {
	if g.role == RoleLeader {
		g.stepDown(e, "a higher term began")
	}
	g.setTerm(t)
	g.role = RoleFollower
	g.setLeader(e, "", 0)
}

// setLeader records the known leader and reports a change.
func (g *group) setLeader(e *Engine, id string, term uint64) {
	if id == g.leader && term == g.leaderTerm {
		return
	}
	// The same leader in a new term is a change too: the term is the fencing
	// token, and a follower must not keep acting on the old one.
	changed := id != g.leader || id != ""
	g.leader, g.leaderTerm, g.leaderSince = id, term, e.now
	if m := g.member(id); m != nil {
		g.leaderPrio = m.priority
	}
	if changed {
		if id == "" {
			term = g.term // no leader known: report the term we are in
		}
		e.event(Event{Kind: EventLeaderChanged, Group: g.cfg.Group, Term: term, Leader: id})
	}
}

// inLease reports whether this member still defers to a leader it heard
// (or voted for) less than an election timeout ago; it then refuses votes.
func (g *group) inLease(now int64) bool {
	return g.role == RoleLeader || now-g.lastLeaderContact < g.cfg.ElectionTimeoutMs
}

// stepQuorum handles one decoded message; it returns a rejection reason or "".
func (g *group) stepQuorum(e *Engine, m *wireMsg) string {
	now := e.now
	// Before heard: a refused message records no contact and no priority
	// (FuzzStep: a forged term far ahead set a member's priority to 0).
	if reason := g.implausibleTerm(m, now); reason != "" {
		return reason
	}
	sender := g.heard(m.From, m.Priority, now)
	if sender == nil {
		if m.Type == typeAck && m.Leader == g.cfg.ID && g.role == RoleLeader &&
			m.confVer().before(g.conf.ver) {
			g.confSend = true // a member removed while away learns it with the next heartbeat
		}
		if g.role == RoleLeader {
			// A leader takes no configuration but its own, follows nobody
			// and grants no vote while it leads: the exceptions below, for
			// a member that missed its own addition, are not for it. What
			// it drops is refused, and counted, like any outsider's.
			return "sender " + m.From + " is not a member"
		}
		newer := g.conf.ver.before(m.confVer())
		if m.Type == typeConfig && newer {
			// Every version was written by the leader of its term, so a newer
			// one is news from anyone: an out-of-date configuration may not
			// list the leader that added this member back.
			return g.onConfig(e, m)
		}
		if !newer || m.Type != typeHeartbeat && m.Type != typeLeader && m.Type != typeElection {
			return "sender " + m.From + " is not a member"
		}
		// A leader announcing a newer configuration than ours, which may
		// list us though ours lists neither us nor it: follow it and ack
		// (onHeartbeat), with the vote refusal an ack implies, so that its
		// leader sees us behind and sends its configuration. Refused, it
		// never would: it sends a committed one only to an acker behind.
		// Likewise a candidate with a newer configuration (thesis §4.2.1:
		// servers vote for candidates outside their configuration): it may
		// need our vote, as when we were added while down and every member
		// we list has been removed since. onVoteRequest answers as to a
		// member, by the same rules (the election restriction, no vote
		// while a leader is heard), and outside our configuration only
		// with our version, which brings us the candidate's. A removed
		// member holds an older version than the members that removed it,
		// so they still refuse it (thesis §4.2.3).
	}
	if m.Type == typeAck && g.role != RoleLeader && g.member(m.Leader) == nil && g.conf.ver.before(m.confVer()) {
		// A member acks, with a newer configuration than ours, a leader our
		// configuration does not list: with ed25519 we hold no key for it
		// and cannot verify its heartbeats (without, we ack them below).
		g.askConf(e, m.From, m.Term)
	}
	switch m.Type {
	case typeConfig:
		return g.onConfig(e, m)
	case typeChange:
		return g.onChange(e, m)
	case typeElection:
		return g.onVoteRequest(e, m)
	case typeVote:
		return g.onVote(e, m)
	case typeLeader, typeHeartbeat:
		return g.onHeartbeat(e, m)
	case typeAck:
		return g.onAck(e, m)
	case typeResign:
		return g.onResign(e, m)
	}
	return ""
}

func (g *group) onVoteRequest(e *Engine, m *wireMsg) string {
	now := e.now
	outdated := m.confVer().before(g.conf.ver)
	if outdated {
		g.offerConf(e) // it may not know it was removed, or whom to follow
	}
	if !g.voter {
		if m.Pre && g.conf.ver.before(m.confVer()) {
			// The candidate's newer configuration may list us (an addition
			// we missed) and need our vote: name ours, and it sends its own.
			g.sendVote(e, m.Candidate, m.Term, true, false)
		}
		return "" // outside the configuration: no candidate counts this vote
	}
	if m.Pre {
		grant := m.Term > g.term && !g.inLease(now) && !outdated
		g.sendVote(e, m.Candidate, m.Term, true, grant)
		if c := g.member(m.Candidate); grant && c != nil && g.role == RolePreCandidate && m.Term == g.term+1 &&
			outranks(c.priority, c.id, g.cfg.Priority, g.cfg.ID) {
			// Two members whose timers ran out within a message's delay
			// of each other grant each other's pre-vote, both campaign,
			// and split the vote: a round lost, an election timeout or
			// more. The lower-ranked one stands back; its timer, reset
			// when it asked, runs on should the other's round fail.
			g.role = RoleFollower
			g.votes = g.votes[:0]
		}
		return ""
	}
	if g.inLease(now) {
		return "" // a leader is alive: ignore without raising our term (§9.6)
	}
	if m.Term < g.term {
		g.sendVote(e, m.Candidate, g.term, false, false) // tell it our term
		return ""                                        // answered, not refused: the reply carries our term (§5.1)
	}
	if m.Term > g.term {
		g.enterTerm(e, m.Term)
	}
	// A candidate with an older configuration than ours may lack a
	// committed one (the election restriction, Raft §5.4.1).
	grant := (g.vote == "" || g.vote == m.Candidate) && !outdated
	if grant {
		// Granting defers to that candidate: a pre-candidate stops here, or
		// its own pre-vote could complete later in this batch and make it
		// vote for itself inside the window it just opened: two leases.
		g.vote, g.dirty = m.Candidate, true
		g.role = RoleFollower
		g.votes = g.votes[:0]
		g.lastLeaderContact = now
		g.resetElectionTimer(now)
	}
	g.sendVote(e, m.Candidate, g.term, false, grant)
	return ""
}

// sendVote answers a (pre-)vote request.
func (g *group) sendVote(e *Engine, candidate string, term uint64, pre, granted bool) {
	e.enc.begin(typeVote, g)
	e.enc.num("priority", uint64(g.prio))
	e.enc.str("candidate", candidate)
	e.enc.num("term", term)
	if pre {
		e.enc.flag("pre")
	}
	if granted {
		e.enc.flag("granted")
	}
	g.encodeConfVersion(e)
	e.publish(g, e.enc.end())
}

// sendPushedVote grants candidate our vote in term because its predecessor
// resigned to it: a vote nobody asked for, cast now, which carries the
// resigning leader's hold (see holdLease).
func (g *group) sendPushedVote(e *Engine, candidate string, term, hold uint64) {
	e.enc.begin(typeVote, g)
	e.enc.num("priority", uint64(g.prio))
	e.enc.str("candidate", candidate)
	e.enc.num("term", term)
	e.enc.flag("granted")
	e.enc.flag("handoff")
	e.enc.num("hold", hold) // even 0: a missing hold means the longest (heldFor)
	g.encodeConfVersion(e)
	e.publish(g, e.enc.end())
}

func (g *group) onVote(e *Engine, m *wireMsg) string {
	if m.Candidate != g.cfg.ID {
		// Someone else's vote. Its term says nothing we must act on, and
		// taking it would let one forged vote move every member to any term.
		return ""
	}
	if m.Pre && !m.Granted && m.confVer().before(g.conf.ver) {
		g.offerConf(e) // the voter is behind: it may not know it is a member
	}
	if m.Granted && g.conf.ver.before(m.confVer()) {
		// The voter holds a newer configuration than ours, which may be
		// committed: we must not lead. The election restriction, checked by
		// the candidate too: a vote pushed by a hand-off was not asked for.
		return ""
	}
	if !m.Pre && m.Term > g.term {
		switch {
		case !m.Granted && g.role == RoleCandidate:
			g.enterTerm(e, m.Term) // our voter is in a later term: ours is over (§5.1)
		case m.Granted && m.Handoff && m.Term == g.term+1 && !g.drained:
			// A leader handed over to us and its followers voted before its
			// resign reached us: the successor's term is the one after ours.
			g.enterTerm(e, m.Term)
			g.vote, g.dirty = g.cfg.ID, true
			g.startHandoffCandidacy(e, heldFor(m))
		default:
			return ""
		}
	}
	if !m.Granted {
		return ""
	}
	switch {
	case m.Pre && g.role == RolePreCandidate && m.Term == g.term+1:
		if g.addVote(m.From) {
			g.campaign(e)
		}
	case !m.Pre && g.role == RoleCandidate && m.Term == g.term:
		if m.Handoff {
			g.handoff = true // cast before our request: no lease from votes
			g.holdLease(e, heldFor(m))
		}
		if g.addVote(m.From) {
			g.becomeLeader(e)
		}
	}
	return ""
}

// addVote counts a vote once and reports whether it completes a majority.
func (g *group) addVote(id string) bool {
	if slices.Contains(g.votes, id) {
		return false // a duplicated message
	}
	g.votes = append(g.votes, id)
	return len(g.votes) == g.majority()
}

// startHandoffCandidacy makes this member a candidate in the current term,
// having voted for itself, without a campaign of its own: the votes come from
// the resigning leader's hand-off. No lease until the first acked heartbeat:
// those votes were cast before anything of ours was sent.
func (g *group) startHandoffCandidacy(e *Engine, hold uint64) {
	g.role = RoleCandidate
	g.votes = append(g.votes[:0], g.cfg.ID)
	g.handoff, g.leaseNotBefore = true, 0
	g.holdLease(e, hold)
	g.setLeader(e, "", 0)
	g.lastLeaderContact = e.now
	g.resetElectionTimer(e.now)
}

// holdLease takes no lease until the resigning leader's application, told
// to stop when it resigned, may still be acting for hold ms of its clock:
// that is at most hold/(1−ρ) real time after the resign left, and this
// clock counts at least (now-then)/(1+ρ) of real time since we heard of it.
func (g *group) holdLease(e *Engine, hold uint64) {
	if hold > 0 {
		g.leaseNotBefore = max(g.leaseNotBefore, e.now+g.holdWait(hold))
	}
}

// heldFor is the hold a resign or pushed vote asks its receiver to wait out
// (holdWait bounds it). A message without one — forged, or from an agent
// older than holds — gets the longest: one forged resign without a hold made
// its successor take a lease, and start its command, 7 ms later while the
// leader it named as resigning ran another 337 ms. Every resign and pushed
// vote of ours carries it, 0 included.
func heldFor(m *wireMsg) uint64 {
	if !m.holdSet {
		return maxHold
	}
	return m.Hold
}

// maxHold is the largest hold on the wire (wirejson.go).
const maxHold = 1<<32 - 1

// holdWait is how long this clock waits out a hold of the resigning
// leader's clock (see holdLease).
//
// The hold comes off the wire, where anyone may have written it (with
// authentication off, one forged resign or pushed vote carrying 2^32−1 ms
// stopped elections, or every lease, for about 50 days), so it is bounded
// here by this member's own safe lease (MaxLeaseMs): the resigner's
// application must stop by the end of its lease whatever its hold, and its
// lease plus its hold is at most that (Config.HandoffHoldMs), so no honest
// hold is cut. That assumes, as the lease argument does, that the members
// share their election timeout and drift bound.
func (g *group) holdWait(hold uint64) int64 {
	hold = min(hold, uint64(MaxLeaseMs(g.cfg.ElectionTimeoutMs, g.cfg.MaxDriftPPM)))
	rho := g.cfg.MaxDriftPPM
	return (int64(hold)*(1_000_000+rho) + 1_000_000 - rho - 1) / (1_000_000 - rho)
}

func (g *group) onHeartbeat(e *Engine, m *wireMsg) string {
	now := e.now
	if m.Term < g.term {
		g.sendStaleReply(e, m.Leader) // tell the stale leader our term (§5.1)
		return ""                     // answered, not refused
	}
	if g.role == RoleLeader && m.Term == g.term {
		return "another leader claims my term" // impossible among honest members
	}
	if m.Term > g.term && g.leader != "" && m.Leader != g.leader && g.inLease(now) {
		// While we hear our leader (or lead), a claim of a later term by
		// someone else waits until that contact lapses, as a vote request
		// does (§9.6): a real new leader was elected by members that no
		// longer hear ours, so ours is about to go; a forged claim gains
		// nothing. With no leader known (a restart, a resign) we follow it.
		return ""
	}
	if m.Term > g.term {
		if g.role == RoleLeader {
			g.stepDown(e, "a higher term began")
		}
		g.setTerm(m.Term)
	}
	g.role = RoleFollower
	g.lastLeaderContact = now
	g.setLeader(e, m.Leader, m.Term)
	g.steady(now)
	g.learnValue(e, m)
	g.resetElectionTimer(now)
	g.followerCommitted(e, m)
	if g.voter || m.confVer() != g.conf.ver {
		// Outside the configuration, ack only to show being behind (the
		// leader then sends its configuration): the leader refuses the rest.
		g.sendAck(e, m.Leader, m.Term, m.Seq, m.Inc)
		g.lastAcked = ackedHeartbeat{m.Leader, m.Term, m.Seq, m.Inc, m.confVer()}
	}
	return ""
}

// sendAck acknowledges heartbeat seq of leader's incarnation inc in term:
// the leader counts it only for exactly that heartbeat.
func (g *group) sendAck(e *Engine, leader string, term, seq, leaderInc uint64) {
	e.enc.begin(typeAck, g)
	e.enc.num("priority", uint64(g.prio))
	e.enc.str("leader", leader)
	e.enc.num("term", term)
	e.enc.num("seq", seq)
	e.enc.num("leader_inc", leaderInc)
	g.encodeConfVersion(e)
	e.publish(g, e.enc.end())
}

// sendStaleReply tells a leader of an older term ours. It carries no seq
// and no incarnation, so no leader can take it for an ack: it once echoed
// the stale heartbeat's seq under our term, which a restarted leader of that
// term counted towards its lease: two leases.
func (g *group) sendStaleReply(e *Engine, leader string) {
	e.enc.begin(typeAck, g)
	e.enc.num("priority", uint64(g.prio))
	e.enc.str("leader", leader)
	e.enc.num("term", g.term)
	e.publish(g, e.enc.end())
}

func (g *group) onAck(e *Engine, m *wireMsg) string {
	if m.Leader != g.cfg.ID {
		if m.Seq == 0 && m.Leader == g.leader && m.Term > g.term {
			// A member's stale reply deposes our leader: follow it into
			// that term, as the leader does, or the member stays a term
			// ahead of us and deposes every leader we elect in ours (a
			// race of its pre-vote for term+2 with ours for term+1, lost
			// round after round: electhost sim --membership --adversary,
			// seed 1922). We still refuse votes while the lease we
			// acknowledged may run (inLease).
			g.enterTerm(e, m.Term)
		}
		return "" // addressed to another leader
	}
	if m.Term > g.term {
		g.enterTerm(e, m.Term)
		return ""
	}
	if g.role != RoleLeader || m.Term != g.term || m.LeaderInc != g.inc || m.Seq > g.seq || m.Seq == 0 {
		return ""
	}
	if g.conf.ver.before(m.confVer()) {
		// Only this leader writes versions of its term, and a member holding
		// a later term's has entered that term and acks no heartbeat of
		// ours: this version is forged (authentication off). Its holders
		// take no version of ours again, so this leader could never commit
		// a change nor hand over; the next leader's re-stamp supersedes it.
		g.stepDown(e, "a member holds a newer configuration than this leader's own")
		return ""
	}
	g.onConfAck(e, m)
	f := g.member(m.From)
	if f != nil && f.confVer.before(m.confVer()) {
		f.confVer = m.confVer()
	}
	if f == nil || m.Seq <= f.ackSeq { // nil: the ack committed a change that removed its sender
		return ""
	}
	// Count this member for every remembered heartbeat it now covers: a
	// member that heard seq s heard us after every earlier one was sent.
	from := f.ackSeq + 1
	if g.seq >= ackWindow && g.seq-ackWindow+1 > from {
		from = g.seq - ackWindow + 1
	}
	for s := from; s <= m.Seq; s++ {
		h := &g.sent[s%ackWindow]
		if h.seq != s {
			continue
		}
		h.acks++
		if h.acks+1 == g.majority() {
			g.extendLease(e, h.at)
		}
	}
	f.ackSeq = m.Seq
	return ""
}

// resign hands leadership to target, or to the best live member if target is
// "": this leader steps down, votes for the successor in the next term and
// says so to everyone, whose votes follow at once (thesis §3.10, with the
// votes pushed instead of requested to save a round trip).
//
// With remove, the successor removes this agent from the configuration once
// its own is committed (membership.go).
//
// With pin (an operator's transfer), the successor keeps leadership for as
// long as it leads: no priority hand-off moves it on (transferToBetter).
func (g *group) resign(e *Engine, target string, remove, pin bool) string {
	if g.role != RoleLeader {
		return "not the leader"
	}
	if g.term >= MaxTerm {
		return "the term space is spent"
	}
	if target == "" {
		target = g.bestSuccessor(e.now)
	} else if target == g.cfg.ID {
		return "already leader"
	} else if m := g.member(target); m == nil {
		return target + " is not a member"
	} else if g.cfg.Mode == ModeQuorum && m.confVer != g.conf.ver {
		// Pushed votes skip the election restriction: a successor without
		// this configuration could lose a committed one.
		return target + " has not acknowledged this leader's configuration yet: retry"
	}
	oldTerm := g.leaderTerm
	g.stepDown(e, "resigned")
	g.lastLeaderContact = e.now
	g.resetElectionTimer(e.now)
	if target != "" && g.cfg.Mode == ModeQuorum {
		g.setTerm(oldTerm + 1)
		g.vote, g.dirty = target, true
	}
	e.enc.begin(typeResign, g)
	e.enc.str("leader", g.cfg.ID)
	e.enc.num("term", oldTerm)
	if target != "" {
		e.enc.str("to", target)
	}
	if remove {
		e.enc.flag("remove")
	}
	if pin && target != "" {
		e.enc.flag("pin")
	}
	g.encodeConfVersion(e)
	e.enc.num("hold", uint64(g.cfg.HandoffHoldMs)) // even 0: a missing hold means the longest (heldFor)
	e.publish(g, e.enc.end())
	return ""
}

// drain answers CmdDrain and CmdUndrain (see CmdDrain). A candidate gives
// up its candidacy, as one that loses does.
func (g *group) drain(e *Engine, on bool) string {
	if g.cfg.Mode != ModeQuorum {
		return "bully mode has no hand-off: stop the agent instead"
	}
	g.drained, g.prio = on, g.cfg.Priority
	if on {
		g.prio = 0 // announced: no leader hands over to it
	}
	switch {
	case on && g.role == RoleLeader:
		g.resign(e, "", false, false)
	case on:
		g.role = RoleFollower
		g.votes = g.votes[:0]
	}
	return ""
}

func (g *group) onResign(e *Engine, m *wireMsg) string {
	now := e.now
	if m.Remove && m.To == g.cfg.ID && m.Term+1 == g.term {
		// Its followers' pushed votes came first: we are its successor
		// already (or about to be), and it asks to be removed.
		if g.role == RoleLeader {
			if reason := g.changeMembers(e, opRemove, m.From, nil); reason != "" {
				return "remove " + m.From + " (its hand-off): " + reason
			}
			return ""
		}
		g.removeOnLead, g.removeOnLeadTerm = m.From, g.term
	}
	if m.Pin && m.To == g.cfg.ID {
		g.pinTerm = m.Term + 1 // an operator's transfer: leadership stays here (transferToBetter)
	}
	if m.To == g.cfg.ID && m.Term+1 == g.ledTerm && g.role != RoleLeader {
		// The hand-off that made us leader of that term, late: we led it
		// and left it (our lease ran out). Taken, its old vote made us
		// lead that term again, as a stale leader beside a later term's.
		return ""
	}
	// This hand-off may have moved us into its successor's term before its
	// resign came: the successor through a pushed vote, anyone through a
	// member's stale reply to the resigning leader's last heartbeat. Such a
	// resign is not stale: without it the successor lacks our vote (or the
	// resigner's) and the hand-off is lost. Taken only while we know no
	// leader of that term and gave our vote to nobody else in it, and (but
	// by the successor, as below) from the leader we last acknowledged. A
	// vote we already gave the successor is sent again: its candidacy may
	// have restarted since it counted it.
	a := g.lastAcked
	late := m.Term+1 == g.term && m.To != "" && g.leader == "" && (g.vote == "" || g.vote == m.To) &&
		(m.To == g.cfg.ID || a.leader == m.From && a.term == m.Term)
	// A resign of our own term from a leader we have not heard yet (we
	// restarted, or voted and its first heartbeat is still on its way) is
	// taken: only that term's leader resigns it, and the vote it asks for
	// is in the next term, where we have cast none.
	other := g.leader != "" && m.Leader != g.leader
	if !late && (m.Term < g.term || m.Term == g.term && other && m.To != g.cfg.ID) {
		return "" // a stale leader's, or another leader's, resignation changes nothing
	}
	if m.Term > g.term && g.leader != "" && g.inLease(now) && m.To != g.cfg.ID || m.Term >= MaxTerm {
		return "" // as for a later leader's claim (onHeartbeat)
	}
	if f := g.member(m.From); f != nil {
		f.departed = true // no hand-off goes back to it until it is heard again
	}
	if g.role == RoleLeader {
		// Unreachable among honest members (a leader ignores a later term's
		// resign while it leads), but a leader leaves its role only through
		// stepDown, so that the application always hears it.
		g.stepDown(e, "a later term's leader resigned")
	}
	if m.Term > g.term {
		g.setTerm(m.Term)
	}
	candidate := late && g.role == RoleCandidate // counting votes for this term already
	if !candidate {
		g.role = RoleFollower
	}
	g.setLeader(e, "", 0)
	if m.To == "" || g.member(m.To) == nil || m.To == g.cfg.ID && (!g.voter || g.drained || g.conf.ver.before(m.confVer())) {
		// (A successor behind the leader's configuration must not lead,
		// nor a drained one: it takes the resign as one naming nobody.)
		// Free to vote once the resigning leader's application may have
		// stopped (at once without a hold): no successor waits it out.
		free := now - g.cfg.ElectionTimeoutMs + g.holdWait(heldFor(m))
		g.lastLeaderContact = free
		g.resetElectionTimer(free)
		return ""
	}
	next := m.Term + 1
	g.setTerm(next)
	if g.vote != "" && g.vote != m.To {
		return "" // already voted in the successor's term
	}
	g.vote, g.dirty = m.To, true
	if m.To == g.cfg.ID {
		if m.Remove {
			g.removeOnLead, g.removeOnLeadTerm = m.From, next
		}
		if candidate {
			g.handoff = true // the resigner's vote was cast before any request of ours
			g.holdLease(e, heldFor(m))
		} else {
			g.startHandoffCandidacy(e, heldFor(m))
		}
		if g.addVote(m.From) {
			g.becomeLeader(e)
		}
		return ""
	}
	g.lastLeaderContact = now
	g.resetElectionTimer(now)
	g.sendPushedVote(e, m.To, next, heldFor(m))
	return ""
}

// transferToBetter hands leadership to the best member when it outranks this
// leader and has been in steady contact for two election timeouts (ten after
// it resigned: heard): priority is a preference served by one graceful
// hand-off, never by churn, nor does it undo an operator's transfer (pinTerm)
// or resign. A drained
// leader hands over at once, to the best live member or, with none, to
// whoever the others elect.
func (g *group) transferToBetter(e *Engine) {
	if g.drained {
		g.resign(e, "", false, false)
		return
	}
	if g.cfg.NoPriorityTransfer || g.term == g.pinTerm {
		return
	}
	best := g.bestSuccessor(e.now)
	m := g.member(best)
	if m == nil || !outranks(m.priority, m.id, g.cfg.Priority, g.cfg.ID) ||
		e.now-m.aliveFrom < 2*g.cfg.ElectionTimeoutMs || m.ackSeq == 0 || m.ackSeq+2 < g.seq {
		return
	}
	g.resign(e, best, false, false)
}
