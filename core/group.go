package core

import (
	"math/rand/v2"
	"slices"
	"strconv"
)

// group is one election: the state of this agent in it, shared by both modes.
type group struct {
	cfg   Config
	topic string

	// Persistent state (GroupState): the highest term seen and the vote cast
	// in it.
	term uint64
	vote string

	role   Role
	leader string // known leader of leaderTerm, "" if none
	// leaderTerm is the term the known leader leads. In quorum mode it equals
	// term whenever leader != ""; in bully mode a failed candidacy can leave
	// term ahead of the leader it follows.
	leaderTerm uint64
	leaderPrio uint32

	// members are sorted by id. Every message carries its sender's
	// priority, so custom priorities are known after one round.
	members []member

	// lastLeaderContact is when this agent last heard its leader or granted a
	// vote (a boot counts as contact). Within ElectionTimeoutMs of it, a
	// quorum member refuses (pre-)votes, which is what makes the lease safe.
	lastLeaderContact int64
	electionDeadline  int64 // follower/candidate: campaign at this time
	// unheard counts the election timeouts that ran out since this member
	// last followed or led a steady leader (at most maxBackoff): each
	// doubles the slots of the next campaign's timer (resetElectionTimer).
	// leaderSince is when it began to follow or lead the known leader's
	// term.
	unheard     uint8
	leaderSince int64

	// Candidate state.
	votes      []string // quorum: who granted this (pre-)campaign
	campaignAt int64    // when the vote requests went out
	handoff    bool     // candidate by a leader's hand-off: no vote requests, no lease from votes
	// leaseNotBefore: no lease from a heartbeat sent before this time (the
	// previous leader's application may still be stopping; HandoffHoldMs).
	leaseNotBefore int64
	collectEnd     int64  // bully: declare victory at this time
	claimTerm      uint64 // bully: the term this candidacy announced
	// leaderHeard is when the known leader last claimed leadership (bully).
	leaderHeard int64

	// Leader state.
	ledTerm     uint64 // the last term this agent led (this run): no hand-off makes it lead that term again
	heartbeatAt int64  // next heartbeat
	seq         uint64
	sent        [ackWindow]sentHeartbeat
	lease       int64 // quorum: the lease runs until this time
	stepDownAt  int64 // quorum: step down unless the lease is renewed by then

	dirty     bool  // term or vote changed in this batch
	termSince int64 // when a message last moved the term (or the join): implausibleTerm
	wake      int64
	heapIdx   int
	// Campaign admission (Engine.admit): flying while a campaign round this
	// engine admitted is under way, until flightEnd; waiting while its due
	// campaign waits in Engine.waiting for a free slot.
	flying, waiting bool
	flightEnd       int64

	rng rand.PCG

	elections, received, rejected, duplicates uint64
	selfDupAt                                 int64 // another process with our ID, last reported
	selfDupOnce                               bool

	// epoch counts this agent's joins of the group (GroupState.Epoch),
	// raised at every join; inc, drawn from it and the seed, tells this
	// incarnation's heartbeats from those of any earlier run, so that an
	// ack counts only for the heartbeat it answers.
	epoch, inc uint64
	auth       *groupAuth // nil with auth off

	// Membership (membership.go).
	conf             configuration
	voter            bool        // in conf (and not awaiting its first one): may campaign
	confWire         []byte      // conf's config message, encoded once
	confFits         bool        // confWire fits in one message
	confCommitted    bool        // a majority holds conf (leader: counted; follower: told)
	confAcked        []string    // leader: who acked conf in this term
	confSend         bool        // leader: send conf with the next heartbeat
	confOffered      int64       // when conf was last sent to an out-of-date member
	confAsked        int64       // when a member ahead was last asked for its conf (askConf)
	asks             int         // how many times (askUnverified picks the member in turn)
	committedMembers []string    // the member set last reported committed
	pending          *confChange // leader: proposed once conf commits
	removeOnLead     string      // a leader that resigned to us asked to be removed…
	removeOnLeadTerm uint64      // …if we lead this term, the hand-off's
	// drained (CmdDrain): never campaign nor take a hand-off, announce
	// priority 0 so that no leader picks this member, and hand over at once
	// when leading. prio is the priority announced: cfg.Priority, or 0.
	drained bool
	prio    uint32
	// pinTerm: an operator's transfer handed us leadership of this term,
	// which no priority hand-off gives away (transferToBetter).
	pinTerm uint64
	// lastAcked: the heartbeat this follower last acked and the version it
	// announced, so that the configuration arriving after it is acked too.
	lastAcked ackedHeartbeat

	// Leader value (value.go): this agent's own (Config.Value, then
	// CmdProclaim) and, while it leads, the version it announces in its
	// term; seen is the value this member last took, of whichever leader.
	value    string
	valueVer uint64
	seen     valueState
}

type ackedHeartbeat struct {
	leader         string
	term, seq, inc uint64
	announced      confVersion
}

// ackWindow heartbeats are remembered for matching acks; older acks are too
// late to extend a lease anyway (ElectionTimeout ≥ 3 heartbeats).
const ackWindow = 8

type sentHeartbeat struct {
	seq  uint64
	at   int64
	acks int
}

type member struct {
	id        string
	priority  uint32
	prioKnown bool
	lastHeard int64
	heardOnce bool
	aliveFrom int64 // start of the current run of contact, for "healthy"
	departed  bool  // it resigned and has not been heard since: never a hand-off target
	// inc and prevInc are the member's last two incarnations heard; a
	// process that restarted never comes back to prevInc, a second process
	// with the same ID does. dupAt: when that was last reported.
	inc, prevInc uint64
	dupAt        int64
	dupOnce      bool
	ackSeq       uint64 // leader: highest heartbeat seq this member acked
	// confVer (quorum): the newest configuration version its acks showed;
	// it persisted that before acking, so it holds at least that for good.
	confVer confVersion
}

func newGroup(cfg Config, st GroupState, now int64) *group {
	g := &group{cfg: cfg, topic: Topic(cfg.Group), term: st.Term, vote: st.Vote, prio: cfg.Priority, value: cfg.Value}
	g.rng.Seed(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)
	// A new epoch, persisted before anything is sent (dirty): it makes this
	// run's incarnation differ from every earlier one's.
	g.epoch, g.dirty = st.Epoch+1, true
	g.inc = splitmix64(cfg.Seed ^ g.epoch*0x9e3779b97f4a7c15)
	g.initConf(st)
	// A restarted member has forgotten whom it heard when: it behaves as if
	// it had just heard a leader, so it grants no vote that could cut short a
	// lease it acknowledged before it crashed. A member with no persisted
	// term has never heard a leader (hearing one persists its term), so it
	// may vote at once.
	g.lastLeaderContact, g.termSince = now, now
	if st.Term == 0 {
		g.lastLeaderContact = now - cfg.ElectionTimeoutMs
	}
	g.resetElectionTimer(now)
	return g
}

func (g *group) state() GroupState {
	s := GroupState{Group: g.cfg.Group, Term: g.term, Vote: g.vote, Epoch: g.epoch}
	if g.conf.ver.index > 0 {
		s.ConfTerm, s.ConfIndex, s.Members = g.conf.ver.term, g.conf.ver.index, g.conf.members
		if g.conf.keys != nil {
			s.Keys = make([][]byte, len(g.conf.members))
			for i, id := range g.conf.members {
				s.Keys[i] = g.conf.keys[id]
			}
		}
	}
	return s
}

// findMember is slices.BinarySearchFunc over ms by id without its copy of a
// member per comparison (in wasm a struct copy is a call into the host).
func findMember(ms []member, id string) (int, bool) {
	lo, hi := 0, len(ms)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if ms[h].id < id {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo, lo < len(ms) && ms[lo].id == id
}

// member returns the member with id, or nil.
func (g *group) member(id string) *member {
	i, ok := findMember(g.members, id)
	if !ok {
		return nil
	}
	return &g.members[i]
}

// heard records contact from a member; in bully mode an unlisted sender joins
// (up to MaxMembers). It returns nil if the sender may not take part: in
// quorum mode, any sender outside the configuration.
func (g *group) heard(id string, prio *uint32, now int64) *member {
	i, ok := findMember(g.members, id)
	if !ok {
		if g.cfg.Mode == ModeQuorum || len(g.cfg.Members) > 0 || len(g.members) >= MaxMembers {
			return nil
		}
		g.members = slices.Insert(g.members, i, member{id: id, priority: g.cfg.defaultPriority(id)})
	}
	m := &g.members[i]
	if prio != nil && id != g.cfg.ID {
		m.priority, m.prioKnown = *prio, true
	}
	if !m.heardOnce || m.departed || now-m.lastHeard > g.cfg.ElectionTimeoutMs {
		m.aliveFrom = now
	}
	if m.departed {
		// It resigned, on purpose: a priority hand-off gives leadership
		// back only after a calm (transferToBetter waits two election
		// timeouts of steady contact more).
		m.aliveFrom = now + priorityCalmMs(g.cfg.ElectionTimeoutMs)
	}
	m.departed = false
	m.lastHeard, m.heardOnce = now, true
	return m
}

// duplicateSelf reports a message that carries this agent's ID but another
// incarnation: a second process runs with our ID.
func (g *group) duplicateSelf(e *Engine, inc uint64) {
	if g.selfDupOnce && e.now-g.selfDupAt < g.cfg.ElectionTimeoutMs {
		return
	}
	g.selfDupOnce, g.selfDupAt = true, e.now
	g.duplicates++
	reason := "another process speaks as " + strconv.Quote(g.cfg.ID) +
		", this agent's id (incarnation " + uitoa(inc) + ", ours " + uitoa(g.inc) +
		"): two agents with one id vote twice; give every agent its own id"
	e.event(Event{Kind: EventDuplicateID, Group: g.cfg.Group, Term: g.term, Member: g.cfg.ID, Reason: reason})
}

// trackIncarnation follows the sender's incarnation and reports a member ID
// heard from two live processes: one that comes back to the incarnation
// before its last change.
func (g *group) trackIncarnation(e *Engine, m *wireMsg) {
	f := g.member(m.From)
	if f == nil || m.Inc == 0 || m.Inc == f.inc {
		return
	}
	if f.inc != 0 && m.Inc == f.prevInc && (!f.dupOnce || e.now-f.dupAt >= g.cfg.ElectionTimeoutMs) {
		f.dupOnce, f.dupAt = true, e.now
		g.duplicates++
		reason := "member " + strconv.Quote(f.id) +
			" is heard from two processes at once (incarnations " + uitoa(f.inc) + " and " + uitoa(m.Inc) +
			"): two agents with one id vote twice; give every agent its own id"
		e.event(Event{Kind: EventDuplicateID, Group: g.cfg.Group, Term: g.term, Member: f.id, Reason: reason})
	}
	f.prevInc, f.inc = f.inc, m.Inc
}

// implausibleTerm refuses a message whose term (or, a resign, its
// successor's; a config, its conf_term) is further ahead of ours than honest terms can be
// (MaxTermStep): one forged message moved a term by up to 2^32, and 6
// million of them brought every member of a group to MaxTerm, where no
// election is ever held again.
func (g *group) implausibleTerm(m *wireMsg, now int64) string {
	t := max(m.Term, m.ConfTerm) // a configuration's term has begun too
	if m.Type == typeResign {
		t = max(t, m.Term+1)
	}
	if limit := g.term + MaxTermStep + termsPerMs*uint64(max(now-g.termSince, 0)); t > limit {
		return "term " + uitoa(max(m.Term, m.ConfTerm)) + " of " + m.From + " is further ahead of ours (" + uitoa(g.term) + ") than terms can move by now"
	}
	return ""
}

// termSpent reports a member at MaxTerm, which no election can move on.
func (g *group) termSpent(e *Engine) {
	if g.term >= MaxTerm {
		e.event(Event{Kind: EventTermSpent, Group: g.cfg.Group, Term: g.term, Reason: "the term space is spent: " +
			"this member can hold no election until its persisted state is reset, which restarts terms (the fencing token) from 0"})
	}
}

// splitmix64 is SplitMix64's output function: a bijective mix of x.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func (g *group) majority() int { return len(g.members)/2 + 1 }

// outranks reports whether (pa, a) beats (pb, b): higher priority, then the
// greater id. Every mode and every agent break ties the same way.
func outranks(pa uint32, a string, pb uint32, b string) bool {
	if pa != pb {
		return pa > pb
	}
	return a > b
}

// live reports whether m counts as alive: heard within two election timeouts,
// or never heard at all (just booted: assume the best).
func (g *group) live(m *member, now int64) bool {
	return !m.heardOnce || now-m.lastHeard < 2*g.cfg.ElectionTimeoutMs
}

// rank is how many live members other than the current leader outrank this
// agent: 0 for the best candidate.
func (g *group) rank(now int64) int {
	r := 0
	for i := range g.members {
		m := &g.members[i]
		if m.id == g.cfg.ID || m.id == g.leader || !g.live(m, now) {
			continue
		}
		if outranks(m.priority, m.id, g.cfg.Priority, g.cfg.ID) {
			r++
		}
	}
	return r
}

// resetElectionTimer schedules the next campaign: one election timeout, plus
// a slot per better-ranked live member (at most 4 slots), plus a random part
// of one slot. A slot is ET/8, doubled for every election timeout that ran
// out since this member last followed or led a steady leader (at most
// maxBackoff times). The
// best candidate thus nearly always campaigns first and alone, which avoids
// split votes without preempting anyone; and when rounds fail anyway —
// requests that take longer to arrive than a slot, answers queued behind an
// overloaded host — the members' campaigns spread apart and thin out until
// one round completes, instead of all of them retrying every timeout. Only
// the timing moves (never below the election timeout): who may vote, and
// when, is decided elsewhere, so no back-off can make two leaders.
func (g *group) resetElectionTimer(now int64) {
	et := g.cfg.ElectionTimeoutMs
	slot := max(et/8, 1) << g.unheard
	g.electionDeadline = now + et + int64(min(g.rank(now), 4))*slot + int64(g.rng.Uint64()%uint64(slot))
}

// maxBackoff caps the campaign back-off at eight times the slot: one
// election timeout at ET/8, so the best candidate retries within two
// election timeouts and a member ranked k within 2+k.
const maxBackoff = 3

// missedLeader counts an election timeout that ran out without a leader.
func (g *group) missedLeader() { g.unheard = min(g.unheard+1, maxBackoff) }

// steady ends the back-off once the leader of this term has been followed,
// or this member has led, for an election timeout by at: a leader heard for
// less may be one that overload makes step down within its first lease,
// and if each such leader cleared it, every member would campaign at the
// default pace again after it.
func (g *group) steady(at int64) {
	if at-g.leaderSince >= g.cfg.ElectionTimeoutMs {
		g.unheard = 0
	}
}

// bestSuccessor is the highest-ranked member other than this one heard from
// within an election timeout (in bully mode, where followers never speak
// after an election: ever heard), or "". In quorum mode it must have acked
// this leader's configuration version: its pushed votes skip the election
// restriction.
func (g *group) bestSuccessor(now int64) string {
	var best *member
	for i := range g.members {
		m := &g.members[i]
		if m.id == g.cfg.ID || !m.heardOnce || m.departed || m.priority == 0 ||
			g.cfg.Mode == ModeQuorum && (now-m.lastHeard >= g.cfg.ElectionTimeoutMs || m.confVer != g.conf.ver) {
			continue
		}
		if best == nil || outranks(m.priority, m.id, best.priority, best.id) {
			best = m
		}
	}
	if best == nil {
		return ""
	}
	return best.id
}

// priorityCalmMs is how long a member that resigned (an operator's resign,
// a drain) is not handed leadership back by priority once heard again,
// beyond the usual two election timeouts of steady contact: an operator who
// moves leadership off the best member wants it moved, not returned two
// election timeouts later. Eight election timeouts: 16 s at the defaults.
func priorityCalmMs(et int64) int64 { return 8 * et }

// setTerm moves to a higher term, forgetting the vote and the leader.
func (g *group) setTerm(t uint64) {
	if t > g.term {
		g.term, g.vote, g.dirty = t, "", true
	}
}

// campaignDue reports whether this step's tick would start a campaign: a
// follower's or candidate's election deadline has passed (a bully
// candidate's collect window ending first is no campaign).
func (g *group) campaignDue(now int64) bool {
	switch {
	case g.role == RoleLeader, now < g.electionDeadline:
		return false
	case g.cfg.Mode == ModeBully && g.role == RoleCandidate:
		return now < g.collectEnd
	}
	return true
}

func (g *group) nextWake() int64 {
	switch {
	case g.role == RoleLeader && g.cfg.Mode == ModeQuorum:
		return min(g.heartbeatAt, g.stepDownAt)
	case g.role == RoleLeader:
		return g.heartbeatAt
	case g.role == RoleCandidate && g.cfg.Mode == ModeBully:
		return min(g.collectEnd, g.electionDeadline)
	}
	return g.electionDeadline
}

func (g *group) status() Status {
	s := Status{
		Group: g.cfg.Group, ID: g.cfg.ID, Mode: g.cfg.Mode, Role: g.role, Leader: g.leader,
		Term: g.term, Vote: g.vote, Priority: g.cfg.Priority,
		Elections: g.elections, Received: g.received, Rejected: g.rejected, Duplicates: g.duplicates,
		ConfTerm: g.conf.ver.term, ConfIndex: g.conf.ver.index, ConfCommitted: g.confCommitted, Voter: g.voter,
	}
	if g.role == RoleLeader {
		s.LeaseUntil = g.lease
	}
	s.Value, s.ValueVersion = g.currentValue()
	s.Members = make([]MemberStatus, len(g.members))
	for i, m := range g.members {
		s.Members[i] = MemberStatus{ID: m.id, Priority: m.priority, LastHeard: m.lastHeard}
	}
	return s
}

// Reasons and errors are built with strconv rather than fmt: fmt, and the
// reflection it brings, would be ~280 KB of the wasm module (RATIONALE.md).
func uitoa(v uint64) string { return strconv.FormatUint(v, 10) }
func itoa(v int64) string   { return strconv.FormatInt(v, 10) }
