package sim

import (
	"bytes"
	"math/rand/v2"
	"slices"

	"github.com/electcore/electcore/core"
)

// targeted is the targeted adversarial schedule (Options.Targeted), on top of
// the fault mix's fault phase. The fault mix draws its faults blindly; this
// aims them at the moments the lease and the vote rules are thinnest. The
// clocks are at opposite extremes of the drift bound for the whole run (half
// the nodes fast, half slow), and every half to one election timeout one of:
//
//   - cut the leader off with a minority (quorum−1 nodes in all, itself
//     included) right after one of its heartbeats went out, so that its
//     followers acked it and the majority side elects as soon as the vote
//     rules allow, while the old lease runs on the slowest clock;
//   - hold back the next message of one kind (vote, ack, heartbeat,
//     election, resign) from one sender to one recipient for one to three
//     election timeouts;
//   - for one election timeout, hold back granted votes for one to three
//     election timeouts;
//   - crash and restart a node (the leader, half the time) several times in
//     a row, each life short;
//   - make the leader resign or transfer, its resign reaching only some
//     members;
//   - pause the leader's process for half to two election timeouts;
//   - tell a random member to campaign;
//   - two candidacies a term apart: right after one of its heartbeats the
//     leader resigns and nobody hears it, so it alone is a term ahead; once
//     every lease that heartbeat renewed has run out, a member and then,
//     up to two delays later, the old leader are told to campaign (the old
//     leader's vote request reaches the member late). A voter that granted
//     both pre-votes and then the member's vote must ignore the old
//     leader's request for an election timeout, or both win, each with a
//     lease from its campaign: the only schedule that exercises that rule.
type targeted struct {
	w *world
	r *rand.Rand

	cutLeader   bool   // cut the leader off after its next heartbeat
	holdKind    string // hold back the next message of this kind ...
	holdFrom    int    // ... from this node (-1: any)
	holdTo      int    // ... to this node
	votesUntil  int64  // hold back granted votes sent before this
	partialFrom int    // this node's next resign reaches only some members (-1: none)
	partial     bool   // the publish being sent is that resign
	lost        bool   // ... and reaches none
	raceFrom    int    // this leader's next heartbeat starts two candidacies (-1: none)
	raceL       int    // the race's old leader, whose vote requests ...
	raceY       int    // ... reach the other candidate late (-1: none)

	// The membership part (actMembership), on its own random stream.
	mr            *rand.Rand
	changeOnElect bool     // ask a change the instant a new leader is elected
	dupConfUntil  int64    // until then, every config message also arrives again, late
	old           [][]byte // recent votes, resigns and config messages, for replays
	oldFrom       []int

	healed *healedHandoffs // quorum: the hand-offs of the healed phase (healedhandoff.go)
}

func newTargeted(w *world) *targeted {
	t := &targeted{w: w, r: rand.New(rand.NewPCG(w.Seed, 0x746774)), holdFrom: -1, partialFrom: -1, raceFrom: -1, raceL: -1, raceY: -1,
		mr: rand.New(rand.NewPCG(w.Seed, 0x6d7467))}
	w.at(w.cfg.ElectionTimeoutMs, t.act)
	w.at(w.cfg.ElectionTimeoutMs, t.actMembership)
	if w.Mode == core.ModeQuorum {
		t.healed = newHealedHandoffs(w)
	}
	return t
}

// actMembership is the targeted membership schedule, when the run changes
// the configuration: every half to one election timeout, one of
//
//   - ask a change the instant the next leader is elected (before its
//     re-stamp can commit: the change must wait for it);
//   - hold back the next "leader" message (a new leader's first) to one
//     member for one to three election timeouts: the configuration sent
//     with it arrives first, so the member learns a version of a term it
//     has not entered;
//   - for one election timeout, deliver every config message twice, the
//     second copy one to three election timeouts late;
//   - crash a member and, as it restarts, deliver to it a few of the
//     recent votes, resigns and config messages again (a late hand-off
//     vote of a term it missed, a configuration it already passed).
func (t *targeted) actMembership() {
	w, r, et := t.w, t.mr, t.w.cfg.ElectionTimeoutMs
	if w.mem == nil || w.now >= w.faultEnd {
		return
	}
	defer w.at(w.now+et/2+r.Int64N(et/2+1), t.actMembership)
	switch r.IntN(4) {
	case 0:
		t.changeOnElect = true
	case 1:
		if t.holdKind == "" {
			t.holdKind, t.holdFrom, t.holdTo = "leader", -1, r.IntN(len(w.nodes))
		}
	case 2:
		t.dupConfUntil = w.now + et
	case 3:
		n := w.nodes[r.IntN(len(w.nodes))]
		if !n.up || len(t.old) == 0 {
			return
		}
		w.crash(n)
		w.at(min(w.now+1+r.Int64N(et), w.faultEnd-1), func() {
			w.start(n)
			for range 1 + r.IntN(3) {
				k := r.IntN(len(t.old))
				if t.oldFrom[k] != n.idx {
					w.lateCopy(t.oldFrom[k], n.idx, t.old[k], 1+r.Int64N(w.latency+1))
				}
			}
		})
	}
}

// elected: n was just elected; ask a change at once if told to.
func (t *targeted) elected(n *node) {
	if !t.changeOnElect || t.w.mem == nil || t.w.now >= t.w.faultEnd {
		return
	}
	t.changeOnElect = false
	t.w.at(t.w.now, func() { // once the election's events are applied
		t.w.mem.busy = false
		t.w.mem.change()
	})
}

func (t *targeted) act() {
	w, r, et := t.w, t.r, t.w.cfg.ElectionTimeoutMs
	if w.now >= w.faultEnd {
		return
	}
	defer w.at(w.now+et/2+r.Int64N(et/2+1), t.act)
	leader := -1
	for _, m := range w.nodes {
		if m.leader && m.up {
			leader = m.idx
			break
		}
	}
	switch r.IntN(9) {
	case 0, 1:
		t.cutLeader = true
	case 2:
		t.holdKind = []string{"vote", "ack", "heartbeat", "election", "resign"}[r.IntN(5)]
		t.holdFrom, t.holdTo = r.IntN(len(w.nodes)), r.IntN(len(w.nodes))
		if r.IntN(2) == 0 {
			t.holdFrom = -1
		}
	case 3:
		t.votesUntil = w.now + et
	case 4:
		n := r.IntN(len(w.nodes))
		if leader >= 0 && r.IntN(2) == 0 {
			n = leader
		}
		t.crashLoop(w.nodes[n], 2+r.IntN(4))
	case 5:
		if leader < 0 {
			return
		}
		c := core.Command{Kind: core.CmdResign, Group: "g"}
		if r.IntN(2) == 0 {
			c = core.Command{Kind: core.CmdTransfer, Group: "g", Target: w.nodes[r.IntN(len(w.nodes))].id}
		}
		t.partialFrom, t.lost = leader, false
		w.command(w.nodes[leader], c)
	case 6:
		if leader >= 0 {
			w.pause(w.nodes[leader], false, min(w.now+et/2+r.Int64N(3*et/2+1), w.faultEnd))
		}
	case 7:
		w.command(w.nodes[r.IntN(len(w.nodes))], core.Command{Kind: core.CmdCampaign, Group: "g"})
	case 8:
		t.raceFrom = leader
	}
}

// race starts two candidacies a term apart after leader l's heartbeat that
// has just left (the last action above), if every node is up, running and
// connected: the fault mix's other faults would spoil it; else it waits
// for l's next heartbeat.
func (t *targeted) race(l *node) {
	w, r := t.w, t.r
	for _, n := range w.nodes {
		quiet := n.up && n.pausedUntil <= w.now && w.outage == 0
		for _, m := range w.nodes {
			quiet = quiet && !w.cut(n.idx, m.idx)
		}
		if !quiet {
			t.raceFrom = l.idx
			return
		}
	}
	y := w.nodes[(l.idx+1+r.IntN(len(w.nodes)-1))%len(w.nodes)]
	campaign := core.Command{Kind: core.CmdCampaign, Group: "g"}
	// Every lease the heartbeat renewed, on the slowest clock, is over.
	drift := w.cfg.MaxDriftPPM
	if drift == 0 {
		drift = core.DefaultMaxDriftPPM
	}
	free := w.now + w.dmax + w.batchMax + w.cfg.ElectionTimeoutMs*1_000_000/(1_000_000-drift) + 1
	if free+2*(w.dmax+w.batchMax) >= w.faultEnd {
		return
	}
	w.at(w.now+1, func() {
		if l.leader && l.up {
			t.partialFrom, t.lost = l.idx, true
			w.command(l, core.Command{Kind: core.CmdResign, Group: "g"})
		}
	})
	// The member must not see the old leader's request before its own
	// votes are in: a candidate gives up for a later term's.
	t.raceL, t.raceY = l.idx, y.idx
	w.at(free, func() { w.command(y, campaign) })
	w.at(free+r.Int64N(2*(w.dmax+w.batchMax)+1), func() { w.command(l, campaign) })
}

// crashLoop crashes n, restarts it after up to three delays, and does so
// again k−1 times, each life lasting up to one election timeout.
func (t *targeted) crashLoop(n *node, k int) {
	w := t.w
	if k == 0 || w.now >= w.faultEnd {
		return
	}
	w.crash(n)
	back := min(w.now+1+t.r.Int64N(3*w.latency+1), w.faultEnd)
	w.at(back, func() {
		w.start(n)
		w.at(min(w.now+1+t.r.Int64N(w.cfg.ElectionTimeoutMs), w.faultEnd), func() { t.crashLoop(n, k-1) })
	})
}

// published sees every publish of the fault phase before it is sent.
func (t *targeted) published(from *node, payload []byte) {
	w := t.w
	k := msgKind(payload)
	t.partial = k == "resign" && from.idx == t.partialFrom
	if t.partial {
		t.partialFrom = -1
	}
	if k == "vote" || k == "resign" || k == "config" {
		const keep = 16
		if len(t.old) == keep {
			i := t.mr.IntN(keep)
			t.old[i], t.oldFrom[i] = payload, from.idx
		} else {
			t.old, t.oldFrom = append(t.old, payload), append(t.oldFrom, from.idx)
		}
	}
	if from.idx == t.raceFrom && (k == "heartbeat" || k == "leader") {
		t.raceFrom = -1
		t.race(from)
	}
	if !t.cutLeader || !from.leader || k != "heartbeat" && k != "leader" {
		return
	}
	t.cutLeader = false
	// The minority: the leader and quorum−2 others; cut off both ways a
	// moment after the heartbeat left, before or after it arrived.
	minority := []int{from.idx}
	for _, j := range t.r.Perm(len(w.nodes)) {
		if len(minority) >= len(w.nodes)/2 { // quorum − 1
			break
		}
		if j != from.idx {
			minority = append(minority, j)
		}
	}
	var rest []int
	for j := range w.nodes {
		if !slices.Contains(minority, j) {
			rest = append(rest, j)
		}
	}
	et := w.cfg.ElectionTimeoutMs
	s := w.now + t.r.Int64N(2*w.dmax+1)
	e := min(s+et+t.r.Int64N(2*et+1), w.faultEnd-1)
	if s >= e {
		return
	}
	w.at(s, func() { w.block(minority, rest, 1); w.block(rest, minority, 1) })
	w.at(e, func() { w.block(minority, rest, -1); w.block(rest, minority, -1) })
}

// tamper decides the fate of one delivery of the fault phase: dropped (a
// partial resign), or held back for extra ms.
func (t *targeted) tamper(from, to int, payload []byte) (drop bool, extra int64) {
	w := t.w
	k := msgKind(payload)
	et := w.cfg.ElectionTimeoutMs
	late := func() int64 { return et + t.r.Int64N(2*et+1) }
	if k == "config" && w.now < t.dupConfUntil {
		w.lateCopy(from, to, payload, et+t.mr.Int64N(2*et+1))
	}
	switch {
	case t.partial:
		return t.lost || t.r.IntN(2) == 0, 0
	case from == t.raceL && to == t.raceY && k == "election" && !bytes.Contains(payload, []byte(`"pre":true`)):
		t.raceL = -1
		return false, late()
	case t.holdKind != "" && k == t.holdKind && (t.holdFrom < 0 || t.holdFrom == from) && to == t.holdTo:
		t.holdKind = ""
		return false, late()
	case k == "vote" && w.now < t.votesUntil && bytes.Contains(payload, []byte(`"granted":true`)) &&
		!bytes.Contains(payload, []byte(`"pre":true`)) && t.r.IntN(2) == 0:
		return false, late()
	}
	return false, 0
}

// msgKind is a payload's "type" (the core writes it first), or "".
func msgKind(p []byte) string {
	const pre = `{"type":"`
	if !bytes.HasPrefix(p, []byte(pre)) {
		return ""
	}
	p = p[len(pre):]
	if i := bytes.IndexByte(p, '"'); i > 0 {
		return string(p[:i])
	}
	return ""
}
