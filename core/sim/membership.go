package sim

import (
	"crypto/ed25519"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/electcore/electcore/core"
)

// Membership changes in the fault mix (quorum mode, FaultMix.Spares and
// FaultMix.Changes), and what the checker verifies about configurations.
//
// The schedule: spare nodes boot waiting to be added (Config.AwaitConfig,
// their Members the group's current ones, as an operator would start them);
// at random instants of the fault phase a change is asked for against the
// latest committed configuration: add a spare or a removed node, remove a
// member (the leader, a crashed one or any), or replace one (a removal, then
// an addition). It is asked at the leader or at any live node (which
// forwards it, or refuses it), and asked again every half to one election
// timeout, at most three more times, until it is committed. The swarm keeps
// 3–7 voters (or the initial size, if outside that). Every other fault runs
// meanwhile; a node that holds a configuration restarts with it.
//
// The checker, on every quorum run, works from what the nodes persist (a
// member persists its configuration before it acts on it or acknowledges
// it) and what they publish:
//
//   - one configuration per version: no two member sets under one version
//     (term, index);
//   - a node's persisted version never goes back, across restarts, and a
//     configuration message is covered by its sender's persisted version;
//   - committed, in the checker's own terms: a version v is committed once
//     a majority of its members persisted it while in v's term, or acked
//     it in v's term holding it or a later version — Raft's "stored on a
//     majority in the term of the leader that wrote it" (§5.4.2), which
//     the leader's count of acks implies (not at one instant: each holder
//     keeps v or newer for good); then
//   - at most one committed configuration per index;
//   - consecutive committed configurations differ by at most one member;
//   - a committed configuration is never lost: a leader of a later term
//     starts from a configuration whose index is at least v's, and the same
//     members when it is v's index (versions along one history count their
//     writes, so that configuration is v);
//   - a leader is a member of its configuration, and no node campaigns
//     outside the configuration its request carries (a spare awaiting one
//     never campaigns);
//   - a configuration the core reports committed (EventConfig "committed")
//     is committed in the checker's terms.
//
// Liveness after the faults asks only the members of the leader's
// configuration to know it: removed nodes and spares never added need not.
// Once they do, one more change is asked of the healed group
// (healedChange), which must commit within HealedChangeETs election
// timeouts.

// version orders configurations as the core does: (term, index).
type version struct{ term, index uint64 }

func (v version) before(u version) bool {
	return v.term < u.term || v.term == u.term && v.index < u.index
}

func (v version) String() string { return fmt.Sprintf("(%d,%d)", v.term, v.index) }

// confRecord is what the checker knows of one version.
type confRecord struct {
	members   []string
	holders   []int // members that persisted it while in its term
	committed bool
}

// leaderStart is the configuration a leader of a term started from.
type leaderStart struct {
	node    int
	ver     version // the configuration it held (re-stamped under its term, if so)
	members []string
}

// confState is the checker's record of every configuration of a run.
type confState struct {
	initial    []string // Config.Members of the initial members
	recs       map[version]*confRecord
	committed  map[uint64]version // by index
	latest     version            // the committed version of the highest index
	leaders    map[uint64]leaderStart
	maxVoters  int
	minVoters  int
	hasChanges bool
}

func newConfState(s *setup) *confState {
	c := &confState{
		initial:   slices.Clone(s.ids[:s.Nodes]),
		recs:      map[version]*confRecord{},
		committed: map[uint64]version{},
		leaders:   map[uint64]leaderStart{},
		maxVoters: max(7, s.Nodes),
		minVoters: min(3, s.Nodes),
	}
	slices.Sort(c.initial)
	return c
}

// latestMembers is the committed configuration of the highest index (the
// initial members before any).
func (w *world) latestMembers() []string {
	if r := w.conf.recs[w.conf.latest]; r != nil && r.committed {
		return r.members
	}
	return w.conf.initial
}

// membersOf is the member set of version v as the checker knows it: the
// initial members for (0, 0), nil if never seen.
func (w *world) membersOf(v version) []string {
	if v.index == 0 {
		return w.conf.initial
	}
	if r := w.conf.recs[v]; r != nil {
		return r.members
	}
	return nil
}

// record notes that version v has members, reporting a second member set.
func (w *world) record(n *node, v version, members []string, how string) *confRecord {
	r := w.conf.recs[v]
	if r == nil {
		r = &confRecord{members: slices.Clone(members)}
		w.conf.recs[v] = r
		return r
	}
	if !slices.Equal(r.members, members) {
		w.violation(InvConfig, fmt.Sprintf("%s %s configuration %s as [%s], already known as [%s]",
			n.id, how, v, strings.Join(members, " "), strings.Join(r.members, " ")), n.idx)
	}
	return r
}

// persistConf checks and records the configuration in a state n persisted.
func (w *world) persistConf(n *node, p core.GroupState) {
	v := version{p.ConfTerm, p.ConfIndex}
	if v.before(n.maxConf) {
		w.violation(InvConfig, fmt.Sprintf("%s persisted configuration %s after %s", n.id, v, n.maxConf), n.idx)
	}
	n.maxConf = max2(n.maxConf, v)
	if v.index == 0 {
		return
	}
	if !slices.Equal(n.members, p.Members) {
		n.members = slices.Clone(p.Members)
		w.changed = true // the members liveness asks about may change
	}
	r := w.record(n, v, p.Members, "persisted")
	if p.Term == v.term {
		w.holds(n, v, r)
	}
}

// holds counts n, a member of v, as holding v in its term; a majority of v
// holding it there commits it (Raft's rule: a leader commits only what
// its own term's followers acknowledged).
func (w *world) holds(n *node, v version, r *confRecord) {
	if r.committed || slices.Contains(r.holders, n.idx) {
		return
	}
	if _, in := slices.BinarySearch(r.members, n.id); !in {
		return
	}
	r.holders = append(r.holders, n.idx)
	if len(r.holders) >= len(r.members)/2+1 {
		w.commit(v, r)
	}
}

func max2(a, b version) version {
	if a.before(b) {
		return b
	}
	return a
}

// commit records that v is committed and checks it against the other
// committed configurations and the leaders of later terms.
func (w *world) commit(v version, r *confRecord) {
	c := w.conf
	r.committed = true
	nodes := slices.Clone(r.holders)
	if u, ok := c.committed[v.index]; ok {
		w.violation(InvConfig, fmt.Sprintf("configurations %s [%s] and %s [%s] both committed at index %d",
			u, strings.Join(c.recs[u].members, " "), v, strings.Join(r.members, " "), v.index), nodes...)
		return
	}
	c.committed[v.index] = v
	if c.latest.index < v.index {
		if c.latest.index > 0 && !slices.Equal(c.recs[c.latest].members, r.members) {
			w.res.ConfigChanges++
			if w.mem != nil {
				w.mem.committed(v)
			}
		}
		c.latest = v
	}
	// The nearest committed configurations on either side differ from it by
	// at most one member.
	var lo, hi version
	for i, u := range c.committed {
		if i < v.index && i > lo.index {
			lo = u
		}
		if i > v.index && (hi.index == 0 || i < hi.index) {
			hi = u
		}
	}
	for _, u := range []version{lo, hi} {
		if u.index == 0 {
			continue
		}
		if d := symDiff(c.recs[u].members, r.members); d > 1 {
			w.violation(InvConfig, fmt.Sprintf("committed configurations %s [%s] and %s [%s] differ by %d members",
				u, strings.Join(c.recs[u].members, " "), v, strings.Join(r.members, " "), d), nodes...)
		}
	}
	for t, l := range c.leaders {
		if t > v.term {
			w.checkLeaderHas(t, l, v, r)
		}
	}
}

// checkLeaderHas: the leader of term t, which started from l, holds the
// committed configuration v of an earlier term.
func (w *world) checkLeaderHas(t uint64, l leaderStart, v version, r *confRecord) {
	parent := l.ver.index
	if l.ver.term == t {
		parent-- // re-stamped under its term: it held the same members at the index before
	}
	switch {
	case parent < v.index:
		w.violation(InvConfig, fmt.Sprintf("%s leads term %d from configuration index %d, without the committed %s [%s]",
			w.nodes[l.node].id, t, parent, v, strings.Join(r.members, " ")), l.node)
	case parent == v.index && !slices.Equal(l.members, r.members):
		w.violation(InvConfig, fmt.Sprintf("%s leads term %d from [%s] at index %d, where %s [%s] is committed",
			w.nodes[l.node].id, t, strings.Join(l.members, " "), parent, v, strings.Join(r.members, " ")), l.node)
	}
}

func symDiff(a, b []string) int {
	d := 0
	for _, x := range a {
		if !slices.Contains(b, x) {
			d++
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			d++
		}
	}
	return d
}

// electedConf checks the configuration a new leader of term holds: st is
// the state its election step offered to persist (or the last one).
func (w *world) electedConf(n *node, term uint64, st core.GroupState) {
	l := leaderStart{node: n.idx, ver: version{st.ConfTerm, st.ConfIndex}, members: slices.Clone(st.Members)}
	if l.ver.index == 0 {
		l.members = n.cfg.Members
		if n.cfg.AwaitConfig {
			l.members = nil
		}
	}
	if _, in := slices.BinarySearch(l.members, n.id); !in {
		w.violation(InvConfig, fmt.Sprintf("%s leads term %d outside its configuration %s [%s]",
			n.id, term, l.ver, strings.Join(l.members, " ")), n.idx)
	}
	if _, ok := w.conf.leaders[term]; ok {
		return // two leaders of one term: election safety reports it
	}
	w.conf.leaders[term] = l
	for v, r := range w.conf.recs {
		if r.committed && v.term < term {
			w.checkLeaderHas(term, l, v, r)
		}
	}
}

// publishedConf checks what a published message says of configurations:
// an election request names the candidate's version, which must list it; a
// configuration message must be the one known under its version and
// covered by what its sender persisted.
func (w *world) publishedConf(n *node, m *pubMsg) {
	v := version{m.ConfTerm, m.ConfIndex}
	switch m.Type {
	case "election":
		members := w.membersOf(v)
		if v.index == 0 && n.cfg.AwaitConfig {
			members = nil
		}
		if members == nil && v.index > 0 {
			return // a version never persisted: reported as such when it is
		}
		if _, in := slices.BinarySearch(members, n.id); !in {
			w.violation(InvConfig, fmt.Sprintf("%s campaigns (pre %v, term %d) outside its configuration %s [%s]",
				n.id, m.Pre, m.Term, v, strings.Join(members, " ")), n.idx)
		}
	case "ack":
		// An ack of v's own term, sent holding v or a later version: what
		// the leader counts. Its sender acked in v's term, so it had voted
		// in no later one, and from then on it holds v or newer, for good,
		// and refuses every candidate older: Raft's storer of v. It may
		// have moved on in the same step (one persist per step) to a later
		// term, by a vote request that came with the heartbeat it acks, or
		// to a later configuration: a stalled follower's one batch held
		// both v's heartbeat and the next leader's re-stamp (electhost sim
		// --adversary --membership, seed 13666). Were that later version
		// of a history without v, the leader of its term would lack a
		// committed v, which checkLeaderHas reports.
		if r := w.conf.recs[v]; r != nil && v.index > 0 && m.Term == v.term &&
			!(version{n.persisted.ConfTerm, n.persisted.ConfIndex}).before(v) {
			w.holds(n, v, r)
		}
	case "config":
		w.record(n, v, m.Members, "published")
		if p := (version{n.persisted.ConfTerm, n.persisted.ConfIndex}); p.before(v) {
			w.violation(InvPersist, fmt.Sprintf("%s sent configuration %s with persisted configuration %s", n.id, v, p), n.idx)
		}
	}
}

// reportedCommitted checks an EventConfig "committed": the checker must
// know a committed configuration at that index with those members.
func (w *world) reportedCommitted(n *node, ev *core.Event) {
	v, ok := w.conf.committed[ev.ConfIndex]
	if ok && slices.Equal(w.conf.recs[v].members, ev.Members) {
		return
	}
	w.violation(InvConfig, fmt.Sprintf("%s reports configuration index %d [%s] committed, which no majority of it holds in its term",
		n.id, ev.ConfIndex, strings.Join(ev.Members, " ")), n.idx)
}

// inLeaderConf reports whether n is a member of the configuration leader l
// persisted (liveness asks only those to know it).
func (w *world) inLeaderConf(l, n *node) bool {
	_, in := slices.BinarySearch(l.members, n.id)
	return in
}

// membership is the change schedule: one change asked for at a time.
type membership struct {
	w    *world
	r    *rand.Rand
	busy bool
	// Configuration messages to node noConfigTo are lost until noConfigUntil.
	noConfigTo    int
	noConfigUntil int64
	// healedDone, while the change asked after the heal is open, records
	// its commit if the configuration just committed has it.
	healedDone func(committed []string) bool
}

// dropConfig reports whether a delivery to node to is a configuration
// message kept from it (see committed).
func (m *membership) dropConfig(to int, payload []byte) bool {
	const pre = `{"type":"config"`
	return to == m.noConfigTo && m.w.now < m.noConfigUntil && len(payload) > len(pre) && string(payload[:len(pre)]) == pre
}

func newMembership(w *world) *membership {
	m := &membership{w: w, r: rand.New(rand.NewPCG(w.Seed, 0x6d656d))}
	w.mem = m
	for range w.Faults.Changes {
		w.at(m.r.Int64N(w.faultEnd), m.change)
	}
	return m
}

// change asks for one change against the latest committed configuration.
func (m *membership) change() {
	w, r := m.w, m.r
	if m.busy {
		return
	}
	cur := w.latestMembers()
	var out []int // nodes outside it
	for _, n := range w.nodes {
		if _, in := slices.BinarySearch(cur, n.id); !in {
			out = append(out, n.idx)
		}
	}
	canAdd := len(out) > 0 && len(cur) < w.conf.maxVoters
	canRemove := len(cur) > w.conf.minVoters
	switch k := r.IntN(3); {
	case canAdd && (k == 0 || !canRemove):
		m.ask(core.CmdAddMember, w.nodes[out[r.IntN(len(out))]].id, 0, nil)
	case canRemove && k == 2 && len(out) > 0: // replace: remove, then add
		add := w.nodes[out[r.IntN(len(out))]].id
		m.ask(core.CmdRemoveMember, m.victim(cur), 0, func() {
			if len(w.latestMembers()) < w.conf.maxVoters {
				m.ask(core.CmdAddMember, add, 0, nil)
			}
		})
	case canRemove:
		m.ask(core.CmdRemoveMember, m.victim(cur), 0, nil)
	}
}

// committed: a change v just committed. Half the time, if a member of it
// is up but has not persisted it, crash the leader at once, keep every
// configuration message from that member for two election timeouts (those
// in flight and those the voters offer it) and tell it to campaign: the
// election restriction (votes refused to a candidate with an older
// configuration) is then all that keeps it from leading without v. Random
// faults rarely line this up.
func (m *membership) committed(v version) {
	w, r := m.w, m.r
	if m.healedDone != nil && m.healedDone(w.conf.recs[v].members) {
		return
	}
	if !w.inFaultPhase() || r.IntN(2) == 0 {
		return
	}
	members := w.conf.recs[v].members
	var behind []*node
	for _, n := range w.nodes {
		_, in := slices.BinarySearch(members, n.id)
		if in && n.up && !n.leader && (version{n.persisted.ConfTerm, n.persisted.ConfIndex}).before(v) {
			behind = append(behind, n)
		}
	}
	if len(behind) == 0 {
		return
	}
	stale := behind[r.IntN(len(behind))]
	back := w.cfg.ElectionTimeoutMs + r.Int64N(w.cfg.ElectionTimeoutMs)
	m.noConfigTo, m.noConfigUntil = stale.idx, w.now+2*w.cfg.ElectionTimeoutMs
	w.at(w.now+1, func() {
		for _, n := range w.nodes {
			if n.leader && n.up {
				w.crash(n)
				w.at(w.now+back, func() { w.start(n) })
			}
		}
		w.res.StaleCampaigns++
		w.command(stale, core.Command{Kind: core.CmdCampaign, Group: "g"})
	})
}

// healedChange asks one change of the group once it agrees on a leader
// after the faults (every node up, the network whole): add a node outside
// the latest committed configuration, or remove a member (the leader, a
// third of the time), asked at the leader or at any member and again every
// half election timeout, as a host does. It must be committed within
// HealedChangeETs election timeouts of the first ask.
func (m *membership) healedChange() {
	w, r := m.w, m.r
	cur := w.latestMembers()
	var out []string
	for _, n := range w.nodes {
		if _, in := slices.BinarySearch(cur, n.id); !in {
			out = append(out, n.id)
		}
	}
	kind, target := core.CmdRemoveMember, m.victim(cur)
	switch {
	case len(out) > 0 && len(cur) < w.conf.maxVoters && (r.IntN(2) == 0 || len(cur) <= w.conf.minVoters):
		kind, target = core.CmdAddMember, out[r.IntN(len(out))]
	case len(cur) <= w.conf.minVoters:
		return
	}
	asked, et := w.now, w.cfg.ElectionTimeoutMs
	deadline := asked + HealedChangeETs*et
	w.end = max(w.end, deadline+1)
	m.healedDone = func(members []string) bool {
		_, in := slices.BinarySearch(members, target)
		if in == (kind == core.CmdAddMember) {
			w.res.HealedChangeMs = w.now - asked
			m.healedDone = nil
		}
		return m.healedDone == nil
	}
	var try func()
	try = func() {
		if m.healedDone == nil {
			return
		}
		if w.now >= deadline {
			all := make([]int, len(w.nodes))
			for i := range all {
				all[i] = i
			}
			w.violation(InvLiveness, fmt.Sprintf("%s %s, asked at %d of the healed group, not committed within %d election timeouts: %s",
				kind, target, asked, HealedChangeETs, w.describe()), all...)
			return
		}
		at := w.nodes[r.IntN(len(w.nodes))]
		for _, n := range w.nodes {
			if n.leader && n.up && r.IntN(2) == 0 {
				at = n
			}
		}
		c := core.Command{Kind: kind, Group: "g", Target: target}
		if kind == core.CmdAddMember && w.cfg.Auth == core.AuthEd25519 {
			c.Key = ed25519.NewKeyFromSeed(simKey(w.Seed, "node "+target)).Public().(ed25519.PublicKey)
		}
		w.res.ConfigCommands++
		w.command(at, c)
		w.at(min(w.now+et/2, deadline), try)
	}
	try()
}

// HealedChangeETs bounds, in election timeouts, how long a membership
// change asked of a healed group may take to commit (healedChange).
const HealedChangeETs = 6

// victim picks a member to remove: the leader, a crashed member or any.
func (m *membership) victim(cur []string) string {
	w, r := m.w, m.r
	switch r.IntN(3) {
	case 0:
		for _, n := range w.nodes {
			if n.leader && n.up && slices.Contains(cur, n.id) {
				return n.id
			}
		}
	case 1:
		for _, i := range r.Perm(len(w.nodes)) {
			if n := w.nodes[i]; !n.up && slices.Contains(cur, n.id) {
				return n.id
			}
		}
	}
	return cur[r.IntN(len(cur))]
}

// ask hands the change to the leader or to any live node, and asks again
// until it is committed (at most three more times, within the fault phase);
// then runs next, if it was committed.
func (m *membership) ask(kind core.CommandKind, target string, attempt int, next func()) {
	w, r := m.w, m.r
	m.busy = false
	if !w.inFaultPhase() || attempt > 3 {
		return
	}
	cur := w.latestMembers()
	_, in := slices.BinarySearch(cur, target)
	if kind == core.CmdAddMember && in || kind == core.CmdRemoveMember && !in {
		if next != nil {
			next()
		}
		return // done
	}
	if kind == core.CmdAddMember && len(cur) >= w.conf.maxVoters || kind == core.CmdRemoveMember && len(cur) <= w.conf.minVoters {
		return // another change got there first (one the core still held)
	}
	m.busy = true
	var at *node
	if r.IntN(2) == 0 {
		for _, n := range w.nodes {
			if n.leader && n.up {
				at = n
			}
		}
	}
	if at == nil {
		at = w.nodes[r.IntN(len(w.nodes))]
	}
	c := core.Command{Kind: kind, Group: "g", Target: target}
	if kind == core.CmdAddMember && w.cfg.Auth == core.AuthEd25519 {
		c.Key = ed25519.NewKeyFromSeed(simKey(w.Seed, "node "+target)).Public().(ed25519.PublicKey)
	}
	if at.up {
		w.res.ConfigCommands++
		w.command(at, c)
	}
	et := w.cfg.ElectionTimeoutMs
	w.at(w.now+et/2+r.Int64N(et/2+1), func() { m.ask(kind, target, attempt+1, next) })
}

// outsider reports whether a "sender X is not a member" refusal by n is
// one the configuration explains: X is outside the configuration n had
// persisted when the step began, the one it holds at its end, or one its
// config events show it held during the step (quorum mode; bully members
// never change).
func (w *world) outsider(n *node, reason string) bool {
	if w.Mode != core.ModeQuorum {
		return false
	}
	x, ok := strings.CutPrefix(reason, "sender ")
	if x, ok = strings.CutSuffix(x, " is not a member"); !ok {
		return false
	}
	if _, in := slices.BinarySearch(n.membersBefore, x); !in {
		return true
	}
	if n.offered != nil && n.offered.ConfIndex > 0 {
		if _, in := slices.BinarySearch(n.offered.Members, x); !in {
			return true // held at the end of the step, saved or not
		}
	}
	for _, members := range n.heldInStep {
		if _, in := slices.BinarySearch(members, x); !in {
			return true
		}
	}
	return false
}
