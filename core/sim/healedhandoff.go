package sim

import (
	"math/rand/v2"

	"github.com/electcore/electcore/core"
)

// healedHandoffs is the targeted schedule's part after the fault phase
// (quorum): on the healed network, where every hand-off must make its
// successor leader (handoff.go), it asks for hand-offs in cases a blind
// schedule meets only by luck. It begins when the quiet phase as the fault
// mix runs it would end, so that what that phase judges (liveness after
// the faults, the hand-offs of the run's own, a change asked after the
// heal) is untouched, and extends the run; in half the seeds, for the CI's
// budget. In this order, once the swarm agrees on a leader each time, the
// leader is told to hand over (a resign, or a transfer to a random member,
// refused if that member has not acked its configuration) and:
//
//   - as its resign naming a successor leaves, every other member of its
//     configuration restarts from what it persisted, before the resign
//     reaches it. Those members are in the resign's term but know no
//     leader of it, as after a restart or after voting while the new
//     leader's first heartbeat is still on its way: they must take the
//     resign and push their votes, or (with four members or more) the
//     successor lacks a majority and the hand-off is lost
//     (Result.HandoffsUnheard). On a healed network only a restart gets
//     there: a leader names only a successor that acked its configuration,
//     and that ack comes back after its first heartbeat reached the
//     others, unless some delivery took longer than the normal maximum.
//   - its resign reaches the successor an election timeout late, so the
//     others' pushed votes make it leader first (this hand-off is not
//     judged: a delivery was late). As soon as it holds a lease, its
//     process is paused for 1.25 to 1.75 election timeouts, past that
//     lease (the others elect meanwhile), and a
//     hand-off command reaches it during the pause. It must step down
//     before it acts on the batch it resumes with, and hand nothing over
//     (Result.StalledHandoffs); and the late resign in that batch, naming
//     it for the term it led and left, must not make it lead that term
//     again (Result.LateHandoffResigns).
type healedHandoffs struct {
	w     *world
	r     *rand.Rand
	kinds []probeKind // still to ask for, in order
	since int64       // when the wait for an agreed leader began
	// on: the leader whose next resign naming a successor restarts the
	// others (-1: none).
	on int
	// late: the leader whose next resign naming a successor reaches that
	// successor an election timeout late (-1: none); lateTo, lateTerm:
	// that successor and its term (-1: none); lateDue: when the late
	// delivery was sent, 0 before.
	late, lateTo int
	lateTerm     uint64
	lateDue      int64
}

type probeKind uint8

const (
	probeUnheard probeKind = iota
	probeLate
)

func newHealedHandoffs(w *world) *healedHandoffs {
	h := &healedHandoffs{w: w, r: rand.New(rand.NewPCG(w.Seed, 0x686864)), on: -1, late: -1, lateTo: -1}
	if h.r.IntN(2) == 0 {
		return h // half the seeds, for the CI's budget
	}
	h.kinds = []probeKind{probeUnheard, probeLate}
	// After the fault mix's own action at the end of the fault phase,
	// which sets the heal and the end.
	w.at(w.faultEnd, func() {
		if _, ok := w.sc.(*faults); ok {
			w.at(w.end, h.start)
		}
	})
	return h
}

// start begins the next probe at the end of the run as it stands (a
// change asked after the heal, or the last probe, may have moved it).
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
	h.on, h.late = -1, -1
	// A lost hand-off counts once a later term begins, or at the end of
	// the run once an election timeout has passed since its resign
	// (finishHandoffs).
	end := w.now + et + 1
	switch kind {
	case probeUnheard:
		h.on = l
	case probeLate:
		h.late = l
		end = w.now + 9*et/4 + w.cfg.HeartbeatMs // past the successor's pause
	}
	w.command(leader, h.handoff(leader))
	w.end = max(w.end, end)
	w.at(end, h.start)
}

// handoff is a command to hand over from n: a resign, or a transfer to a
// random member of its configuration.
func (h *healedHandoffs) handoff(n *node) core.Command {
	w := h.w
	if h.r.IntN(2) == 0 {
		if to := w.nodes[h.r.IntN(len(w.nodes))]; to != n && w.inLeaderConf(n, to) {
			return core.Command{Kind: core.CmdTransfer, Group: "g", Target: to.id}
		}
	}
	return core.Command{Kind: core.CmdResign, Group: "g"}
}

// published sees every publish of the healed phase, for the armed
// leader's resign naming a successor.
func (h *healedHandoffs) published(from *node, p *pubSent) {
	if !p.ok || p.m.Type != "resign" || p.m.To == "" {
		return
	}
	w, to := h.w, p.m.To
	switch from.idx {
	case h.late:
		// Not a hand-off on a healed network: one delivery is late.
		h.late, h.lateTo, h.lateTerm, h.lateDue = -1, w.byID[to], p.m.Term+1, 0
		if _, ok := w.handoffs[h.lateTerm]; ok {
			delete(w.handoffs, h.lateTerm)
			w.res.HandoffsNamed--
		}
	case h.on:
		// Restart the others before the resign can reach them.
		h.on = -1
		w.at(w.now, func() { // not inside the leader's step
			for _, n := range w.nodes {
				if n != from && n.id != to && n.up && w.inLeaderConf(from, n) {
					w.crash(n)
					w.start(n)
				}
			}
		})
	}
}

// hold is the extra delay of one delivery of the healed phase: the late
// resign's to its successor.
func (h *healedHandoffs) hold(to int, payload []byte) int64 {
	if to != h.lateTo || h.lateDue != 0 || msgKind(payload) != "resign" {
		return 0
	}
	et := h.w.cfg.ElectionTimeoutMs
	h.lateDue = h.w.now + et
	return et
}

// leased: n, leader of term, just took or extended its lease. The
// successor of the late resign, leading before that resign arrived, is
// paused past its lease once it holds one, with the resign and a hand-off
// command arriving meanwhile.
func (h *healedHandoffs) leased(n *node, term uint64) {
	if n.idx != h.lateTo || term != h.lateTerm {
		return
	}
	h.lateTo = -1
	w, et := h.w, h.w.cfg.ElectionTimeoutMs
	if h.lateDue == 0 || w.now >= h.lateDue {
		return // the resign came first
	}
	w.res.LateHandoffResigns++
	p := et + et/4 + h.r.Int64N(et/2+1)
	c := h.handoff(n)
	w.at(w.now, func() { // after this step
		w.pause(n, false, w.now+p)
		w.at(w.now+1+h.r.Int64N(p-1), func() { w.command(n, c) })
	})
}
