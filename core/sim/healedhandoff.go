package sim

import (
	"math/rand/v2"

	"github.com/electcore/electcore/core"
)

// healedHandoffs is the targeted schedule's part after the fault phase
// (quorum): on the healed network, where every hand-off must make its
// successor leader (handoff.go), it asks for hand-offs in the two cases a
// blind schedule meets only by luck. It begins when the quiet phase as the
// fault mix runs it would end, so that what that phase judges (liveness
// after the faults, the hand-offs of the run's own, a change asked after
// the heal) is untouched, and extends the run; in half the seeds, for the
// CI's budget. In this order, once the swarm agrees on a leader each time:
//
//   - once, the leader hands over (a resign, or a transfer to a random
//     member) and, as its resign naming a successor leaves, every other
//     member of its configuration restarts from what it persisted, before
//     the resign reaches it. Those members are in the resign's term but
//     know no leader of it, as after a restart or after voting while the
//     new leader's first heartbeat is still on its way: they must take the
//     resign and push their votes, or (with four members or more) the
//     successor lacks a majority and the hand-off is lost
//     (Result.HandoffsUnheard). On a healed network only a restart gets
//     there: a leader names only a successor that acked its configuration,
//     and that ack comes back after its first heartbeat reached the
//     others, unless some delivery took longer than the normal maximum.
//   - once, the leader's process is paused for 1.25 to 1.75 election
//     timeouts, past its lease (the others may elect meanwhile), and a
//     hand-off command reaches it during the pause: it must step down
//     before it acts on the batch it resumes with, its lease over, and
//     hand nothing over (Result.StalledHandoffs).
type healedHandoffs struct {
	w     *world
	r     *rand.Rand
	kinds []probeKind // still to ask for, in order
	since int64       // when the wait for an agreed leader began
	// on: the leader whose next resign naming a successor restarts the
	// others (-1: none).
	on int
}

type probeKind uint8

const (
	probeUnheard probeKind = iota
	probeStalled
)

func newHealedHandoffs(w *world) *healedHandoffs {
	h := &healedHandoffs{w: w, r: rand.New(rand.NewPCG(w.Seed, 0x686864)), on: -1}
	if h.r.IntN(2) == 0 {
		return h // half the seeds, for the CI's budget
	}
	h.kinds = []probeKind{probeUnheard, probeStalled}
	// After the fault mix's own action at the end of the fault phase,
	// which sets the heal and the end.
	w.at(w.faultEnd, func() {
		if _, ok := w.sc.(*faults); ok {
			w.at(w.end, h.start)
		}
	})
	return h
}

// start begins the probes at the end of the run as it stands (a change
// asked after the heal may have moved it).
func (h *healedHandoffs) start() {
	w := h.w
	if w.now < w.end {
		w.at(w.end, h.start)
		return
	}
	h.since = w.now
	h.poll()
}

// poll waits for an agreed leader (up to the liveness bound: a swarm
// without one is the liveness check's to report), then asks for the next
// probe within a heartbeat interval.
func (h *healedHandoffs) poll() {
	w := h.w
	if len(h.kinds) == 0 || w.now-h.since > w.bound {
		return
	}
	at := w.now + w.cfg.HeartbeatMs/2 + 1
	if w.agreed() >= 0 {
		at = w.now + h.r.Int64N(w.cfg.HeartbeatMs+1) // at any phase of the heartbeat
		w.at(at, h.ask)
	} else {
		w.at(at, h.poll)
	}
	w.end = max(w.end, at)
}

func (h *healedHandoffs) ask() {
	w, et := h.w, h.w.cfg.ElectionTimeoutMs
	l := w.agreed()
	if l < 0 || !w.healed() {
		h.poll()
		return
	}
	kind := h.kinds[0]
	h.kinds = h.kinds[1:]
	leader := w.nodes[l]
	c := core.Command{Kind: core.CmdResign, Group: "g"}
	if h.r.IntN(2) == 0 {
		// Refused if that member has not acked the leader's
		// configuration: then no resign leaves.
		if to := w.nodes[h.r.IntN(len(w.nodes))]; to != leader && w.inLeaderConf(leader, to) {
			c = core.Command{Kind: core.CmdTransfer, Group: "g", Target: to.id}
		}
	}
	// The next probe waits for an agreed leader again. A lost hand-off
	// counts once a later term begins, or at the end of the run once an
	// election timeout has passed since its resign (finishHandoffs).
	next := w.now + et/2
	switch kind {
	case probeUnheard:
		h.on = l
		w.command(leader, c)
		w.end = max(w.end, w.now+et+1)
	case probeStalled:
		p := et + et/4 + h.r.Int64N(et/2+1) // past any lease it holds
		w.pause(leader, false, w.now+p)
		w.at(w.now+1+h.r.Int64N(p-1), func() { w.command(leader, c) })
		next = w.now + p + w.cfg.HeartbeatMs
	}
	w.end = max(w.end, next)
	w.at(next, h.start)
}

// published sees every publish of the healed phase: a resign naming a
// successor from the armed leader restarts every other member of its
// configuration that is up, before the resign can reach it.
func (h *healedHandoffs) published(from *node, p *pubSent) {
	if from.idx != h.on || !p.ok || p.m.Type != "resign" || p.m.To == "" {
		return
	}
	h.on = -1
	w, to := h.w, p.m.To
	w.at(w.now, func() { // not inside the leader's step
		for _, n := range w.nodes {
			if n != from && n.id != to && n.up && w.inLeaderConf(from, n) {
				w.crash(n)
				w.start(n)
			}
		}
	})
}
