package core

import (
	"errors"
	"math"
	"slices"
	"strconv"
)

// Engine hosts any number of election groups and routes bus messages to them
// by topic. It is not safe for concurrent use: a host owns one Engine and
// calls Step from one goroutine at a time.
type Engine struct {
	groups map[string]*group // by topic
	timers timerHeap

	// Per-Step scratch, kept to save allocations.
	now, wall int64
	out       *Output
	enc       encoder
	msg       wireMsg
	dirty     []*group
	due       []*group

	// Campaign admission: campaigning counts the rounds admitted and not yet
	// ended (flights, in order of admission); waiting holds, in order, the
	// groups whose due campaign waits for one to end.
	campaigning  int
	maxCampaigns int
	flights      []*group
	waiting      []*group

	reusePayloads bool
	// maxHeartbeatMs is the longest heartbeat interval of the groups ever
	// joined: heartbeatEarly looks that far ahead, halved.
	maxHeartbeatMs int64
}

// NewEngine returns an engine with no groups.
func NewEngine() *Engine {
	return &Engine{groups: make(map[string]*group), maxCampaigns: maxCampaigns}
}

// ReusePayloads lets every Step write its published payloads over the
// previous Step's: the payloads of an Output are then valid only until the
// next Step. A host that copies each Output out before it steps again (the
// wasm module encodes it for its caller) saves the memory of every published
// message; in wasm that memory also cost garbage collections, which slowed
// every step while they ran.
func (e *Engine) ReusePayloads() { e.reusePayloads = true }

// Step applies one input batch and appends what it produced to out (reset
// first with out.Reset to reuse its buffers). A leader whose lease ended by
// now steps down first; then inbound messages are handled, then commands,
// then the other timers that are due, so a heartbeat arriving in the same
// batch as an election deadline wins. A Step runs at most 1,024 due timers,
// oldest first; when more are due, WakeAt is at or before Now. When they
// include a quorum leader's heartbeat, every other quorum leader's due
// within half its interval goes with them (heartbeatEarly). Campaigns
// the timers start are admitted at most maxCampaigns rounds at a time
// (admitted); the others wait, in order.
func (e *Engine) Step(in *Input, out *Output) {
	if in.Now > e.now {
		e.now = in.Now
	}
	e.wall, e.out = in.Wall, out
	if e.reusePayloads {
		e.enc.reuse()
	}
	for i := range in.Join {
		e.join(&in.Join[i])
	}
	e.expireLeases()
	for i := range in.Inbound {
		e.receive(&in.Inbound[i])
	}
	for i := range in.Commands {
		e.command(&in.Commands[i])
	}
	var held []*group
	ticks, beat := 0, false
	for len(e.timers) > 0 && e.timers[0].wake <= e.now && ticks < maxTicksPerStep {
		g := e.timers[0]
		if in.Backlog && g.campaignDue(e.now) && e.now < g.electionDeadline+g.cfg.HeartbeatMs {
			// A campaign behind received messages waits for them: out of
			// the heap's way until the loop ends, then due again.
			held = append(held, g)
			g.wake = e.now + 1
			e.timers.fix(g.heapIdx)
			continue
		}
		if !e.admitted(g) {
			continue
		}
		beat = beat || g.heartbeatDue(e.now)
		g.tick(e)
		e.touch(g)
		ticks++
	}
	if beat {
		e.heartbeatEarly(maxTicksPerStep - ticks)
	}
	for _, g := range held {
		g.wake = g.nextWake()
		e.timers.fix(g.heapIdx)
	}
	e.admit(in.Backlog)
	for _, g := range e.dirty {
		out.Persist = append(out.Persist, g.state())
		g.dirty = false
	}
	e.dirty = e.dirty[:0]
	out.WakeAt = 0
	if len(e.timers) > 0 && e.timers[0].wake != waitingWake {
		out.WakeAt = e.timers[0].wake
	}
	if len(e.waiting) > 0 {
		// A waiting campaign runs when a round ends: at the latest when
		// the oldest flight's time is up, at once if a slot is free (a
		// backlog held it).
		at := e.now
		if e.campaigning >= e.maxCampaigns && len(e.flights) > 0 {
			at = max(e.now, e.flights[0].flightEnd)
		}
		if out.WakeAt == 0 || at < out.WakeAt {
			out.WakeAt = at
		}
	}
	e.out = nil
}

// heartbeatEarly sends, with the heartbeats this step sent on time, those
// of the other quorum leaders due within half their interval (at most
// budget): an engine leading many groups then beats them all in one phase,
// one step and one envelope per peer set each interval, instead of one per
// phase its groups happened to be elected in. Sending early is always safe:
// a lease runs from the send of the heartbeat a majority acked, so an early
// one can only end the lease sooner, and the next heartbeat follows a whole
// interval later. Not before leaseNotBefore: a heartbeat sent then earns
// no lease.
func (e *Engine) heartbeatEarly(budget int) {
	e.due = e.timersBy(e.due[:0], 0, e.now+e.maxHeartbeatMs/2)
	for _, g := range e.due {
		if budget == 0 {
			break
		}
		if g.role != RoleLeader || g.cfg.Mode != ModeQuorum || g.leaseOver(e.now) || e.now < g.leaseNotBefore ||
			g.heartbeatAt <= e.now || g.heartbeatAt-e.now > g.cfg.HeartbeatMs/2 {
			continue
		}
		g.tick(e)
		e.touch(g)
		budget--
	}
	clear(e.due)
}

// maxCampaigns bounds the campaign rounds an engine's timers start and that
// have not ended (won, lost to a leader heard, or an election timeout old):
// a due campaign beyond them waits, in order, for one to end. An agent
// joining 10,000 groups otherwise started all their first elections within
// one election timeout, and on a host that could not answer them in time
// every group's members campaigned again, round after round.
const maxCampaigns = 1024

// waitingWake is the wake of a group whose campaign waits in e.waiting:
// out of the timer heap's way until admit takes it.
const waitingWake = math.MaxInt64

// admitted reports whether g, the timer heap's top and due, may tick: only
// a campaign a quorum group's timer starts is bounded. A round whose time
// is up ends its flight; a campaign that finds no free slot (or others
// waiting before it) waits in e.waiting and is out of the heap's way.
func (e *Engine) admitted(g *group) bool {
	if g.cfg.Mode != ModeQuorum || !g.campaignDue(e.now) {
		return true
	}
	e.land(g)
	if !g.waiting && len(e.waiting) == 0 && e.campaigning < e.maxCampaigns {
		e.fly(g)
		return true
	}
	if !g.waiting {
		g.waiting = true
		e.waiting = append(e.waiting, g)
	}
	g.wake = waitingWake
	e.timers.fix(g.heapIdx)
	return false
}

// admit starts the waiting campaigns, oldest first, while rounds are free
// (flights whose time is up end first). A backlog holds them as it holds a
// due campaign (Step), a heartbeat interval at most.
func (e *Engine) admit(backlog bool) {
	n := 0
	for ; n < len(e.flights); n++ {
		f := e.flights[n]
		if f.flying && f.flightEnd > e.now {
			break
		}
		e.land(f)
	}
	e.flights = shift(e.flights, n)
	n = 0
	for ; n < len(e.waiting) && e.campaigning < e.maxCampaigns; n++ {
		g := e.waiting[n]
		if !g.waiting {
			continue // left
		}
		if backlog && e.now < g.electionDeadline+g.cfg.HeartbeatMs {
			break
		}
		g.waiting = false
		if !g.campaignDue(e.now) { // heard a leader meanwhile
			e.touch(g)
			continue
		}
		e.fly(g)
		g.tick(e)
		e.touch(g)
	}
	e.waiting = shift(e.waiting, n)
}

// shift drops the first n of q, keeping its array (and no stale pointer).
func shift(q []*group, n int) []*group {
	if n == 0 {
		return q
	}
	k := copy(q, q[n:])
	clear(q[k:])
	return q[:k]
}

// fly admits g's campaign round for one election timeout at most.
func (e *Engine) fly(g *group) {
	g.flying, g.flightEnd = true, e.now+g.cfg.ElectionTimeoutMs
	e.campaigning++
	e.flights = append(e.flights, g)
}

// land ends g's flight, if it is flying.
func (e *Engine) land(g *group) {
	if g.flying {
		g.flying = false
		e.campaigning--
	}
}

// maxTicksPerStep bounds the due timers one Step runs, oldest first; the
// rest stay due, so WakeAt is at or before now and the host steps again at
// once, with whatever arrived meanwhile. After a stall every group can be due
// together: at 10,000 groups that step took 280 ms in wasm on a quiet machine
// and overran the module's 1 s call deadline on a loaded one. Leases are not
// bounded: expireLeases steps down every leader whose lease ended first.
const maxTicksPerStep = 1024

// expireLeases steps down every leader whose lease ended by now, before
// anything of the batch is acted on. A leader stalled past its lease (GC,
// SIGSTOP, a slow host) otherwise resumed as leader for one whole batch: it
// counted acks that were seconds old, reported a configuration committed,
// proposed the next change, sent a heartbeat of its old term and ignored the
// later term's leader, and only then stepped down.
func (e *Engine) expireLeases() {
	e.due = e.dueTimers(e.due[:0], 0)
	for _, g := range e.due {
		if g.leaseOver(e.now) {
			g.tick(e)
			e.touch(g)
		}
	}
	clear(e.due)
}

// dueTimers appends the groups due by now in the subheap at i: those are
// the heap's top, so only they are visited.
func (e *Engine) dueTimers(due []*group, i int) []*group { return e.timersBy(due, i, e.now) }

// timersBy appends the groups whose wake is at or before t in the subheap
// at i.
func (e *Engine) timersBy(due []*group, i int, t int64) []*group {
	if i >= len(e.timers) || e.timers[i].wake > t {
		return due
	}
	due = append(due, e.timers[i])
	due = e.timersBy(due, 2*i+1, t)
	return e.timersBy(due, 2*i+2, t)
}

// Join adds a group (a restart passes the state it persisted) at time now and
// returns its events and first wake-up in out. It reports an invalid config
// as an error and changes nothing.
func (e *Engine) Join(spec GroupSpec, now int64, out *Output) error {
	in := Input{Now: now, Join: []GroupSpec{spec}}
	n := len(out.Events)
	e.Step(&in, out)
	for _, ev := range out.Events[n:] {
		if ev.Kind == EventRejected {
			return errors.New("join " + strconv.Quote(spec.Config.Group) + ": " + ev.Reason)
		}
	}
	return nil
}

// Status returns a snapshot of group, or false if it is not joined.
func (e *Engine) Status(group string) (Status, bool) {
	g, ok := e.groups[Topic(group)]
	if !ok {
		return Status{}, false
	}
	s := g.status()
	g.authStatus(&s)
	return s, true
}

// Groups lists the joined groups' names, sorted.
func (e *Engine) Groups() []string {
	names := make([]string, 0, len(e.groups))
	for _, g := range e.groups {
		names = append(names, g.cfg.Group)
	}
	slices.Sort(names)
	return names
}

func (e *Engine) join(spec *GroupSpec) {
	cfg, err := spec.Config.normalize()
	if err != nil {
		e.refuse(spec.Request, spec.Config.Group, "join: "+err.Error())
		return
	}
	topic := Topic(cfg.Group)
	if _, ok := e.groups[topic]; ok {
		e.refuse(spec.Request, cfg.Group, "join: already joined (leave first)")
		return
	}
	if spec.State.Group != "" && spec.State.Group != cfg.Group {
		e.refuse(spec.Request, cfg.Group, "join: persisted state belongs to group "+strconv.Quote(spec.State.Group))
		return
	}
	if spec.State.Term > MaxTerm {
		e.refuse(spec.Request, cfg.Group, "join: persisted term "+uitoa(spec.State.Term)+" exceeds "+uitoa(MaxTerm)+" (written by a version whose terms could be forced up by one message): delete the group's state file to start over")
		return
	}
	if err := checkPersistedConf(cfg, spec.State); err != nil {
		e.refuse(spec.Request, cfg.Group, "join: "+err.Error())
		return
	}
	// A vote may name a candidate outside the voter's configuration (one
	// added since, whose configuration is newer: Raft thesis §4.2.1), so
	// only its form is checked.
	if spec.State.Vote != "" {
		if err := checkName("join: persisted vote", spec.State.Vote); err != nil {
			e.refuse(spec.Request, cfg.Group, err.Error())
			return
		}
	}
	g := newGroup(cfg, spec.State, e.now)
	if spec.Incarnation != 0 {
		g.inc = spec.Incarnation
	}
	g.initAuth()
	e.dirty = append(e.dirty, g) // the new epoch, persisted before any publish
	e.groups[topic] = g
	e.maxHeartbeatMs = max(e.maxHeartbeatMs, cfg.HeartbeatMs)
	g.wake = g.nextWake()
	e.timers.push(g)
	e.event(Event{Kind: EventJoined, Group: cfg.Group, Term: g.term})
	g.termSpent(e)
}

func (e *Engine) receive(m *Message) {
	g, ok := e.groups[m.Topic]
	if !ok {
		e.reject("", "no group joined for topic "+strconv.Quote(truncate(m.Topic)))
		return
	}
	e.msg.groupHint = g.cfg.Group
	if err := decodeWire(m.Payload, &e.msg); err != nil {
		g.rejected++
		e.reject(g.cfg.Group, err.Error())
		return
	}
	if e.msg.Group != "" && e.msg.Group != g.cfg.Group {
		g.rejected++
		e.reject(g.cfg.Group, "wrong group "+strconv.Quote(e.msg.Group))
		return
	}
	if e.msg.From == g.cfg.ID && (e.msg.Inc == 0 || e.msg.Inc == g.inc) {
		return // our own publish, echoed back by the bus
	}
	if g.auth != nil {
		if reason := g.auth.verify(g.cfg.Group, &e.msg); reason != "" {
			g.rejected++
			// The claimed sender, unverified: whom an operator checks the
			// keys of (a wrong or mismatched key is the usual cause).
			e.event(Event{Kind: EventRejected, Group: g.cfg.Group, Reason: reason, Member: truncate(e.msg.From)})
			g.askUnverified(e, &e.msg)
			return
		}
	}
	if e.msg.From == g.cfg.ID {
		g.duplicateSelf(e, e.msg.Inc)
		return // another process with our id: nothing it says is ours
	}
	g.trackIncarnation(e, &e.msg)
	var reason string
	term := g.term
	if g.cfg.Mode == ModeQuorum {
		reason = g.stepQuorum(e, &e.msg)
	} else {
		reason = g.stepBully(e, &e.msg)
	}
	if g.term != term {
		g.termSince = e.now
	}
	if reason != "" {
		g.rejected++
		e.reject(g.cfg.Group, reason)
	} else {
		g.received++
	}
	e.touch(g)
}

func (e *Engine) command(c *Command) {
	g, ok := e.groups[Topic(c.Group)]
	if !ok {
		e.refuse(c.Request, c.Group, c.Kind.String()+": group not joined")
		return
	}
	var reason string
	switch c.Kind {
	case CmdCampaign:
		reason = g.campaignNow(e)
	case CmdResign:
		reason = g.resign(e, "", false, false)
	case CmdTransfer:
		if err := checkName("transfer target", c.Target); err != nil {
			reason = err.Error()
		} else {
			reason = g.resign(e, c.Target, false, true)
		}
	case CmdDrain, CmdUndrain:
		reason = g.drain(e, c.Kind == CmdDrain)
	case CmdAddMember:
		reason = g.changeMembers(e, opAdd, c.Target, c.Key)
	case CmdRemoveMember:
		reason = g.changeMembers(e, opRemove, c.Target, nil)
	case CmdProclaim:
		reason = g.proclaim(e, c.Value)
	case CmdLeave:
		e.leave(g)
		return
	default:
		reason = "unknown command " + strconv.Itoa(int(c.Kind))
	}
	if reason != "" {
		e.refuse(c.Request, g.cfg.Group, c.Kind.String()+": "+reason)
	}
	e.touch(g)
}

func (e *Engine) leave(g *group) {
	if g.role == RoleLeader {
		e.event(Event{Kind: EventSteppedDown, Group: g.cfg.Group, Term: g.term, Reason: "left the group"})
	}
	e.timers.remove(g.heapIdx)
	e.land(g)
	g.waiting = false // skipped by admit
	delete(e.groups, g.topic)
	e.enc.forget(g)
	if g.dirty {
		e.out.Persist = append(e.out.Persist, g.state())
		e.dirty = slices.DeleteFunc(e.dirty, func(d *group) bool { return d == g })
	}
	e.event(Event{Kind: EventLeft, Group: g.cfg.Group, Term: g.term})
}

// touch re-files g after it handled something: its timer and whether its
// persistent state needs writing.
func (e *Engine) touch(g *group) {
	if g.dirty && !slices.Contains(e.dirty, g) {
		e.dirty = append(e.dirty, g)
	}
	if g.flying && g.role != RolePreCandidate && g.role != RoleCandidate {
		e.land(g) // won, or follows a leader
	}
	if w := g.nextWake(); w != g.wake && !(g.waiting && g.campaignDue(e.now)) {
		g.wake = w
		e.timers.fix(g.heapIdx)
	}
}

func (e *Engine) reject(group, reason string) {
	e.event(Event{Kind: EventRejected, Group: group, Reason: reason})
}

// refuse rejects the join or command with the host's request id.
func (e *Engine) refuse(request uint64, group, reason string) {
	e.event(Event{Kind: EventRejected, Group: group, Reason: reason, Request: request})
}

func (e *Engine) event(ev Event) { e.out.Events = append(e.out.Events, ev) }

func (e *Engine) publish(g *group, payload []byte) {
	if g.auth != nil {
		payload = g.auth.seal(g.cfg.Group, payload)
	}
	e.out.Publishes = append(e.out.Publishes, Message{Topic: g.topic, Payload: payload})
}

// timerHeap is a binary min-heap of groups by their next wake-up, then by
// topic, so that groups due at the same instant tick in the same order on
// every host. It is container/heap's algorithm written out for *group:
// through heap.Interface every comparison and swap was a dynamic call,
// which the module (Go compiled to wasm) pays dearly for: the heap was a
// tenth of the module's time in a settled swarm of 1,000 groups
// (host/BENCHMARKS.md). The elements move exactly as container/heap moves
// them, so the heap's layout, which dueTimers walks, is unchanged.
type timerHeap []*group

// wakesBefore is the heap's order.
func wakesBefore(a, b *group) bool {
	if a.wake != b.wake {
		return a.wake < b.wake
	}
	return a.topic < b.topic
}

func (h *timerHeap) push(g *group) {
	*h = append(*h, g)
	h.up(len(*h) - 1)
}

func (h *timerHeap) remove(i int) {
	old := *h
	n := len(old) - 1
	if n != i {
		old[i], old[n] = old[n], old[i]
		old[n].heapIdx = n
		if !old[:n].down(i) {
			old.up(i)
		}
	}
	old[n] = nil // no reference to a group that left
	*h = old[:n]
}

// fix re-files the group at i after its wake changed.
func (h timerHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// up moves the group at j towards the top while it wakes before its
// parent.
func (h timerHeap) up(j int) {
	g := h[j]
	for j > 0 {
		i := (j - 1) / 2 // parent
		if !wakesBefore(g, h[i]) {
			break
		}
		h[j] = h[i]
		h[j].heapIdx = j
		j = i
	}
	h[j] = g
	g.heapIdx = j
}

// down moves the group at i0 towards the bottom while a child wakes before
// it, and reports whether it moved.
func (h timerHeap) down(i0 int) bool {
	n := len(h)
	g := h[i0]
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && wakesBefore(h[j2], h[j1]) {
			j = j2 // right child
		}
		if !wakesBefore(h[j], g) {
			break
		}
		h[i] = h[j]
		h[i].heapIdx = i
		i = j
	}
	h[i] = g
	g.heapIdx = i
	return i > i0
}
