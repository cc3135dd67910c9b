package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"slices"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
)

// Run simulates one seed. It returns an error only for invalid Options or a
// Stepper that cannot be made; protocol failures are Result.Violations. The
// same Options give the same Result (and TraceHash) on every run.
func Run(o Options) (*Result, error) {
	return runSeed(context.Background(), o)
}

// runSeed is Run, given up with ctx's error once ctx is done.
func runSeed(ctx context.Context, o Options) (*Result, error) {
	res, err := run(ctx, o)
	if err != nil || len(res.Violations) == 0 || o.Record {
		return res, err
	}
	// Replay the seed with recording on to cut trace excerpts: the run is
	// deterministic, so it finds the same violations at the same instants.
	o.Record = true
	full, err := run(ctx, o)
	if err != nil {
		return res, err
	}
	for i := range res.Violations {
		if i < len(full.Violations) {
			res.Violations[i].Excerpt = full.Violations[i].Excerpt
		}
	}
	return res, nil
}

var errSaveFailed = errors.New("sim: save failed")

type evKind uint8

const (
	evDeliver evKind = iota
	evWake
	evStep // the end of a node's batching window or pause
	evAction
)

type event struct {
	at      int64
	seq     uint64
	kind    evKind
	node    int32 // deliver, wake: the recipient
	from    int32 // deliver: the sender
	gen     uint64
	sentAt  int64
	payload []byte
	act     func()
}

// queue is a min-heap of events by (at, seq): a total, deterministic order.
// The heap holds small pointer-free keys and the events sit in a slab of
// reused slots, so sifting moves 24 bytes with no write barriers instead
// of whole events (the simulator's hottest loop after the engine).
type queue struct {
	heap []qkey
	evs  []event
	free []int32
}

type qkey struct {
	at  int64
	seq uint64
	i   int32 // the event's slot in evs
}

func (k qkey) less(o qkey) bool {
	if k.at != o.at {
		return k.at < o.at
	}
	return k.seq < o.seq
}

func (q *queue) len() int { return len(q.heap) }

// next is the time of the earliest event; the queue must not be empty.
func (q *queue) next() int64 { return q.heap[0].at }

func (q *queue) push(e event) {
	var i int32
	if k := len(q.free); k > 0 {
		i = q.free[k-1]
		q.free = q.free[:k-1]
		q.evs[i] = e
	} else {
		i = int32(len(q.evs))
		q.evs = append(q.evs, e)
	}
	q.heap = append(q.heap, qkey{at: e.at, seq: e.seq, i: i})
	h := q.heap
	j := len(h) - 1
	k := h[j]
	for j > 0 {
		p := (j - 1) / 2
		if !k.less(h[p]) {
			break
		}
		h[j] = h[p]
		j = p
	}
	h[j] = k
}

func (q *queue) pop() event {
	h := q.heap
	top := h[0]
	n := len(h) - 1
	last := h[n]
	h = h[:n]
	if n > 0 {
		j := 0
		for {
			l := 2*j + 1
			if l >= n {
				break
			}
			m := l
			if r := l + 1; r < n && h[r].less(h[l]) {
				m = r
			}
			if !h[m].less(last) {
				break
			}
			h[j] = h[m]
			j = m
		}
		h[j] = last
	}
	q.heap = h
	e := q.evs[top.i]
	q.evs[top.i] = event{} // drop its payload and action for the collector
	q.free = append(q.free, top.i)
	return e
}

type node struct {
	idx  int
	id   string
	cfg  core.Config
	st   Stepper
	up   bool
	life int

	// local(t) = base + t·rate/1e6: a clock running at rate 1±drift.
	base, rate int64

	joinPending bool
	in          []core.Message
	cmds        []core.Command
	touched     bool // in this instant's list of nodes to step

	// The host's batching: a node steps once per batch, which collects what
	// arrives (messages, due timers, commands) during the life's batching
	// window; a paused process (GC, SIGSTOP) steps only when it resumes,
	// with its whole backlog. Now is read no earlier than the last arrival
	// (floor) and never before the previous read: sometimes right at the
	// last arrival, so the engine sees a Now older than the Step.
	batchMs     int64
	pausedUntil int64
	stepPending bool // an evStep is scheduled
	stepGen     uint64
	floor       int64 // real time of the latest arrival
	nowRead     int64 // real time of the last Now read
	wakeAt      int64 // real time of the scheduled wake; -1 none
	wakeGen     uint64
	crashMid    bool // crash after persisting the next step, mid-publish
	drained     bool // Options.Drain: its drain was applied (and is sent again with every join)

	persisted core.GroupState
	drv       core.Driver // the host's output loop, for this life
	budget    int         // publishes left before a mid-step crash; -1 all
	sent      []pubSent   // what this step published, as the checker reads it
	out       core.Output
	reuseOut  bool

	// What the node told its application (its events).
	leader     bool
	leaderTerm uint64
	known      int   // index of the leader it knows, -1 none
	leaseEnd   int64 // real time its lease runs out (exclusive); 0 none
	leaseUntil int64 // local LeaseUntil of the lease it holds
	// graceEnd: the real time until which its application may still act
	// after it handed leadership over (Config.HandoffHoldMs); 0 none.
	graceEnd int64

	maxTerm uint64            // highest term it persisted, across restarts
	moves   uint64            // messages and steps it took, across restarts (InvTermBound)
	votes   map[uint64]string // the vote it cast in each term, across restarts

	// Its configuration (quorum): the members it persisted (Config.Members
	// before any), the highest version it persisted across restarts, and
	// the state its last step offered to persist (what it holds in memory).
	members       []string
	membersBefore []string   // members when the step began (its refusals rest on them ...
	heldInStep    [][]string // ... or on those its config events show it held in the step)
	maxConf       version
	offered       *core.GroupState

	// Reused from step to step: the engine is called through an interface,
	// so an Input on step's stack would be allocated anew for every step.
	input     core.Input
	offeredSt core.GroupState // what offered points at
}

type world struct {
	*setup
	ctx  context.Context // a run given up returns its error
	net  *rand.Rand      // deliveries: loss, duplication, delay
	flt  *rand.Rand      // the fault schedule and the scenario's choices
	q    queue
	seq  uint64
	now  int64
	end  int64
	stop bool

	nodes   []*node
	byID    map[string]int
	touched []int

	// Network state.
	blocked    [][]int16 // blocked[from][to] > 0: from's messages do not reach to
	outage     int
	dirty      []span // intervals with lost or late messages (bully safety)
	maxDeliver int64
	echo       bool
	// A sample of real publishes over the whole run, for replays.
	replayable []sent
	published  int64

	wallBase, wallOff int64
	clocks            clockModel

	// Agreement: every live node knows the same live leader, the only one.
	live, leaders int
	leaderSum     int // sum of the indices of the live leaders
	knownCount    []int
	changed       bool

	terms map[uint64]leaderAt // quorum/bully: who led each term, and when
	conf  *confState          // quorum: every configuration (membership.go)
	mem   *membership         // the membership-change schedule, if any

	handoffs map[uint64]handoff // resigns in flight, by the successor's term (handoff.go)

	adv   *adversary // Options.Adversary
	tgt   *targeted  // Options.Targeted
	res   *Result
	h     hash.Hash
	buf   []byte
	trace *Trace
	sc    scenario
}

type leaderAt struct {
	node int
	at   int64
}

type span struct{ from, to int64 }

func run(ctx context.Context, o Options) (*Result, error) {
	s, err := o.normalize()
	if err != nil {
		return nil, err
	}
	w := &world{
		ctx:   ctx,
		setup: s,
		net:   rand.New(rand.NewPCG(s.Seed, 0x6e6574)),
		flt:   rand.New(rand.NewPCG(s.Seed, 0x666c74)),
		byID:  make(map[string]int, len(s.ids)),
		terms: make(map[uint64]leaderAt),
		h:     sha256.New(),
		res: &Result{Seed: s.Seed, Mode: s.Mode, Scenario: s.Scenario, Nodes: s.Nodes,
			HeartbeatMs: s.cfg.HeartbeatMs, ElectionTimeoutMs: s.cfg.ElectionTimeoutMs,
			LatencyMs: s.latency, JitterMs: s.jitter, BoundMs: s.bound, Faults: s.Faults},
		knownCount: make([]int, len(s.ids)),
	}
	if s.Mode == core.ModeQuorum {
		w.conf = newConfState(s)
	}
	if s.Record {
		w.trace = &Trace{Nodes: make([]NodeTrace, len(s.ids))}
	}
	w.wallBase = 1_700_000_000_000 + w.flt.Int64N(100_000_000_000)
	if w.flt.IntN(8) == 0 {
		w.wallBase = 0 // a host without a wall clock
	}
	// The measuring scenarios draw a clock per life; the fault mix any model.
	var fast []int
	w.clocks = clocksPerLife
	if s.Scenario == ScenarioFaults {
		w.clocks = clockModel(w.flt.IntN(3))
		if s.Targeted {
			w.clocks = clocksOpposite
		}
		// With opposite clocks, half the nodes (at least one) run fast by
		// the whole drift bound and the others slow by it.
		fast = w.flt.Perm(len(s.ids))[:max(len(s.ids)/2, 1)]
	}
	w.res.BatchMs, w.res.Clocks = s.batchMax, w.clocks.String()
	for i, id := range s.ids {
		cfg := s.cfg
		cfg.ID = id
		cfg.Priority = s.prios[i]
		cfg.AwaitConfig = i >= s.Nodes // a spare
		s.authKeys(&cfg)
		n := &node{idx: i, id: id, cfg: cfg, wakeAt: -1, known: -1, votes: map[uint64]string{}}
		if w.clocks == clocksOpposite {
			n.rate = 1_000_000 - s.cfg.MaxDriftPPM
			if slices.Contains(fast, i) {
				n.rate = 1_000_000 + s.cfg.MaxDriftPPM
			}
		}
		w.nodes = append(w.nodes, n)
		w.byID[id] = i
		if w.trace != nil {
			w.trace.Nodes[i].ID = id
		}
	}
	switch s.Scenario {
	case ScenarioFaults:
		w.sc = newFaults(w)
	case ScenarioFailover, ScenarioResign, ScenarioHeal:
		w.sc = newMeasure(w)
	}
	if s.Adversary || s.Outsider {
		w.adv = newAdversary(w)
	}
	if s.Targeted && s.Scenario == ScenarioFaults {
		w.tgt = newTargeted(w)
	}
	if s.Scenario == ScenarioFaults && s.Faults.Changes > 0 {
		newMembership(w)
	}
	defer w.closeAll()
	if err := w.loop(); err != nil {
		return nil, err
	}
	w.res.VirtualMs = w.now
	w.res.TraceHash = hex.EncodeToString(w.h.Sum(nil))
	w.res.Trace = w.trace
	if w.trace != nil {
		for i := range w.res.Violations {
			v := &w.res.Violations[i]
			from := v.AtMs - 2*s.cfg.ElectionTimeoutMs
			if v.Invariant == InvLiveness {
				// Backed-off campaigns can be two election timeouts
				// apart and more: show the whole wait.
				from = v.AtMs - w.bound
			}
			v.Excerpt = w.trace.excerpt(v.Nodes, from, v.AtMs, 40)
		}
	}
	return w.res, nil
}

func (w *world) closeAll() {
	for _, n := range w.nodes {
		if c, ok := n.st.(io.Closer); ok && n.st != nil {
			c.Close()
		}
	}
}

func (w *world) loop() error {
	done := w.ctx.Done()
	for w.q.len() > 0 && !w.stop {
		select {
		case <-done: // one instant of a 1001-node swarm can take seconds
			return w.ctx.Err()
		default:
		}
		t := w.q.next()
		if t > w.end {
			break
		}
		w.now = t
		for w.q.len() > 0 && w.q.next() == t {
			ev := w.q.pop()
			switch ev.kind {
			case evDeliver:
				w.deliver(&ev)
			case evWake:
				if n := w.nodes[ev.node]; n.up && ev.gen == n.wakeGen {
					n.wakeAt = -1
					w.touch(n)
				}
			case evStep:
				w.stepDue(w.nodes[ev.node], ev.gen)
			case evAction:
				ev.act()
			}
		}
		slices.Sort(w.touched)
		for _, i := range w.touched {
			if err := w.step(w.nodes[i]); err != nil {
				return err
			}
		}
		w.touched = w.touched[:0]
		if w.changed {
			w.changed = false
			w.sc.observe(t)
		}
	}
	w.now = max(w.now, w.end)
	w.sc.finish(w.now)
	w.finishHandoffs()
	return nil
}

func (w *world) at(t int64, act func()) {
	w.seq++
	w.q.push(event{at: t, seq: w.seq, kind: evAction, act: act})
}

// touch records that something arrived for n now: n steps at the end of
// this instant, or at the end of its batching window or pause.
func (w *world) touch(n *node) {
	n.floor = w.now
	if n.touched || n.stepPending {
		return
	}
	at := w.now
	if n.batchMs > 0 {
		at += w.net.Int64N(n.batchMs + 1)
	}
	if at = max(at, n.pausedUntil); at > w.now {
		w.scheduleStep(n, at)
		return
	}
	n.touched = true
	w.touched = append(w.touched, n.idx)
}

func (w *world) scheduleStep(n *node, at int64) {
	n.stepPending = true
	n.stepGen++
	w.seq++
	w.q.push(event{at: at, seq: w.seq, kind: evStep, node: int32(n.idx), gen: n.stepGen})
}

// stepDue: n's batching window or pause is over.
func (w *world) stepDue(n *node, gen uint64) {
	if !n.up || !n.stepPending || gen != n.stepGen {
		return
	}
	if n.pausedUntil > w.now {
		w.scheduleStep(n, n.pausedUntil) // paused meanwhile
		return
	}
	n.stepPending = false
	if !n.touched {
		n.touched = true
		w.touched = append(w.touched, n.idx)
	}
}

// clockModel says how the nodes' clock rates are drawn. Each clock runs at
// 1 + d of real time, |d| ≤ MaxDriftPPM: the bound is per clock, so two
// clocks differ by up to twice it.
type clockModel uint8

const (
	clocksPerRun   clockModel = iota // each node draws its rate once, for the whole run
	clocksPerLife                    // each node draws a new rate at every (re)start
	clocksOpposite                   // half the nodes at +MaxDriftPPM, the others at −MaxDriftPPM, for the whole run
)

func (c clockModel) String() string {
	return [...]string{"a rate per node for the run", "a rate per node life", "half at +drift bound, half at −drift bound, for the run"}[c]
}

// drawDrift draws a clock's drift in ppm: uniform within the bound, or half
// the time at one of its extremes.
func (w *world) drawDrift() int64 {
	d := w.cfg.MaxDriftPPM
	ppm := w.flt.Int64N(2*d+1) - d
	if w.flt.IntN(2) == 0 {
		ppm = d
		if w.flt.IntN(2) == 0 {
			ppm = -d
		}
	}
	return ppm
}

// local is n's monotonic clock at real time t.
func (n *node) local(t int64) int64 { return n.base + t*n.rate/1_000_000 }

// realAt is the first real time at which n's clock reads at least l.
func (n *node) realAt(l int64) int64 {
	k := l - n.base
	if k <= 0 {
		return 0
	}
	return (k*1_000_000 + n.rate - 1) / n.rate
}

func (w *world) wall(t int64) int64 {
	if w.wallBase == 0 {
		return 0
	}
	return max(w.wallBase+t+w.wallOff, 1)
}

// start boots (or restarts) n at the current time with what it persisted.
func (w *world) start(n *node) error {
	if n.up {
		return nil
	}
	st, err := w.NewStepper(n.id)
	if err != nil {
		return fmt.Errorf("sim: new stepper for %s: %w", n.id, err)
	}
	_, n.reuseOut = st.(native)
	n.st, n.up, n.joinPending = st, true, true
	if n.persisted.ConfIndex == 0 && n.cfg.AwaitConfig {
		// A spare starts with the group's current members, to learn its
		// first configuration from.
		n.cfg.Members = slices.Clone(w.latestMembers())
	}
	if n.persisted.ConfIndex == 0 {
		n.members = n.cfg.Members
	}
	n.offered = nil
	n.drv = w.driver(n) // unsaved state died with the previous process
	n.life++
	// Every life gets its own clock origin; the rate is the node's for the
	// whole run, or (clocksPerLife) drawn again at every restart.
	if n.rate == 0 || w.clocks == clocksPerLife {
		n.rate = 1_000_000 + w.drawDrift()
	}
	n.base = 1000 + w.flt.Int64N(1<<40) - w.now*n.rate/1_000_000 // local(now) ≥ 1000
	n.nowRead, n.floor, n.pausedUntil = w.now, w.now, 0
	n.batchMs = 0
	if w.batchMax > 0 && w.flt.IntN(3) > 0 {
		n.batchMs = 1 + w.flt.Int64N(w.batchMax)
	}
	w.live++
	w.changed = true
	w.touch(n)
	return nil
}

// crash stops n at once: its engine is gone, its pending input is lost.
func (w *world) crash(n *node) {
	if !n.up {
		return
	}
	if c, ok := n.st.(io.Closer); ok {
		c.Close()
	}
	n.st, n.up, n.crashMid = nil, false, false
	n.in, n.cmds = n.in[:0], n.cmds[:0]
	n.wakeGen++
	n.wakeAt = -1
	n.stepGen++
	n.stepPending = false
	n.graceEnd = 0
	w.setLeader(n, false, 0)
	w.setKnown(n, -1)
	n.leaseEnd = 0
	w.successorCrashed(n)
	w.live--
	w.changed = true
	w.res.Crashes++
}

// driver is n's host's output loop: saves that may fail, publishes checked
// and sent (up to a mid-step crash), events to the checker.
func (w *world) driver(n *node) core.Driver {
	return core.Driver{
		Save: func(p core.GroupState) error {
			if w.inFaultPhase() && w.Faults.SaveFail > 0 && w.net.Float64() < w.Faults.SaveFail {
				w.res.SaveFailures++
				return errSaveFailed
			}
			w.checkPersist(n, p)
			if w.conf != nil {
				w.persistConf(n, p)
			}
			n.persisted = p
			return nil
		},
		Publish: func(m core.Message) {
			if n.budget == 0 {
				w.markDirty(w.now, w.now+w.dmax) // lost in the crash
				return
			}
			n.budget--
			// Read once for every check of this step (and the adversary).
			var p pubSent
			if w.Mode == core.ModeQuorum || w.Drain || w.adv != nil {
				p.m, p.ok = parsePub(m.Payload)
			}
			n.sent = append(n.sent, p)
			w.checkPublish(n, m.Payload, &p)
			w.publish(n, m.Payload, &p)
		},
		Event: func(ev core.Event) { w.onEvent(n, &ev) },
	}
}

// command hands n a command from its application, if n is up.
func (w *world) command(n *node, c core.Command) {
	if n.up {
		n.cmds = append(n.cmds, c)
		w.touch(n)
	}
}

func (w *world) setLeader(n *node, on bool, term uint64) {
	if n.leader == on {
		n.leaderTerm = term
		return
	}
	n.leader, n.leaderTerm = on, term
	if on {
		w.leaders++
		w.leaderSum += n.idx
	} else {
		w.leaders--
		w.leaderSum -= n.idx
		n.leaseEnd = 0
	}
	w.changed = true
}

func (w *world) setKnown(n *node, k int) {
	if n.known == k {
		return
	}
	if n.known >= 0 {
		w.knownCount[n.known]--
	}
	n.known = k
	if k >= 0 {
		w.knownCount[k]++
	}
	w.changed = true
}

// agreed returns the leader every live node knows, if there is exactly one
// live leader and every live node knows it; else -1. With membership
// changes, every live member of the leader's configuration.
func (w *world) agreed() int {
	if w.leaders != 1 || w.live == 0 {
		return -1
	}
	l := w.leaderSum
	if !w.nodes[l].up {
		return -1
	}
	if w.Scenario != ScenarioFaults || w.Faults.Spares+w.Faults.Changes == 0 {
		if w.knownCount[l] != w.live {
			return -1
		}
		return l
	}
	for _, n := range w.nodes {
		if n.up && n.known != l && w.inLeaderConf(w.nodes[l], n) {
			return -1
		}
	}
	return l
}

func (w *world) step(n *node) error {
	n.touched = false
	if !n.up {
		return nil
	}
	// The host reads Now no earlier than the last arrival of the batch (the
	// contract), and its clock is monotonic.
	read := w.now
	if n.floor < w.now && w.net.IntN(2) == 0 {
		read = n.floor + w.net.Int64N(w.now-n.floor+1)
	}
	read = max(read, n.nowRead)
	n.nowRead = read
	in := &n.input
	*in = core.Input{Now: n.local(read), Wall: w.wall(read), Inbound: n.in, Commands: n.cmds}
	fresh := n.joinPending
	if n.joinPending {
		in.Join = []core.GroupSpec{{Config: n.cfg, State: n.persisted}}
		n.joinPending = false
		if n.drained {
			in.Commands = append(in.Commands, core.Command{Kind: core.CmdDrain, Group: "g"})
		}
	}
	wasDrained := n.drained
	if n.leader && n.leaseEnd > 0 && n.leaseEnd <= w.now && w.healed() {
		w.stalledHandoff(n, in.Commands)
	}
	for _, c := range in.Commands {
		n.drained = n.drained || c.Kind == core.CmdDrain
	}
	if n.reuseOut {
		n.out.Reset()
	} else {
		n.out = core.Output{} // a decoded output may share buffers with the next one
	}
	out := &n.out
	err := n.st.Step(in, out)
	w.res.Steps++
	n.moves += 1 + uint64(len(in.Inbound))
	w.buf, _ = abi.EncodeOutput(w.buf[:0], out)
	writeStep(w.h, n.idx, w.buf)
	if w.trace != nil {
		w.trace.add(n.idx, w.now, fresh, in, w.buf)
	}
	n.in, n.cmds = n.in[:0], n.cmds[:0]
	if err != nil {
		// A failing engine is a bug; the host would re-instantiate it from
		// its persisted state, and so does the simulator.
		w.violation("step-error", n.id+": "+err.Error(), n.idx)
		w.crash(n)
		w.at(w.now+1, func() { w.start(n) })
		return nil
	}
	// Election safety is the engine's own claim, checked before the host
	// filters what its application hears; so is the configuration a new
	// leader starts from.
	if k := len(out.Persist); k > 0 {
		n.offeredSt = out.Persist[k-1]
		n.offered = &n.offeredSt
	}
	for i := range out.Events {
		if ev := &out.Events[i]; ev.Kind == core.EventLease && w.tgt != nil && w.tgt.healed != nil {
			w.tgt.healed.leased(n, ev.Term)
		}
		if ev := &out.Events[i]; ev.Kind == core.EventBecameLeader {
			w.res.Elections++
			w.checkElection(n, ev.Term)
			w.handoffElected(n, ev.Term)
			if w.tgt != nil {
				w.tgt.elected(n)
			}
			if w.conf != nil {
				st := n.persisted
				if n.offered != nil {
					st = *n.offered
				}
				w.electedConf(n, ev.Term, st)
			}
		}
	}
	w.checkLeaseFirst(n, out.Events, out.Publishes) // the step's own (the driver may hold some back, then release them with a later step's)
	// Then the host's core.Driver: persist, publish, events. A crash in the
	// middle of the step sends only a prefix of the publishes.
	crash := n.crashMid
	n.budget = -1
	if crash {
		n.budget = w.flt.IntN(len(out.Publishes) + 1)
	}
	n.sent = n.sent[:0]
	n.membersBefore, n.heldInStep = n.members, n.heldInStep[:0]
	for i := range out.Events {
		if ev := &out.Events[i]; ev.Kind == core.EventConfig {
			n.heldInStep = append(n.heldInStep, ev.Members)
		}
	}
	held, _ := n.drv.Apply(out)
	if held > 0 {
		w.res.Dropped += int64(held * (len(w.nodes) - 1))
		w.markDirty(w.now, w.now+w.dmax) // lost, as far as bully's safety goes
	}
	w.checkLeadership(n, n.sent)
	if w.Drain {
		w.checkDrained(n, wasDrained, n.sent)
	}
	if crash {
		w.crash(n)
		return nil
	}
	// 4. Wake.
	if out.WakeAt > 0 {
		t := max(n.realAt(out.WakeAt), w.now+1)
		if t != n.wakeAt {
			n.wakeAt = t
			n.wakeGen++
			w.seq++
			w.q.push(event{at: t, seq: w.seq, kind: evWake, node: int32(n.idx), gen: n.wakeGen})
		}
	} else if n.wakeAt >= 0 {
		n.wakeAt = -1
		n.wakeGen++
	}
	return nil
}

// publish broadcasts a payload to every other node (and echoes it back to
// its sender, as real buses do, when the run echoes).
func (w *world) publish(from *node, payload []byte, p *pubSent) {
	w.res.Publishes++
	if !from.reuseOut {
		payload = slices.Clone(payload)
	}
	if isElectionMsg(payload) {
		w.res.ElectionPublishes++
	}
	if w.adv != nil {
		w.adv.observe(from, payload, p)
	}
	faulty := w.inFaultPhase()
	if faulty && w.tgt != nil {
		w.tgt.published(from, payload)
	} else if w.tgt != nil && w.tgt.healed != nil {
		w.tgt.healed.published(from, p)
	}
	if faulty && w.Faults.Replays > 0 {
		// Reservoir sampling: every publish of the fault phase is equally
		// likely to be replayed, however old.
		w.published++
		c := sent{payload: payload, from: from.idx, at: w.now}
		if len(w.replayable) < replayPool {
			w.replayable = append(w.replayable, c)
		} else if k := w.net.Int64N(w.published); k < replayPool {
			w.replayable[k] = c
		}
	}
	if faulty && w.outage == 0 && w.Faults.Loss > 0 && w.net.Float64() < w.Faults.Loss/4 {
		// The broker lost the publish itself.
		w.res.Dropped += int64(len(w.nodes) - 1)
		w.markDirty(w.now, w.now+w.dmax)
		return
	}
	for j := range w.nodes {
		if j == from.idx && !w.echo {
			continue
		}
		w.sendOne(from.idx, j, payload, faulty)
	}
}

// sent is a publish kept for replaying.
type sent struct {
	payload []byte
	from    int
	at      int64
}

const replayPool = 64

// lateCopy delivers payload, sent by from, to node to again, d ms from now.
func (w *world) lateCopy(from, to int, payload []byte, d int64) {
	at := w.now + d
	w.res.Replayed++
	w.markDirty(w.now, at)
	w.maxDeliver = max(w.maxDeliver, at)
	w.seq++
	w.q.push(event{at: at, seq: w.seq, kind: evDeliver, node: int32(to), from: int32(from), sentAt: w.now, payload: payload})
}

// replay delivers a real message again, long after it was sent: to one node,
// or (a quarter of the time) to every other node.
func (w *world) replay() {
	if len(w.replayable) == 0 {
		return
	}
	c := w.replayable[w.flt.IntN(len(w.replayable))]
	to := []int{w.flt.IntN(len(w.nodes))}
	if w.flt.IntN(4) == 0 {
		to = to[:0]
		for j := range w.nodes {
			if j != c.from {
				to = append(to, j)
			}
		}
	}
	for _, j := range to {
		at := w.now + w.delay(false)
		w.res.Replayed++
		w.markDirty(c.at, at)
		w.maxDeliver = max(w.maxDeliver, at)
		w.seq++
		w.q.push(event{at: at, seq: w.seq, kind: evDeliver, node: int32(j), from: int32(c.from), sentAt: c.at, payload: c.payload})
	}
}

func (w *world) inFaultPhase() bool {
	return w.Scenario == ScenarioFaults && w.now < w.faultEnd
}

func (w *world) sendOne(from, to int, payload []byte, faulty bool) {
	if w.outage > 0 || w.cut(from, to) {
		w.res.Dropped++
		w.markDirty(w.now, w.now+w.dmax)
		return
	}
	copies := 1
	var extra int64
	if faulty && w.tgt != nil {
		var drop bool
		if drop, extra = w.tgt.tamper(from, to, payload); drop {
			w.res.Dropped++
			w.markDirty(w.now, w.now+w.dmax)
			return
		}
	} else if w.tgt != nil && w.tgt.healed != nil {
		extra = w.tgt.healed.hold(to, payload)
	}
	if faulty {
		if w.Faults.Loss > 0 && w.net.Float64() < w.Faults.Loss {
			w.res.Dropped++
			w.markDirty(w.now, w.now+w.dmax)
			return
		}
		if w.Faults.Dup > 0 && w.net.Float64() < w.Faults.Dup {
			copies = 2
			w.res.Duplicated++
		}
	}
	for range copies {
		d := w.delay(faulty) + extra
		at := w.now + d
		if d > w.dmax {
			w.markDirty(w.now, at)
		}
		w.maxDeliver = max(w.maxDeliver, at)
		w.seq++
		w.q.push(event{at: at, seq: w.seq, kind: evDeliver, node: int32(to), from: int32(from), sentAt: w.now, payload: payload})
	}
}

// delay draws a one-way delay: latency ± jitter, or in the fault phase a rare
// outlier of up to OutlierMaxMs.
func (w *world) delay(faulty bool) int64 {
	if faulty && w.Faults.Outlier > 0 && w.net.Float64() < w.Faults.Outlier {
		w.res.Outliers++
		return w.dmax + 1 + w.net.Int64N(max(w.Faults.OutlierMaxMs-w.dmax, 1))
	}
	d := w.latency
	if w.jitter > 0 {
		d += w.net.Int64N(2*w.jitter+1) - w.jitter
	}
	return max(d, 1)
}

func (w *world) cut(from, to int) bool {
	return w.blocked != nil && w.blocked[from][to] > 0
}

func (w *world) deliver(ev *event) {
	if ev.from < 0 {
		w.deliverForged(ev) // the adversary's
		return
	}
	n := w.nodes[ev.node]
	if !n.up {
		// A node that is down misses messages as if it were cut off: bully
		// mode's safety needs every member to hear every claim.
		w.res.Dropped++
		w.markDirty(ev.sentAt, w.now)
		return
	}
	if w.outage > 0 || w.cut(int(ev.from), int(ev.node)) || w.mem != nil && w.mem.dropConfig(n.idx, ev.payload) {
		w.res.Dropped++
		w.markDirty(ev.sentAt, w.now)
		return
	}
	w.res.Delivered++
	if len(w.handoffs) > 0 && msgKind(ev.payload) == "resign" {
		w.resignArrived(n, ev.payload)
	}
	n.in = append(n.in, core.Message{Topic: "election:g", Payload: ev.payload})
	w.touch(n)
}

// markDirty records that the network was not "connected" during [from, to]:
// a message was lost, or delivered later than the normal maximum delay.
func (w *world) markDirty(from, to int64) {
	if k := len(w.dirty); k > 0 && from <= w.dirty[k-1].to && from >= w.dirty[k-1].from {
		w.dirty[k-1].to = max(w.dirty[k-1].to, to)
		return
	}
	w.dirty = append(w.dirty, span{from, to})
}

// connected reports whether no message sent or due in [from, to] was lost or
// late.
func (w *world) connected(from, to int64) bool {
	for _, s := range w.dirty {
		if s.from <= to && s.to >= from {
			return false
		}
	}
	return true
}

func (w *world) block(from, to []int, d int) {
	if w.blocked == nil {
		w.blocked = make([][]int16, len(w.nodes))
		for i := range w.blocked {
			w.blocked[i] = make([]int16, len(w.nodes))
		}
	}
	for _, a := range from {
		for _, b := range to {
			if a != b {
				w.blocked[a][b] += int16(d)
			}
		}
	}
}

// isElectionMsg reports whether a payload is an election, vote, leader or
// resign message (the cost of an election, as opposed to heartbeats and
// acks). The core writes "type" first.
func isElectionMsg(p []byte) bool {
	const pre = `{"type":"`
	if len(p) < len(pre)+4 || string(p[:len(pre)]) != pre {
		return false
	}
	p = p[len(pre):]
	for _, t := range [...]string{"election\"", "vote\"", "leader\"", "resign\""} {
		if len(p) >= len(t) && string(p[:len(t)]) == t {
			return true
		}
	}
	return false
}
