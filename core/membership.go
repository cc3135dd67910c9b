package core

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"slices"
	"strconv"
)

// Membership changes in quorum mode: single-server changes (Ongaro,
// "Consensus: Bridging Theory and Practice", 2014, §4.1–4.3), with the
// configuration kept as a one-entry Raft log.
//
//   - The configuration (its member set and, with ed25519, their public keys)
//     has a version (term, index): the term of the leader that wrote it and a
//     counter. Versions order like Raft's log positions. A member persists
//     its configuration with its term and vote (GroupState) before it acts
//     on it or acknowledges it.
//   - Every member counts majorities — votes, pre-votes, acks for the lease,
//     CheckQuorum — over its own latest configuration, committed or not
//     (thesis §4.1). A member outside it (removed, or waiting to be added)
//     never campaigns, and its messages are refused.
//   - Vote requests carry the candidate's version, and a member refuses a
//     candidate whose version is older than its own (Raft's election
//     restriction, §5.4.1 of the Raft paper), so a leader always holds the
//     latest committed configuration.
//   - Every new leader first re-writes its configuration under its own term
//     (the same members, the next index; 1 near the bound: restamp): the
//     stand-in for Raft's no-op entry. It proposes a change only once that
//     version is committed — a majority acknowledged a heartbeat of its
//     term carrying it. This is
//     Ongaro's fix for the single-server-change bug he described in 2015
//     (raft-dev, "bug in single-server membership changes"): without it, a
//     leader could propose a change alongside an uncommitted one of an earlier
//     term, and two configurations that differ by two members could each
//     elect a leader.
//   - One member is added or removed at a time: the next change waits until
//     the last one commits (a majority of the new configuration acknowledged
//     it), so any two majorities of consecutive configurations overlap.
//   - A leader is never removed while it leads: asked to remove itself, it
//     hands leadership to the best live member, which removes it once its own
//     configuration is committed (etcd and Consul likewise move leadership
//     away before removing a leader; it keeps "the leader is a member" true
//     and the lease argument unchanged).
//
// A member learns a configuration from a config message whose version is
// strictly newer than its own, from a sender that could have written it or
// be passing it on (confSender; its own configuration may not list the
// leader that added it back): every version was written by the leader of
// its term, so a late copy is Raft's delayed AppendEntries, and taking only
// newer versions never undoes a
// committed one; a version of a later term than the member's own moves it
// to that term, which has begun. Leaders send their configuration with
// every heartbeat until it commits and whenever an ack shows a member
// behind; a member refusing an out-of-date candidate's vote sends it its
// configuration (at most once per heartbeat interval). So that the ack
// comes, a node follows and acks a leader its configuration does not list
// when that leader's heartbeat announces a newer version (stepQuorum): a
// spare whose configuration lists neither itself nor the leader otherwise
// never hears of its addition. With ed25519 it cannot verify such a
// leader, so it asks a member it lists that acks one (askConf). Likewise a
// node answers a candidate outside its configuration whose version is
// newer (Raft thesis §4.2.1: a member added while down may be needed for a
// majority though it lists neither itself nor the candidate), and with
// ed25519, unable to verify such a candidate, asks the members it lists
// (askUnverified).

const (
	opAdd    = "add"
	opRemove = "remove"
)

// confVersion orders configurations as Raft orders log positions.
type confVersion struct{ term, index uint64 }

// confVer is the configuration version a message carries ((0, 0): none).
func (m *wireMsg) confVer() confVersion { return confVersion{m.ConfTerm, m.ConfIndex} }

func (v confVersion) before(w confVersion) bool {
	return v.term < w.term || v.term == w.term && v.index < w.index
}

// configuration is a member set and its version.
type configuration struct {
	ver     confVersion
	members []string          // sorted, unique
	keys    map[string][]byte // ed25519 public keys by member; nil unless AuthEd25519
}

// confChange is a change the leader will propose once its configuration
// commits.
type confChange struct {
	op, member string
	key        []byte
}

// maxConfigPayload leaves room in MaxPayload for the signed envelope.
const maxConfigPayload = MaxPayload - 192

var keyEncoding = base64.RawURLEncoding

// initConf sets the configuration a group starts with: the persisted one,
// else Config.Members at version (0, 0). Bully groups keep Config.Members
// and take in whoever speaks (heard).
func (g *group) initConf(st GroupState) {
	c := configuration{members: g.cfg.Members}
	if g.cfg.Mode == ModeQuorum && st.ConfIndex > 0 {
		c = configuration{ver: confVersion{st.ConfTerm, st.ConfIndex}, members: st.Members}
	}
	switch {
	case g.cfg.Auth == AuthEd25519 && g.cfg.Mode == ModeBully:
		c.keys = g.cfg.MemberKeys // every key holder may take part
	case g.cfg.Auth == AuthEd25519:
		c.keys = make(map[string][]byte, len(c.members))
		for i, id := range c.members {
			if c.ver.index > 0 && i < len(st.Keys) && len(st.Keys[i]) == ed25519.PublicKeySize {
				c.keys[id] = st.Keys[i]
			} else {
				c.keys[id] = g.cfg.MemberKeys[id]
			}
		}
	}
	g.setConf(c)
	g.committedMembers = c.members // what it starts with is no news
}

// checkPersistedConf reports a persisted configuration this agent cannot
// use. Config c is normalised.
func checkPersistedConf(c Config, st GroupState) error {
	if c.Mode != ModeQuorum || st.ConfIndex == 0 {
		return nil
	}
	if st.ConfTerm > MaxTerm || st.ConfIndex > MaxTerm {
		return errors.New("persisted configuration version (" + uitoa(st.ConfTerm) + ", " + uitoa(st.ConfIndex) + ") beyond " + uitoa(MaxTerm) +
			" (written by a version that let one message put it there): delete the group's state file to start over")
	}
	if err := checkMemberList(st.Members); err != nil {
		return errors.New("persisted configuration: " + err.Error())
	}
	if c.Auth == AuthEd25519 {
		for i, id := range st.Members {
			var k []byte
			if i < len(st.Keys) {
				k = st.Keys[i]
			}
			if len(k) != ed25519.PublicKeySize {
				k = c.MemberKeys[id]
			}
			if len(k) != ed25519.PublicKeySize {
				return errors.New("persisted configuration: no ed25519 public key for member " + strconv.Quote(id) + " (pass it in member_keys)")
			}
		}
	}
	return nil
}

// checkMemberList accepts 1–MaxMembers valid names, sorted and unique.
func checkMemberList(ids []string) error {
	if len(ids) == 0 || len(ids) > MaxMembers {
		return errors.New(strconv.Itoa(len(ids)) + " members, want 1.." + strconv.Itoa(MaxMembers))
	}
	for i, id := range ids {
		if err := checkName("member", id); err != nil {
			return err
		}
		if i > 0 && ids[i-1] >= id {
			return errors.New("members not sorted and unique at " + strconv.Quote(id))
		}
	}
	return nil
}

// checkConfigFields checks a config message's fields (checkWire).
func checkConfigFields(m *wireMsg) error {
	if m.ConfIndex == 0 { // its bounds: checkWire
		return errors.New("config without a valid version")
	}
	if err := checkMemberList(m.Members); err != nil {
		return err
	}
	if len(m.Keys) != 0 && len(m.Keys) != len(m.Members) {
		return errors.New(strconv.Itoa(len(m.Keys)) + " keys for " + strconv.Itoa(len(m.Members)) + " members")
	}
	for _, k := range m.Keys {
		if b, err := keyEncoding.DecodeString(k); err != nil || len(b) != ed25519.PublicKeySize {
			return errors.New("key " + strconv.Quote(truncate(k)) + " is not a base64url ed25519 public key")
		}
	}
	return nil
}

// setConf makes c the configuration and rebuilds the member table, keeping
// what is known of members that stay.
func (g *group) setConf(c configuration) {
	old := g.members
	g.members = make([]member, 0, len(c.members))
	for _, id := range c.members {
		if i, ok := findMember(old, id); ok {
			g.members = append(g.members, old[i])
			continue
		}
		m := member{id: id, priority: g.cfg.defaultPriority(id)}
		if id == g.cfg.ID {
			m.priority, m.prioKnown = g.cfg.Priority, true
		}
		g.members = append(g.members, m)
	}
	g.conf = c
	_, in := slices.BinarySearch(c.members, g.cfg.ID)
	g.voter = g.cfg.Mode == ModeBully || in && !(g.cfg.AwaitConfig && c.ver.index == 0)
	g.confWire = nil
	if g.auth != nil && g.auth.mode == AuthEd25519 {
		g.auth.setKeys(g.cfg.ID, g.auth.priv.Public().(ed25519.PublicKey), c.keys)
	}
}

// configPayload is the config message for the current configuration, or nil
// if it does not fit in one message.
func (g *group) configPayload(e *Engine) []byte {
	if g.confWire == nil {
		e.enc.begin(typeConfig, g)
		e.enc.num("conf_term", g.conf.ver.term)
		e.enc.num("conf_index", g.conf.ver.index)
		e.enc.strs("members", g.conf.members)
		if g.conf.keys != nil {
			keys := make([]string, len(g.conf.members))
			for i, id := range g.conf.members {
				keys[i] = keyEncoding.EncodeToString(g.conf.keys[id])
			}
			e.enc.strs("keys", keys)
		}
		g.confWire = slices.Clone(e.enc.end()) // kept across steps: not in payload memory a step may reuse
		g.confFits = len(g.confWire) <= maxConfigPayload
	}
	if !g.confFits {
		return nil
	}
	return slices.Clone(g.confWire)
}

// sendConf publishes the current configuration, if it fits in a message.
func (g *group) sendConf(e *Engine) {
	if p := g.configPayload(e); p != nil {
		e.publish(g, p)
	}
}

// offerConf sends the configuration to a member found out of date, at most
// once per heartbeat interval.
func (g *group) offerConf(e *Engine) {
	if g.conf.ver.index == 0 || g.confOffered != 0 && e.now-g.confOffered < g.cfg.HeartbeatMs {
		return
	}
	g.confOffered = e.now
	g.sendConf(e)
}

// askConf asks member to, whose ack to another leader showed a newer
// configuration than ours, for it (at most once per heartbeat interval), as
// a member behind answers a candidate: a refused pre-vote naming to, with
// our version, to which to replies with its configuration (onVote). A
// pre-vote moves no term and counts for nobody.
func (g *group) askConf(e *Engine, to string, term uint64) {
	if g.confAsked != 0 && e.now-g.confAsked < g.cfg.HeartbeatMs {
		return
	}
	g.confAsked = e.now
	g.sendVote(e, to, term, true, false)
}

// askUnverified answers a message that failed verification because, with
// ed25519, its sender's key is not in our configuration while it claims a
// newer one: a member added since, perhaps a candidate that needs our vote
// (we were added while down, and every member we list was removed since).
// We ask the members we list, one per heartbeat interval in turn, for
// their configuration (askConf): a removed member still holds the one that
// removed it, which lists what was added before. The claim is unverified,
// so it buys one message per interval.
func (g *group) askUnverified(e *Engine, m *wireMsg) {
	if g.cfg.Mode != ModeQuorum || g.auth.mode != AuthEd25519 || g.auth.pubs[m.From] != nil ||
		!g.conf.ver.before(m.confVer()) || len(g.members) < 2 ||
		g.confAsked != 0 && e.now-g.confAsked < g.cfg.HeartbeatMs {
		return
	}
	g.asks++
	to := g.members[g.asks%len(g.members)].id
	if to == g.cfg.ID {
		g.asks++
		to = g.members[g.asks%len(g.members)].id
	}
	g.askConf(e, to, g.term)
}

// onConfig takes a strictly newer configuration.
func (g *group) onConfig(e *Engine, m *wireMsg) string {
	v := m.confVer()
	if g.role == RoleLeader || !g.conf.ver.before(v) {
		return "" // a leader writes its own; an older or equal one says nothing new
	}
	if reason := g.confSender(m); reason != "" {
		return reason
	}
	c := configuration{ver: v, members: m.Members}
	switch {
	case g.cfg.Auth == AuthEd25519 && len(m.Keys) == 0:
		return "configuration without the members' keys (this group uses ed25519)"
	case g.cfg.Auth == AuthEd25519:
		c.keys = make(map[string][]byte, len(m.Keys))
		for i, k := range m.Keys {
			c.keys[m.Members[i]], _ = keyEncoding.DecodeString(k) // checked by checkConfigFields
		}
	case len(m.Keys) != 0:
		return "configuration with keys (this group does not use ed25519)"
	}
	if v.term > g.term {
		// Its term's leader wrote it, so that term has begun: enter it, as
		// Raft's AppendEntries moves a follower to its leader's term. A
		// member holding a version of a later term than its own could
		// otherwise still lead an earlier term (a late pushed vote) and
		// re-stamp its configuration older than the one it persisted.
		if reason := g.implausibleTerm(m, e.now); reason != "" {
			return reason
		}
		g.enterTerm(e, v.term)
	}
	g.adopt(e, c, "adopted from "+m.From)
	if a := g.lastAcked; a.announced == v && a.leader == m.From && a.term == g.term && g.leader == m.From {
		// The leader's heartbeat announcing this version overtook it on the
		// bus and was acked with the older one: ack it again, so that the
		// leader learns now, not a heartbeat later, that this member holds
		// its configuration (it hands over only to such a member).
		g.sendAck(e, a.leader, a.term, a.seq, a.inc)
	}
	return ""
}

// confSender refuses a newer configuration from a sender that could not
// have written it, nor be passing on what its writer wrote: one message of
// a non-member (with authentication off, anyone) once made every follower
// a non-voter of a made-up configuration, for good. It comes from
//   - the leader this node follows, or voted for, in the configuration's
//     term (its writer; a leader is a member of its configuration);
//   - a member of this node's configuration, passing on a later one — but
//     not one that removes this member: that comes from the leader only,
//     whose heartbeats a removed member still hears and acks;
//   - or, to a node outside its configuration (a spare, one removed), a
//     sender listed with it: a spare learning its own addition from the
//     leader outside its configuration or the candidate that needs it.
func (g *group) confSender(m *wireMsg) string {
	_, lists := slices.BinarySearch(m.Members, m.From)
	_, listsUs := slices.BinarySearch(m.Members, g.cfg.ID)
	switch {
	case lists && (m.From == g.leader && m.ConfTerm == g.leaderTerm || m.From == g.vote && m.ConfTerm == g.term):
		return ""
	case g.member(m.From) != nil && !g.voter:
		return ""
	case g.member(m.From) != nil && !listsUs:
		return "configuration removing this member from " + m.From + ", not its leader"
	case g.member(m.From) != nil:
		return ""
	case !g.voter && lists && listsUs:
		return ""
	}
	return "configuration from " + m.From + ", which is not a member"
}

// adopt makes c this follower's configuration, persisted before anything
// that rests on it is sent.
func (g *group) adopt(e *Engine, c configuration, reason string) {
	changed := !slices.Equal(c.members, g.conf.members)
	g.setConf(c)
	g.dirty, g.confCommitted = true, false
	if g.role == RoleCandidate || g.role == RolePreCandidate {
		// Its votes were counted over the old configuration, perhaps from
		// members the new one removed: this candidacy is over.
		g.role = RoleFollower
		g.votes = g.votes[:0]
	}
	if changed {
		g.configEvent(e, reason)
	}
}

func (g *group) configEvent(e *Engine, reason string) {
	e.event(Event{Kind: EventConfig, Group: g.cfg.Group, Term: g.term, Reason: reason,
		Members: slices.Clone(g.conf.members), ConfIndex: g.conf.ver.index})
}

// restamp re-writes a new leader's configuration under its term: its first
// entry, which must commit before it may propose a change.
//
// The index restarts at 1 when it is within 2^32 of its bound: no leader
// makes that many changes, so only a forged version gets there, and the new
// term alone makes the version newer than one of an earlier term. Index+1
// beyond the bound would be malformed to every receiver. (A version of the
// leader's own term is forged too, adopted before a hand-off made it
// leader: at the bound it is kept as it is, and commits as it is.)
func (g *group) restamp() {
	c := g.conf
	c.ver = confVersion{g.term, c.ver.index + 1}
	switch {
	case c.ver.index > MaxTerm-1<<32 && g.conf.ver.term < g.term:
		c.ver.index = 1
	case c.ver.index > MaxTerm:
		c.ver.index = MaxTerm
	}
	g.setConf(c)
	g.dirty = true
	g.confCommitted, g.confAcked = false, g.confAcked[:0]
	if g.removeOnLead != "" && g.removeOnLeadTerm == g.term {
		g.pending = &confChange{op: opRemove, member: g.removeOnLead}
	}
	g.removeOnLead = ""
}

// onConfAck counts a member's ack of the leader's configuration version.
func (g *group) onConfAck(e *Engine, m *wireMsg) {
	if m.confVer() != g.conf.ver {
		g.confSend = true // it is behind: send ours with the next heartbeat
		return
	}
	if !g.confCommitted && !slices.Contains(g.confAcked, m.From) {
		g.confAcked = append(g.confAcked, m.From)
		g.checkCommit(e)
	}
}

// checkCommit commits the leader's configuration once a majority of it (the
// leader included: a leader is always a member) holds it in this term, and
// then proposes the change waiting for that.
func (g *group) checkCommit(e *Engine) {
	if g.confCommitted || 1+len(g.confAcked) < g.majority() {
		return
	}
	g.confCommitted = true
	// Every commit, a new leader's re-stamp included: whoever audits the
	// chain of committed configurations sees each link.
	g.committedMembers = slices.Clone(g.conf.members)
	g.configEvent(e, "committed")
	if p := g.pending; p != nil {
		g.pending = nil
		if reason := g.propose(e, *p); reason != "" {
			e.reject(g.cfg.Group, p.op+" "+p.member+": "+reason)
		}
	}
}

// followerCommitted records that the leader reports its configuration,
// which is this member's too, as committed.
func (g *group) followerCommitted(e *Engine, m *wireMsg) {
	if !m.Committed || g.confCommitted || m.confVer() != g.conf.ver {
		return
	}
	g.confCommitted = true
	if !slices.Equal(g.committedMembers, g.conf.members) {
		g.committedMembers = slices.Clone(g.conf.members)
		g.configEvent(e, "committed")
	}
}

// changeMembers answers CmdAddMember and CmdRemoveMember: a follower
// forwards the request to its leader; the leader proposes it, or keeps it
// until its configuration commits. It returns a refusal reason or "".
func (g *group) changeMembers(e *Engine, op, id string, key []byte) string {
	if g.cfg.Mode != ModeQuorum {
		return "bully mode has no configuration: members join by speaking and leave by going quiet"
	}
	if err := checkName("member", id); err != nil {
		return err.Error()
	}
	if g.cfg.Auth == AuthEd25519 && op == opAdd && len(key) != ed25519.PublicKeySize {
		return "adding " + id + " needs its ed25519 public key (" + strconv.Itoa(ed25519.PublicKeySize) + " bytes, got " + strconv.Itoa(len(key)) + ")"
	}
	if g.cfg.Auth != AuthEd25519 && len(key) != 0 {
		return "a key is only for groups that use ed25519"
	}
	if g.role != RoleLeader {
		if g.leader == "" {
			return "no leader known: retry once one is elected"
		}
		e.enc.begin(typeChange, g)
		e.enc.str("leader", g.leader)
		e.enc.num("term", g.term)
		e.enc.str("op", op)
		e.enc.str("member", id)
		if len(key) > 0 {
			e.enc.str("key", keyEncoding.EncodeToString(key))
		}
		e.publish(g, e.enc.end())
		return ""
	}
	ch := confChange{op: op, member: id, key: slices.Clone(key)}
	if reason := g.checkChange(ch); reason != "" {
		return reason
	}
	if op == opRemove && id == g.cfg.ID {
		return g.removeSelf(e)
	}
	if g.pending != nil {
		return "another change is waiting (" + g.pending.op + " " + g.pending.member + "): retry once it commits"
	}
	if !g.confCommitted {
		g.pending = &ch
		return ""
	}
	return g.propose(e, ch)
}

// checkChange refuses a change that makes no sense against the current
// configuration.
func (g *group) checkChange(ch confChange) string {
	_, in := slices.BinarySearch(g.conf.members, ch.member)
	switch {
	case ch.op == opAdd && in:
		return ch.member + " is already a member"
	case ch.op == opAdd && len(g.conf.members) >= MaxMembers:
		return "the group has " + strconv.Itoa(MaxMembers) + " members, the most it may have"
	case ch.op == opRemove && !in:
		return ch.member + " is not a member"
	case ch.op == opRemove && len(g.conf.members) == 1:
		return "cannot remove the last member"
	}
	return ""
}

// removeSelf hands leadership to the best live member, which removes this
// agent once its own configuration commits.
func (g *group) removeSelf(e *Engine) string {
	to := g.bestSuccessor(e.now)
	if to == "" {
		return "no live member to hand leadership to before removing this leader"
	}
	return g.resign(e, to, true, false)
}

// propose makes ch the leader's new configuration, one member away from a
// committed one.
func (g *group) propose(e *Engine, ch confChange) string {
	if reason := g.checkChange(ch); reason != "" {
		return reason
	}
	if ch.op == opRemove && ch.member == g.cfg.ID {
		return g.removeSelf(e)
	}
	if g.conf.ver.index >= MaxTerm {
		return "the configuration index of this term is spent: the next leader restarts it"
	}
	c := configuration{ver: confVersion{g.term, g.conf.ver.index + 1}}
	if ch.op == opAdd {
		i, _ := slices.BinarySearch(g.conf.members, ch.member)
		c.members = slices.Insert(slices.Clone(g.conf.members), i, ch.member)
	} else {
		c.members = slices.DeleteFunc(slices.Clone(g.conf.members), func(id string) bool { return id == ch.member })
	}
	if g.conf.keys != nil {
		c.keys = make(map[string][]byte, len(c.members))
		for _, id := range c.members {
			c.keys[id] = g.conf.keys[id]
		}
		if ch.op == opAdd {
			c.keys[ch.member] = ch.key
		}
	}
	prev := g.conf
	g.setConf(c)
	if g.configPayload(e) == nil {
		g.setConf(prev)
		return "the configuration would not fit in one " + strconv.Itoa(MaxPayload) + "-byte message"
	}
	g.dirty = true
	g.confCommitted, g.confAcked = false, g.confAcked[:0]
	// Every heartbeat whose acks still count was sent under this
	// configuration: a majority is counted over the members it was sent to.
	g.sent = [ackWindow]sentHeartbeat{}
	for i := range g.members {
		g.members[i].ackSeq = 0
	}
	g.configEvent(e, "proposed "+ch.op+" "+ch.member)
	g.heartbeat(e, typeHeartbeat) // carries the configuration; its acks commit it
	g.checkCommit(e)
	return ""
}

// onChange handles a member's forwarded change request.
func (g *group) onChange(e *Engine, m *wireMsg) string {
	if m.Leader != g.cfg.ID || g.role != RoleLeader || m.Term != g.term {
		return "" // for another leader, or an earlier leadership: the requester retries
	}
	var key []byte
	if m.Key != "" {
		k, err := keyEncoding.DecodeString(m.Key)
		if err != nil {
			return "change request from " + m.From + ": key is not base64url"
		}
		key = k
	}
	if reason := g.changeMembers(e, m.Op, m.Member, key); reason != "" {
		return "change request from " + m.From + ": " + m.Op + " " + m.Member + ": " + reason
	}
	return ""
}
