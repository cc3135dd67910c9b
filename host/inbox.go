package host

import (
	"bytes"

	"github.com/electcore/electcore/core"
)

// inbox holds the received messages waiting for the next step, in two
// lanes. A message that names a known member of its group as its sender
// goes to that member's own small queue; everything else (non-members,
// garbage) to the shared queue, bounded by AgentConfig.MaxPending. Each step
// takes the members' queues first, one message from each in turn, then the
// shared one. So a flood from outside the group fills and drops only the
// shared queue while heartbeats, acks and votes still reach the core at
// once; a flood in a member's name (anyone can write one with
// authentication off; with it on, the core refuses it) crowds out only
// that member's own messages once the shared queue is full too.
//
// The sender is read by a byte scan for the first `"from":"`, not a JSON
// decode: it only picks a lane; the core still decodes, checks and
// authenticates everything.
type inbox struct {
	shared []core.Message // from head on
	head   int
	topics map[string]map[string]*lane // topic → member id → that member's lane
	order  []*lane                     // lanes with messages, oldest first, from orderHead on
	// orderHead: order is taken from the front by index, not by slicing,
	// so that its array is used again (sliced, appending moved it to a new
	// array every few hundred messages).
	orderHead int
	pending   int            // messages in lanes
	taken     []core.Message // take's result, reused: valid until the next take
	// behind: the last take left messages in the members' lanes (more
	// than one step takes: the agent is not keeping up). Only then does
	// a member's newer heartbeat or ack take the place of the one still
	// waiting at the end of its lane (supersedes); superseded counts
	// those replaced.
	behind     bool
	superseded uint64
	// thin: per topic, what thins its acks addressed to other leaders
	// (thinAcks); now: the time of the messages being added; thinned
	// counts the acks thinned.
	thin    map[string]*ackThinning
	now     int64
	thinned uint64
}

// ackThinning is one group's: this agent's id in it, how often one ack of
// each member addressed to another leader goes to the core, and (quorum
// groups) its heartbeat interval, the members known (its lanes, with this
// agent) and the heartbeat whose acks addressed to this agent are being
// counted: its term and seq, when counting began, and how many of its
// acks went to the core.
type ackThinning struct {
	self        string
	everyMs     int64
	quorum      bool
	heartbeatMs int64
	members     int
	term, seq   uint64
	at          int64
	acks        int
}

// count sets t.members from topic's lanes m.
func (t *ackThinning) count(m map[string]*lane) {
	t.members = len(m)
	if m[t.self] == nil {
		t.members++
	}
}

// thinGroups: an agent in fewer groups thins no ack. A few groups' acks
// cost nothing worth saving, and a member's last-heard time, which
// status reports, stays within a heartbeat interval.
const thinGroups = coalesceGroups

// lane is one known member's queue. It exists from the moment the member
// is known and keeps its array when emptied: in the steady state a lane
// holds one heartbeat or ack at a time, and creating and deleting it for
// each cost a map write and an allocation per message.
type lane struct {
	q    []core.Message // from head on
	head int
	gone bool // its group was left (forget): take skips it
	// thin is its group's (thinAcks); otherAckAt: when an ack of this
	// member's addressed to another leader last went to the core, if
	// otherAckPassed; ownAckAt, ownAckPassed: the same of its acks
	// addressed to this agent (ownAck).
	thin           *ackThinning
	otherAckAt     int64
	otherAckPassed bool
	ownAckAt       int64
	ownAckPassed   bool
}

func (l *lane) len() int { return len(l.q) - l.head }

// passAck reports whether p, a payload of l's member, goes to the core at
// now. Every payload does but some acks of heartbeats (seq above 0):
// those addressed to another leader (otherAck) and, in a quorum group,
// some addressed to this agent (ownAck). A stale reply (seq 0, which may
// carry a later term) is never thinned. Thinning is loss, which the core
// is built for.
func (l *lane) passAck(p []byte, now int64) bool {
	if !bytes.HasPrefix(p, ackPrefix) {
		return true
	}
	leader := valueAfter(p, leaderKey)
	if leader == nil {
		return true
	}
	seq, ok := numberAfter(p, seqKey)
	if !ok || seq == 0 {
		return true
	}
	if string(leader) != l.thin.self {
		return l.otherAck(now)
	}
	if !l.thin.quorum {
		return true
	}
	term, ok := numberAfter(p, termKey)
	return !ok || l.ownAck(term, seq, now)
}

// otherAck: one ack of the member's addressed to another leader goes to
// the core per everyMs (an election timeout). A follower's core uses a
// fellow follower's acks only to count it live (heard within two election
// timeouts: the rank that orders their campaigns) and to learn its
// priority, and one ack per election timeout keeps both; the leader they
// are for gets them (ownAck). In a settled group of three, the other
// follower's acks were a third of the payloads each follower's core read.
// With authentication on, an ack forged in the member's name can take the
// slot of a genuine one (the core then refuses the forgery): the member
// may then count as not live for this follower, which changes only when
// it campaigns.
func (l *lane) otherAck(now int64) bool {
	if l.otherAckPassed && now-l.otherAckAt < l.thin.everyMs {
		return false
	}
	l.otherAckPassed, l.otherAckAt = true, now
	return true
}

// ownAck: an ack of heartbeat (term, seq) addressed to this agent goes to
// the core if it is among the first a majority needs of that heartbeat
// (half the group's members: this agent's vote is its own), or if the
// member's last ack that went to the core is one and a half heartbeat
// intervals old or more. An ack counts its sender for every heartbeat up
// to its seq (core/quorum.go onAck), so the lease grows from the same
// heartbeats as before; in a settled group of three the slower follower's
// every other ack was needless, a quarter of the acks a leader's core
// read. Each member is still heard about every other heartbeat, so it
// stays live and in contact for CheckQuorum, and its acked seq stays
// within the two a priority hand-off asks of it (transferToBetter). A
// count over lanes that still hold a removed member passes more acks,
// never fewer. The counted heartbeat is the latest seen, for one interval
// at most: a forged ack (refused by the core with authentication on; with
// it off, anyone may speak for anyone) with a far seq or term stops the
// counting for that long, and one forged in a member's name takes that
// member's slot once; the lease then grows from the members' slots, every
// other heartbeat.
func (l *lane) ownAck(term, seq uint64, now int64) bool {
	t := l.thin
	if term != t.term || seq > t.seq || now-t.at >= t.heartbeatMs {
		t.term, t.seq, t.at, t.acks = term, seq, now, 0
	}
	if seq == t.seq && t.acks < t.members/2 {
		t.acks++
	} else if l.ownAckPassed && now-l.ownAckAt < t.heartbeatMs*3/2 {
		return false
	}
	l.ownAckPassed, l.ownAckAt = true, now
	return true
}

// memberLane bounds one member's queue: about 25 s of its heartbeats or
// acks at the default interval, far more than a step takes.
const memberLane = 256

// setMembers makes ids known members of topic (added to those known: a
// member removed since is still heard while the others learn it).
func (in *inbox) setMembers(topic string, ids []string) {
	if in.topics == nil {
		in.topics = map[string]map[string]*lane{}
	}
	m := in.topics[topic]
	if m == nil {
		m = map[string]*lane{}
		in.topics[topic] = m
	}
	for _, id := range ids {
		if m[id] == nil {
			m[id] = &lane{thin: in.thin[topic]}
		}
	}
	if t := in.thin[topic]; t != nil {
		t.count(m)
	}
}

// thinAcks has topic's acks thinned (passAck), for its lanes known and to
// come: those addressed to another leader than self to one per member and
// everyMs, and, if quorum (heartbeats every heartbeatMs), those addressed
// to self to what its lease and its view of the members need.
func (in *inbox) thinAcks(topic, self string, everyMs int64, quorum bool, heartbeatMs int64) {
	if in.thin == nil {
		in.thin = map[string]*ackThinning{}
	}
	t := &ackThinning{self: self, everyMs: everyMs, quorum: quorum, heartbeatMs: heartbeatMs}
	t.count(in.topics[topic])
	in.thin[topic] = t
	for _, l := range in.topics[topic] {
		l.thin = t
	}
}

// forget drops topic's members and queued messages (the group was left).
// It visits only that topic's lanes (one per member ever known), not every
// lane: an agent leaving ten thousand groups would otherwise scan them all
// for each. take skips them where they are still listed.
func (in *inbox) forget(topic string) {
	for _, l := range in.topics[topic] {
		in.pending -= l.len()
		clear(l.q)
		l.q, l.head, l.gone = nil, 0, true
	}
	delete(in.topics, topic)
	delete(in.thin, topic)
}

// member reports whether from is a known member of topic.
func (in *inbox) member(topic, from string) bool { return in.topics[topic][from] != nil }

// add queues m; it reports false if m was dropped (its queue full) and
// whether it named a known member. A member's message that finds its own
// queue full waits in the shared one if there is room: a burst in a
// member's name (with auth on, replays the core refuses cheaply) is then
// no worse off than everything else.
func (in *inbox) add(m core.Message, maxShared int) (queued, member bool) {
	if l := in.topics[m.Topic][string(senderBytes(m.Payload))]; l != nil {
		return in.addLane(m, l, maxShared), true
	}
	return in.addShared(m, maxShared), false
}

// lanes is topic's member lanes (nil if none is known), for cgroup.lanes:
// the map stays topic's until forget, and its lanes are then gone.
func (in *inbox) lanes(topic string) map[string]*lane { return in.topics[topic] }

// addIn is add for a payload of an envelope whose sender is known to be
// from (the coalescer checked it), queued in from's lane of the payload's
// group without looking the group up.
func (in *inbox) addIn(m inMsg, from string, maxShared int) (queued, member bool) {
	if l := m.lanes[from]; l != nil && !l.gone {
		return in.addLane(m.Message, l, maxShared), true
	}
	return in.addShared(m.Message, maxShared), false
}

// addLane queues m in its sender's lane l, unless it is an ack thinned
// (otherAck; reported as queued, and counted in thinned). While the agent
// is behind, m takes the place of the lane's last message if it
// supersedes it.
func (in *inbox) addLane(m core.Message, l *lane, maxShared int) bool {
	if l.thin != nil && len(in.topics) >= thinGroups && !l.passAck(m.Payload, in.now) {
		in.thinned++
		return true
	}
	if in.behind && l.len() > 0 && supersedes(m.Payload, l.q[len(l.q)-1].Payload) {
		l.q[len(l.q)-1] = m
		in.superseded++
		return true
	}
	if l.len() >= memberLane {
		return in.addShared(m, maxShared)
	}
	if l.len() == 0 {
		in.order = append(in.order, l)
	}
	l.q = append(l.q, m)
	in.pending++
	return true
}

func (in *inbox) addShared(m core.Message, maxShared int) bool {
	if len(in.shared)-in.head >= maxShared {
		return false
	}
	in.shared = append(in.shared, m)
	return true
}

func (in *inbox) len() int { return in.pending + len(in.shared) - in.head }

// stepMessages bounds the messages of one step. A step is one call into
// the module under its deadline (1 s): under a flood on a loaded machine,
// half a MaxBatchBytes of refused messages (about 2,400) overran it, the
// module trapped and was restored from the persisted state, and the leader
// lost its lease. 256 take about 1.5 ms of wasm on a quiet machine.
const stepMessages = 256

// take removes up to budget bytes and stepMessages messages (at least one
// if any wait): the members' lanes round robin, then the shared queue in
// order. What it returns is valid until the next take.
func (in *inbox) take(budget int) []core.Message {
	clear(in.taken) // the last step's payloads are not kept alive
	out := in.taken[:0]
	cost := func(m core.Message) int { return len(m.Topic) + len(m.Payload) + 16 }
	for in.orderHead < len(in.order) && len(out) < stepMessages && (budget > 0 || len(out) == 0) {
		l := in.order[in.orderHead]
		in.order[in.orderHead] = nil
		in.orderHead++
		if l.gone || l.len() == 0 { // forgotten
			continue
		}
		m := l.q[l.head]
		l.q[l.head] = core.Message{} // not kept alive by the array
		out = append(out, m)
		budget -= cost(m)
		in.pending--
		if l.head++; l.len() == 0 {
			l.q, l.head = l.q[:0], 0
		} else {
			in.order = append(in.order, l) // to the back: one each in turn
		}
	}
	if in.orderHead == len(in.order) {
		in.order, in.orderHead = in.order[:0], 0
	} else if in.orderHead > len(in.order)/2 {
		n := copy(in.order, in.order[in.orderHead:])
		clear(in.order[n:])
		in.order, in.orderHead = in.order[:n], 0
	}
	for in.head < len(in.shared) && len(out) < stepMessages && (budget > 0 || len(out) == 0) {
		m := in.shared[in.head]
		in.shared[in.head] = core.Message{} // not kept alive by the array
		in.head++
		budget -= cost(m)
		out = append(out, m)
	}
	in.taken = out
	in.behind = in.pending > 0
	// Move the rest to the front once half the array is taken, not at
	// every step: with 65,536 waiting, a copy per 256-message step cost
	// more than the step.
	if in.head == len(in.shared) {
		in.shared, in.head = in.shared[:0], 0
	} else if in.head > len(in.shared)/2 {
		n := copy(in.shared, in.shared[in.head:])
		clear(in.shared[n:])
		in.shared, in.head = in.shared[:n], 0
	}
	return out
}

var fromKey = []byte(`"from":"`)

// senderOf is the value of the first "from" key of a wire message, or "" if
// there is none or it is not a plain string of at most core.MaxIDLen bytes.
func senderOf(p []byte) string { return string(senderBytes(p)) }

// senderBytes is senderOf without a copy: the name within p, or nil.
func senderBytes(p []byte) []byte {
	if v := valueAfter(p, fromKey); len(v) > 0 && len(v) <= core.MaxIDLen {
		return v
	}
	return nil
}

var (
	heartbeatPrefix = []byte(`{"type":"heartbeat",`)
	ackPrefix       = []byte(`{"type":"ack",`)
	incKey          = []byte(`,"inc":`)
	termKey         = []byte(`,"term":`)
	seqKey          = []byte(`,"seq":`)
)

// supersedes reports whether p, a received payload, makes old, the one
// before it in the same member's lane, needless to the core: both are the
// core's own heartbeats, or both its acks, of the same group, sender and
// incarnation (their bytes equal up to the end of "inc"), and p is the
// later one by (term, seq). A leader's heartbeat carries its whole state
// (term, seq, value, configuration version), so a follower that gets only
// the newer one acts as if the older had been lost; an ack of seq s counts
// its sender for every heartbeat up to s, so the leader loses nothing by
// the older ack. Everything else (votes, which may answer different
// candidates, stale replies without a seq, configurations, hand-offs,
// anything not written by the core) is never replaced. A replay of an
// older message never replaces a newer one; a forgery with a later seq can
// (the core then refuses it), but only while the agent is behind, which a
// non-member's flood does not make it (behind counts the members' lanes
// only).
func supersedes(p, old []byte) bool {
	if !bytes.HasPrefix(p, heartbeatPrefix) && !bytes.HasPrefix(p, ackPrefix) {
		return false
	}
	i := bytes.Index(p, incKey)
	if i < 0 {
		return false
	}
	end := i + len(incKey)
	for end < len(p) && p[end] >= '0' && p[end] <= '9' {
		end++
	}
	// p[:end+1] is the type, group, sender and incarnation with the byte
	// that ends the incarnation's number.
	if end == i+len(incKey) || end >= len(p) || len(old) <= end || !bytes.Equal(p[:end+1], old[:end+1]) {
		return false
	}
	term, ok1 := numberAfter(p[end:], termKey)
	seq, ok2 := numberAfter(p[end:], seqKey)
	oldTerm, ok3 := numberAfter(old[end:], termKey)
	oldSeq, ok4 := numberAfter(old[end:], seqKey)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return false
	}
	return term > oldTerm || term == oldTerm && seq > oldSeq
}

var leaderKey = []byte(`,"leader":"`)

// valueAfter is the plain string right after the first key in p (which
// ends with its opening quote), or nil if there is none or it holds an
// escape.
func valueAfter(p, key []byte) []byte {
	i := bytes.Index(p, key)
	if i < 0 {
		return nil
	}
	p = p[i+len(key):]
	j := bytes.IndexByte(p, '"')
	if j < 0 || bytes.IndexByte(p[:j], '\\') >= 0 {
		return nil
	}
	return p[:j]
}

// numberAfter is the unsigned number right after the first key in p.
func numberAfter(p, key []byte) (uint64, bool) {
	i := bytes.Index(p, key)
	if i < 0 {
		return 0, false
	}
	p = p[i+len(key):]
	var v uint64
	n := 0
	for ; n < len(p) && p[n] >= '0' && p[n] <= '9'; n++ {
		if n == 19 { // more than any count on the wire
			return 0, false
		}
		v = v*10 + uint64(p[n]-'0')
	}
	return v, n > 0
}
