package sim

import (
	"fmt"
	"slices"

	"github.com/electcore/electcore/core"
)

// measure drives the measuring scenarios on a quiet network: wait until the
// swarm has settled on a leader, then crash it (failover), make it resign
// (resign) or split the swarm and heal it (heal); record how long the swarm
// takes to agree again; repeat Cycles times.
type measure struct {
	w          *world
	state      int
	cycles     int
	at         int64 // when the current disruption began
	old        int   // the leader disrupted
	gotElected bool
	pubs       int64 // election publishes counter at the disruption
	first      bool
	sides      [2][]int
	heal       Heal
	settleBy   int64 // a leader must be agreed by then, or the run fails liveness
	fo         Failover
	ho         Handoff
	maxTerm    uint64
}

const (
	stSettling = iota
	stCrashed
	stResigning
	stPartitioned
	stHealing
)

func newMeasure(w *world) *measure {
	m := &measure{w: w}
	cfg := w.cfg
	for _, nd := range w.nodes {
		w.at(w.flt.Int64N(cfg.HeartbeatMs), func() { w.start(nd) })
	}
	w.end = 1 << 62
	m.settle(0)
	return m
}

// settle schedules the next disruption once transfers to a better member
// (after two election timeouts of steady contact) have had time to happen,
// at a random phase of the heartbeat.
func (m *measure) settle(t int64) {
	cfg := m.w.cfg
	d := 2*cfg.ElectionTimeoutMs + 2*cfg.HeartbeatMs + m.w.flt.Int64N(cfg.HeartbeatMs)
	m.settleBy = t + d + m.w.bound
	m.w.at(t+d, m.try)
}

func (m *measure) try() {
	w := m.w
	l := w.agreed()
	if l < 0 && w.now >= m.settleBy {
		// Nothing to disrupt: the quiet network never settled. Later cycles
		// would only wait again, so the run ends here.
		all := make([]int, len(w.nodes))
		for i := range all {
			all[i] = i
		}
		w.violation(InvLiveness, fmt.Sprintf("%s: no leader known to every node by %d ms, a liveness bound (%d ms) after the swarm should have settled: %s",
			w.Scenario, w.now, w.bound, w.describe()), all...)
		w.end = w.now
		return
	}
	if l < 0 {
		w.at(w.now+w.cfg.HeartbeatMs, m.try)
		return
	}
	m.at, m.old, m.gotElected, m.pubs = w.now, l, false, w.res.ElectionPublishes
	cycle := m.cycles
	switch w.Scenario {
	case ScenarioFailover:
		m.state = stCrashed
		m.fo = Failover{AtMs: w.now, Leader: w.nodes[l].id}
		w.crash(w.nodes[l])
	case ScenarioResign:
		m.state = stResigning
		m.ho = Handoff{AtMs: w.now, From: w.nodes[l].id}
		n := w.nodes[l]
		n.cmds = append(n.cmds, core.Command{Kind: core.CmdResign, Group: "g"})
		w.touch(n)
	case ScenarioHeal:
		m.state = stPartitioned
		perm := w.flt.Perm(len(w.nodes))
		k := len(perm) / 2
		if w.flt.IntN(2) == 0 {
			k = (len(perm) + 1) / 2
		}
		m.sides = [2][]int{perm[:k], perm[k:]}
		w.block(m.sides[0], m.sides[1], 1)
		w.block(m.sides[1], m.sides[0], 1)
		w.at(w.now+w.bound+2*w.cfg.HeartbeatMs, m.healNow)
		return
	}
	// A disruption that is not over within the liveness bound is a failure.
	w.at(w.now+w.bound+1, func() {
		if m.cycles == cycle && m.state != stSettling {
			m.fail()
		}
	})
}

func (m *measure) fail() {
	w := m.w
	all := make([]int, len(w.nodes))
	for i := range all {
		all[i] = i
	}
	w.violation(InvLiveness, fmt.Sprintf("%s at %d: no leader known to every node within %d ms: %s",
		w.Scenario, m.at, w.bound, w.describe()), all...)
	if m.state == stCrashed {
		w.start(w.nodes[m.old])
	}
	m.next(w.now)
}

// healNow ends the partition, first noting whether each side had settled.
func (m *measure) healNow() {
	w := m.w
	settled := 0
	m.maxTerm = 0
	for _, side := range m.sides {
		leader := -1
		for _, i := range side {
			if n := w.nodes[i]; n.leader {
				m.maxTerm = max(m.maxTerm, n.leaderTerm)
				if leader >= 0 {
					leader = -2
				} else if leader == -1 {
					leader = i
				}
			}
		}
		if leader >= 0 && !slices.ContainsFunc(side, func(i int) bool { return w.nodes[i].known != leader }) {
			settled++
		}
	}
	m.heal = Heal{AtMs: w.now, SidesSettled: settled}
	for _, side := range m.sides {
		m.heal.Sides = append(m.heal.Sides, len(side))
	}
	w.block(m.sides[0], m.sides[1], -1)
	w.block(m.sides[1], m.sides[0], -1)
	m.at, m.state = w.now, stHealing
	cycle := m.cycles
	w.at(w.now+w.bound+1, func() {
		if m.cycles == cycle && m.state != stSettling {
			m.fail()
		}
	})
	m.observe(w.now)
}

func (m *measure) elected(n *node, term uint64) {
	w := m.w
	if m.gotElected || n.idx == m.old {
		return
	}
	switch m.state {
	case stCrashed:
		m.fo.ElectedMs = w.now - m.at
	case stResigning:
		m.ho.ElectedMs = w.now - m.at
		m.ho.To = n.id
	default:
		return
	}
	m.gotElected = true
}

func (m *measure) observe(t int64) {
	w := m.w
	l := w.agreed()
	if !m.first && l >= 0 {
		m.first = true
		w.res.FirstLeaderMs = t
	}
	if l < 0 {
		return
	}
	switch m.state {
	case stCrashed:
		if l == m.old {
			return
		}
		m.fo.KnownMs = t - m.at
		m.fo.Publishes = w.res.ElectionPublishes - m.pubs
		m.fo.NewLeader = w.nodes[l].id
		w.res.Failovers = append(w.res.Failovers, m.fo)
		old := w.nodes[m.old]
		w.at(t+w.cfg.HeartbeatMs, func() { w.start(old) })
	case stResigning:
		if l == m.old {
			return
		}
		m.ho.KnownMs = t - m.at
		m.ho.Publishes = w.res.ElectionPublishes - m.pubs
		w.res.Handoffs = append(w.res.Handoffs, m.ho)
	case stHealing:
		m.heal.ConvergedMs = t - m.at
		m.heal.Leader = w.nodes[l].id
		m.heal.Term = w.nodes[l].leaderTerm
		m.heal.MaxTermAtHeal = m.maxTerm
		w.res.Heals = append(w.res.Heals, m.heal)
	default:
		return
	}
	m.next(t)
}

func (m *measure) next(t int64) {
	m.state = stSettling
	m.cycles++
	if m.cycles >= m.w.Cycles {
		m.w.end = t + 2*m.w.cfg.HeartbeatMs
		// Let a crashed leader restart before the end.
		return
	}
	m.settle(t)
}

func (m *measure) finish(int64) {}
