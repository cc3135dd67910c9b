package sim

import (
	"fmt"
	"math/rand/v2"

	"github.com/electcore/electcore/core"
)

// scenario drives a run: it schedules faults and actions and watches the
// swarm's agreement.
type scenario interface {
	observe(t int64)              // the agreement may have changed at t
	elected(n *node, term uint64) // n became leader of term
	finish(t int64)               // the run ends at t
}

// faults is the fault-mix scenario: a fault phase, then a quiet phase in
// which the swarm must agree on a leader within the liveness bound and never
// stay without one for longer than the bound.
type faults struct {
	w *world
	// heal is when the quiet phase really begins: the fault phase is over
	// and every message sent during it has arrived. -1 until known.
	heal           int64
	agreeing       bool
	disagreeSince  int64
	reported       bool
	firstAgreement bool
}

func newFaults(w *world) *faults {
	f := &faults{w: w, heal: -1}
	r, cfg, F := w.flt, w.cfg, w.faultEnd
	n := len(w.nodes)
	w.echo = r.IntN(2) == 0
	w.end = F + 10*cfg.ElectionTimeoutMs + w.Faults.OutlierMaxMs + w.bound // provisional
	// Staggered boots.
	for _, nd := range w.nodes {
		w.at(r.Int64N(cfg.ElectionTimeoutMs/2+1), func() { w.start(nd) })
	}
	if w.Drain {
		// Its own stream, so that the rest of the seed's schedule is the
		// same with and without the drain.
		best := 0
		for i, nd := range w.nodes {
			if outranks(nd.cfg, w.nodes[best].cfg) {
				best = i
			}
		}
		nd := w.nodes[best]
		at := rand.New(rand.NewPCG(w.Seed, 0x647261696e)).Int64N(F)
		w.at(at, func() {
			if nd.up {
				w.command(nd, core.Command{Kind: core.CmdDrain, Group: "g"})
			} else {
				nd.drained = true // its host sends it with the next join
			}
		})
	}
	fm := w.Faults
	span := func(minD, maxD int64) (int64, int64) {
		s := r.Int64N(F)
		return s, min(s+minD+r.Int64N(max(maxD-minD, 1)), F)
	}
	for range fm.Partitions {
		s, e := span(cfg.HeartbeatMs, 3*cfg.ElectionTimeoutMs)
		var from, to []int
		switch kind := r.IntN(6); {
		case kind >= 4: // cut the leader off (one way or both) right after it speaks
			both := kind == 4
			var cut []int
			w.at(s, func() {
				for _, m := range w.nodes {
					if m.leader && m.up {
						others := make([]int, 0, n)
						for i := range n {
							if i != m.idx && r.IntN(3) > 0 {
								others = append(others, i)
							}
						}
						cut = append([]int{m.idx}, others...)
						w.block(cut[:1], cut[1:], 1)
						if both {
							w.block(cut[1:], cut[:1], 1)
						}
						return
					}
				}
			})
			w.at(e, func() {
				if cut != nil {
					w.block(cut[:1], cut[1:], -1)
					if both {
						w.block(cut[1:], cut[:1], -1)
					}
				}
			})
			continue
		case kind == 0 || kind == 1: // a split into two sides; kind 1 blocks one direction only
			side := r.Perm(n)
			k := 1 + r.IntN(max(n-1, 1))
			from, to = side[:k], side[k:]
			if kind == 0 {
				w.at(s, func() { w.block(from, to, 1); w.block(to, from, 1) })
				w.at(e, func() { w.block(from, to, -1); w.block(to, from, -1) })
				continue
			}
		case kind == 2: // one link, one way
			a, b := r.IntN(n), r.IntN(n)
			from, to = []int{a}, []int{b}
		default: // isolate one node
			a := r.IntN(n)
			all := make([]int, n)
			for i := range all {
				all[i] = i
			}
			w.at(s, func() { w.block([]int{a}, all, 1); w.block(all, []int{a}, 1) })
			w.at(e, func() { w.block([]int{a}, all, -1); w.block(all, []int{a}, -1) })
			continue
		}
		w.at(s, func() { w.block(from, to, 1) })
		w.at(e, func() { w.block(from, to, -1) })
	}
	for range fm.Crashes {
		s, e := span(0, 2*cfg.ElectionTimeoutMs)
		if r.IntN(2) == 0 {
			e = min(s+r.Int64N(3*w.latency+1), F) // a quick restart: back before anyone noticed
		}
		nd := w.nodes[r.IntN(n)]
		mid := r.IntN(3) == 0
		if r.IntN(3) == 0 {
			// Crash the leader (or whoever believes it is one) when possible.
			w.at(s, func() {
				for _, m := range w.nodes {
					if m.leader && m.up {
						w.crash(m)
						w.at(max(e, w.now+1), func() { w.start(m) })
						return
					}
				}
			})
			continue
		}
		w.at(s, func() {
			if mid {
				nd.crashMid = true
			} else {
				w.crash(nd)
			}
		})
		w.at(e, func() { nd.crashMid = false; w.start(nd) })
	}
	for range fm.Outages {
		s, e := span(cfg.HeartbeatMs, 2*cfg.ElectionTimeoutMs)
		w.at(s, func() { w.outage++ })
		w.at(e, func() { w.outage-- })
	}
	for range fm.WallJumps {
		s := r.Int64N(F)
		jump := 1000 + r.Int64N(86_400_000)
		if r.IntN(2) == 0 {
			jump = -jump
		}
		w.at(s, func() { w.wallOff += jump })
	}
	for range fm.Commands {
		s := r.Int64N(F)
		kind := []core.CommandKind{core.CmdCampaign, core.CmdResign, core.CmdTransfer}[r.IntN(3)]
		a, b := r.IntN(n), r.IntN(n)
		w.at(s, func() {
			target := w.nodes[a]
			if kind != core.CmdCampaign {
				for _, m := range w.nodes {
					if m.leader && m.up {
						target = m
						break
					}
				}
			}
			if !target.up {
				return
			}
			c := core.Command{Kind: kind, Group: "g"}
			if kind == core.CmdTransfer {
				c.Target = w.nodes[b].id
			}
			target.cmds = append(target.cmds, c)
			w.touch(target)
		})
	}
	for range fm.Pauses {
		s := r.Int64N(F)
		d := cfg.HeartbeatMs + r.Int64N(3*cfg.ElectionTimeoutMs)
		nd := w.nodes[r.IntN(n)]
		ofLeader := r.IntN(3) == 0
		w.at(s, func() { w.pause(nd, ofLeader, min(s+d, F)) })
	}
	for range fm.Replays {
		w.at(r.Int64N(F), w.replay)
	}
	// The end of the fault phase: heal everything, restart every node.
	w.at(F, func() {
		w.blocked, w.outage = nil, 0
		for _, nd := range w.nodes {
			nd.crashMid = false
			if err := w.start(nd); err != nil {
				w.violation(InvStepError, err.Error(), nd.idx)
			}
		}
		f.heal = max(F, w.maxDeliver)
		w.end = f.heal + w.bound + 2*cfg.ElectionTimeoutMs
		w.at(f.heal, func() {
			f.disagreeSince = w.now
			f.observe(w.now)
		})
		w.at(f.heal+w.bound+1, func() { f.check(w.now) })
	})
	return f
}

// pause freezes n's process (or, if ofLeader, the leader's, when there is
// one) until the real time until: it steps then, with its backlog. Its
// clock runs on, and so does its lease.
func (w *world) pause(n *node, ofLeader bool, until int64) {
	if ofLeader {
		for _, m := range w.nodes {
			if m.leader && m.up {
				n = m
				break
			}
		}
	}
	if !n.up || until <= w.now {
		return
	}
	n.pausedUntil = max(n.pausedUntil, until)
	w.res.Pauses++
	w.markDirty(w.now, until) // what it hears meanwhile is handled late
}

func (f *faults) elected(*node, uint64) {}

func (f *faults) observe(t int64) {
	w := f.w
	if f.heal < 0 || t < f.heal {
		return
	}
	if w.agreed() >= 0 {
		if !f.firstAgreement {
			f.firstAgreement = true
			w.res.LivenessMs = t - f.heal
			if w.mem != nil {
				w.mem.healedChange()
			}
		}
		f.agreeing = true
		return
	}
	if f.agreeing {
		f.agreeing = false
		f.disagreeSince = t
	}
	f.check(t)
}

func (f *faults) check(t int64) {
	w := f.w
	if f.reported || f.agreeing || w.agreed() >= 0 || t-f.disagreeSince <= w.bound {
		return
	}
	f.reported = true
	var ls []int
	for _, n := range w.nodes {
		ls = append(ls, n.idx)
	}
	w.violation(InvLiveness, fmt.Sprintf("no leader known to every node for %d ms after the faults ended at %d (bound %d ms): %s",
		t-f.disagreeSince, f.heal, w.bound, w.describe()), ls...)
}

func (f *faults) finish(t int64) {
	if f.heal < 0 {
		return
	}
	f.observe(t)
	f.check(t)
}

// describe summarises who is up, leads and follows whom.
func (w *world) describe() string {
	s := ""
	for _, n := range w.nodes {
		if s != "" {
			s += ", "
		}
		switch {
		case !n.up:
			s += n.id + " down"
		case n.leader:
			s += fmt.Sprintf("%s LEADER(t%d)", n.id, n.leaderTerm)
		case n.known >= 0:
			s += n.id + "→" + w.nodes[n.known].id
		default:
			s += n.id + "→?"
		}
	}
	return s
}

// outranks reports whether the node configured a is preferred to b (higher
// priority, 0 meaning the default — the checksum of the id, or its
// rendezvous priority — then the greater id), as the core ranks members.
func outranks(a, b core.Config) bool {
	pa, pb := priority(a), priority(b)
	return pa > pb || pa == pb && a.ID > b.ID
}

// priority is c's priority with the core's default filled in.
func priority(c core.Config) uint32 {
	switch {
	case c.Priority != 0:
		return c.Priority
	case c.BalancedPriority:
		return core.RendezvousPriority(c.Group, c.ID)
	}
	return core.Cksum([]byte(c.ID))
}
