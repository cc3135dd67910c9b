package sim

import "github.com/electcore/electcore/core"

// Hand-off success (quorum): a leader that resigns naming a successor
// (CmdResign, CmdTransfer, a transfer to a better member) pushes its vote
// and its followers' to that member for the next term, so that member
// should lead that term. Counted only for resigns sent on a healed
// network (no fault phase, no partition or outage, after the fault mix's
// last late message arrived) by the leader of the latest term, naming a
// member that is up: there, a hand-off that does not make its successor
// leader costs the group an election timeout for nothing.
//
// A resign sent too late for any hand-off is counted apart (superseded):
// the successor's term T+1 already holds so many votes for others (or its
// voters are past it) that no majority of the resigner's configuration can
// still vote for the successor in it. That is a leader deposed without
// knowing it (paused, or cut off while the others held an election that
// no one won): one vote per term forbids the hand-off, and the next
// election decides.

// handoff is a resign in flight: its successor and when it left.
type handoff struct {
	from, to int
	at       int64
	// unheard counts the members of from's configuration, not to, that
	// its resign reached in its term knowing no leader of it; need is how
	// many make the successor depend on them for a majority.
	unheard, need int
}

// healed reports whether the network is whole now: out of the fault
// phase, every message of it delivered, nothing cut off.
func (w *world) healed() bool {
	if f, ok := w.sc.(*faults); ok && (f.heal < 0 || w.now < f.heal) {
		return false
	}
	if w.outage > 0 || w.inFaultPhase() {
		return false
	}
	for _, row := range w.blocked {
		for _, b := range row {
			if b > 0 {
				return false
			}
		}
	}
	return true
}

// resigned notes a resign of term naming successor to, sent by n.
func (w *world) resigned(n *node, term uint64, to string) {
	k, ok := w.byID[to]
	if !ok || !w.nodes[k].up || !w.healed() {
		return
	}
	for t := range w.terms {
		if t > term {
			return // a deposed leader's resign (say, a backlog after a pause): the group moved on
		}
	}
	if !w.canStillVote(n, term+1, k) {
		w.res.HandoffsSuperseded++
		return
	}
	if w.handoffs == nil {
		w.handoffs = map[uint64]handoff{}
	}
	// Without the votes of more than len − majority members, the
	// resigner's and the successor's are no majority.
	w.handoffs[term+1] = handoff{from: n.idx, to: k, at: w.now, need: len(n.members) - (len(n.members)/2 + 1) + 1}
	w.res.HandoffsNamed++
}

// canStillVote reports whether a majority of n's configuration, the
// successor to among them, can still vote for to in term t: each is at most
// in t and has voted for nobody else in it (n itself votes for to).
func (w *world) canStillVote(n *node, t uint64, to int) bool {
	free := func(k int) bool {
		v := w.nodes[k]
		vote, ok := v.votes[t]
		return k == n.idx || v.maxTerm <= t && (!ok || vote == "" || vote == w.nodes[to].id)
	}
	if !free(to) {
		return false
	}
	can := 0
	for _, id := range n.members {
		if k, ok := w.byID[id]; ok && free(k) {
			can++
		}
	}
	return can >= len(n.members)/2+1
}

// handoffElected settles the hand-offs a new leader of term answers: its
// own term's (made good if it is the successor) and every earlier one
// still open (lost: a later term began without its successor leading).
func (w *world) handoffElected(n *node, term uint64) {
	for t, h := range w.handoffs {
		switch {
		case t == term && h.to == n.idx:
			delete(w.handoffs, t)
		case t <= term:
			w.handoffLost(t, h)
		}
	}
}

func (w *world) handoffLost(t uint64, h handoff) {
	delete(w.handoffs, t)
	w.res.HandoffsLost++
	if w.res.HandoffLostAtMs == 0 || h.at < w.res.HandoffLostAtMs {
		w.res.HandoffLostAtMs = h.at
	}
}

// successorCrashed forgets the hand-offs to n, which crashed: a successor
// that is down is not the core's to make leader.
func (w *world) successorCrashed(n *node) {
	for t, h := range w.handoffs {
		if h.to == n.idx {
			delete(w.handoffs, t)
			w.res.HandoffsNamed--
		}
	}
}

// finishHandoffs counts the hand-offs still open at the end of the run as
// lost if an election timeout has passed since their resign, else not at
// all (the run ended before they could finish).
func (w *world) finishHandoffs() {
	for t, h := range w.handoffs {
		if w.now-h.at >= w.cfg.ElectionTimeoutMs {
			w.handoffLost(t, h)
		} else {
			delete(w.handoffs, t)
			w.res.HandoffsNamed--
		}
	}
}

// resignArrived notes a hand-off's resign reaching a member of the
// resigner's configuration, not its successor, that persisted the resign's
// term but knows no leader of it (it restarted, or voted and has not heard
// the leader yet): it must take the resign and push its vote. Once so many
// did that the successor cannot win without them, the hand-off counts in
// Result.HandoffsUnheard.
func (w *world) resignArrived(n *node, payload []byte) {
	m, ok := parsePub(payload)
	if !ok || m.To == "" {
		return
	}
	h, open := w.handoffs[m.Term+1]
	if !open || h.unheard >= h.need || n.idx == h.to || n.idx == h.from || w.nodes[h.to].id != m.To ||
		n.known >= 0 || n.persisted.Term != m.Term || !w.inLeaderConf(w.nodes[h.from], n) {
		return
	}
	h.unheard++
	w.handoffs[m.Term+1] = h
	if h.unheard == h.need {
		w.res.HandoffsUnheard++
	}
}

// stalledHandoff counts a hand-off command reaching, on a healed network,
// a leader whose lease ran out before this step (it was paused past it):
// the leader must step down before it acts on the batch, and hand nothing
// over (Result.StalledHandoffs).
func (w *world) stalledHandoff(n *node, cmds []core.Command) {
	for _, c := range cmds {
		if c.Kind == core.CmdResign || c.Kind == core.CmdTransfer {
			w.res.StalledHandoffs++
			return
		}
	}
}
