package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
	"github.com/electcore/electcore/internal/engineerr"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport"
)

// AgentConfig configures Runtime.NewAgent.
type AgentConfig struct {
	// Transport carries the groups' topics. The agent does not close it.
	Transport transport.Transport
	// Store keeps each group's term and vote (a *statestore.Store, or a
	// store of your own). nil, or a nil pointer, keeps them in memory
	// (tests and demos only: a restarted process forgets its votes).
	Store Store
	// Clock is the monotonic clock handed to the core (nil: a real clock).
	Clock Clock
	// Logger: nil means the runtime's.
	Logger *slog.Logger
	// OnTrap is called after the module trapped and the agent restored a
	// new instance from the persisted state; err matches ErrTrap.
	OnTrap func(err error)
	// PublishTimeout bounds one Publish (default 5 s).
	PublishTimeout time.Duration
	// MaxPending bounds the received messages waiting for the next step
	// that do not name a known member as their sender; more are dropped,
	// counted (Stats.Dropped) and logged at most once per DropLogInterval
	// (default 65536). Each member's messages have a small queue of their
	// own, taken first (inbox.go).
	MaxPending int
	// DropLogInterval: at most one log line about dropped messages per
	// interval (default 10 s).
	DropLogInterval time.Duration
	// NoCoalescing: every message travels on its group's topic, and the
	// peer topics are neither read nor written, as by agents that predate
	// coalescing (docs/wire.md, "Coalesced heartbeats"). Its peers then
	// coalesce nothing towards it. Over a transport that carries only text
	// (transport.TextOnly: pilot) an agent never coalesces.
	NoCoalescing bool
}

// Callbacks are an election's notifications, in the style of client-go's
// leaderelection. They are called in order from one goroutine per election
// (OnStartedLeading in a goroutine of its own); they must not block for long
// and must not call Agent.Close (which waits for them). Agent.Close returns
// only after every callback has returned, so none runs after it.
type Callbacks struct {
	// OnStartedLeading runs in its own goroutine when this agent starts
	// leading term. ctx is cancelled when leadership is lost: stepped down,
	// left, agent closed, or — in quorum mode — at the lease's end unless a
	// quorum extended it. In quorum mode it is called only once a lease is
	// held, and again for the same term when a lease ended but the leader
	// kept its term and a quorum gave it a new one (after OnStoppedLeading
	// with "lease expired"). Tag every action with term (the fencing
	// token). Return soon after ctx is cancelled: Agent.Close waits for it.
	OnStartedLeading func(ctx context.Context, term uint64)
	// OnStoppedLeading is called once after each OnStartedLeading, when its
	// ctx is cancelled, with the reason.
	OnStoppedLeading func(term uint64, reason string)
	// OnNewLeader is called when a leader (or a term) other than the last
	// one reported becomes known, never with "" (like client-go's): losing a leader
	// without knowing the next one is not reported here (Election.Status
	// tells).
	OnNewLeader func(leader string, term uint64)
	// OnDuplicateID is called when another process speaks with this agent's
	// ID, or a member's ID is heard from two processes at once (at most once
	// per election timeout per ID). Two agents with one ID vote twice, which
	// voids the quorum's guarantee: stop one of them. reason says which ID.
	// id is the duplicated ID: this agent's own when another process uses
	// it.
	OnDuplicateID func(id, reason string)
	// OnValue is called when the value of the group's leader, as this
	// agent sees it, changes (etcd's Observe): leader announced value in
	// term, with its leadership (core.Config.Value) or by a proclaim
	// (Election.Proclaim). Called on the leader too, for its own value.
	// Only the current leader's value of its current term is reported; a
	// new leader without a value brings no call, and Election.Status's
	// Value is "" until the new leader's value arrives.
	OnValue func(leader string, term uint64, value string)
	// OnConfig is called when a quorum group's configuration changes: this
	// leader proposed it, this member learnt it, or it committed
	// (c.Committed). An agent no longer in a committed configuration was
	// removed: it keeps running as a non-voter and never leads.
	OnConfig func(c ConfigChange)
}

// Stats are an agent's counters.
type Stats struct {
	Traps       uint64 // module traps recovered from
	Steps       uint64 // batches stepped
	MessagesIn  uint64 // received messages handed to the core
	MessagesOut uint64 // messages published
	Rejected    uint64 // inputs the core refused (EventRejected) or the host dropped as oversized
	Dropped     uint64 // received messages dropped because too many were pending (all lanes)
	// DroppedFromMembers: of Dropped, those naming a known member as their
	// sender, dropped because that member's own queue was full (a flood in
	// its name).
	DroppedFromMembers uint64
	PersistErrors      uint64 // Store.Save failures (the group's publishes are held until a save succeeds)
	HeldPublishes      uint64 // publishes not sent because their group's state was not yet durable
	DuplicateIDs       uint64 // reports of an ID spoken by two processes (Callbacks.OnDuplicateID)
	// Echoes: this agent's own publishes that the bus delivered back,
	// dropped on arrival (not counted in MessagesIn).
	Echoes uint64
	// Superseded: received heartbeats and acks not handed to the core
	// because a newer one of the same member and group took their place
	// while they waited, the agent being behind (inbox.go, supersedes).
	// Not counted in MessagesIn nor in Dropped. Rising: the agent is
	// short of CPU for its groups.
	Superseded uint64
	// Thinned: received acks not handed to the core, in an agent of 16
	// groups or more (inbox.go, passAck): addressed to another leader when
	// one of the same member and group went to it less than an election
	// timeout before; addressed to this agent when the heartbeat it acks
	// had the acks its majority needs and one of the member's went to the
	// core less than one and a half heartbeat intervals before. Not
	// counted in MessagesIn nor in Dropped.
	Thinned uint64
	// Coalesced: of the core's payloads, those sent inside envelopes (each
	// envelope counts once in MessagesOut); CoalescedIn: those received so
	// and handed to the core (counted in MessagesIn too).
	Coalesced, CoalescedIn uint64
	PublishErrors          uint64 // Publish failures
	Groups                 int    // groups joined
	Transport              transport.Stats
}

type agentCounters struct {
	steps, in, out, rejected, dropped, droppedMember, persistErrs, held, dups, publishErrs, coalesced, coalescedIn, echoes atomic.Uint64
}

// Agent runs any number of elections (groups) on one module instance, over
// one transport. One goroutine owns the instance: it batches what arrived
// (messages, commands, joins) into one step, applies the output in the
// core's order — persist, then publish, then events — and sleeps until the
// next message or the core's WakeAt.
type Agent struct {
	cfg    AgentConfig
	logger *slog.Logger
	clock  Clock
	store  Store
	eng    Engine
	ctx    context.Context
	cancel context.CancelFunc
	pub    *publisher
	// workers counts the goroutines the agent started besides its loop:
	// the publisher, each election's dispatcher and each OnStartedLeading.
	// Close waits for them.
	workers sync.WaitGroup
	// delivering is held (read) while a transport's deliver call is in the
	// agent; Close takes it to shut the door (undelivered) on later calls.
	delivering  sync.RWMutex
	undelivered bool
	kick        chan struct{}
	stop        chan struct{}
	done        chan struct{}
	c           agentCounters
	// nextReq numbers requests (joins, commands) for the core to echo.
	nextReq atomic.Uint64

	mu        sync.Mutex
	inbox     inbox
	reqs      []*request
	elections map[string]*Election
	closing   bool
	coal      *coalescer
	peerSubs  map[string]bool // peer topics subscribed: true once live
	echoes    *echoes
	envMsgs   []inMsg // deliverEnvelope's scratch

	// owned by the loop goroutine
	driver core.Driver // applies each Output in the core's order
	out    core.Output
	// apply's state of the step: its publishes, whether they were handed
	// to the publisher, the requests the core refused (by id)
	pubs    []core.Message
	planned bool
	refused map[uint64]string
	wakeAt  int64
	leases  leaseQueue // the lease ends of the leaderships held
	// the drops last logged (dropped, of them from members) and when
	dropsLogged, memberDropsLogged uint64
	dropsLoggedAt                  time.Time
	// the superseded messages last logged, and when
	supersededLogged   uint64
	supersededLoggedAt time.Time
}

type request struct {
	id      uint64 // echoed by the core in the EventRejected that refuses it
	join    *core.GroupSpec
	el      *Election
	cmd     *core.Command
	drain   bool // with join: drain the group in the same batch
	resign  bool // Close: resign every group led
	retried bool
	done    chan error
}

// NewNativeAgent starts an agent with no groups on the native Go core
// (core.Engine), with no WebAssembly at all: the same Agent, callbacks and
// wire behaviour, for Go programs that do not need the module's sandbox.
// Swapping it for wasmrt.Runtime.NewAgent is the only change between the
// two; a program that only uses this one links no WebAssembly runtime.
func NewNativeAgent(ctx context.Context, cfg AgentConfig) (*Agent, error) {
	e := core.NewEngine()
	// The agent copies every payload out of a step's Output before the
	// next step (coalescer.plan), so the core may write each step's
	// payloads over the last one's instead of allocating them.
	e.ReusePayloads()
	return NewAgentOn(cfg, &nativeCore{e: e})
}

// NewAgentOn starts an agent with no groups stepping eng, which it closes
// on Close. Programs use NewNativeAgent or wasmrt.Runtime.NewAgent, which
// call it.
func NewAgentOn(cfg AgentConfig, eng Engine) (*Agent, error) {
	if cfg.Transport == nil {
		return nil, errors.New("host: AgentConfig.Transport is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler) // silent unless given one
	}
	return startAgent(cfg, eng), nil
}

func startAgent(cfg AgentConfig, eng Engine) *Agent {
	a := &Agent{cfg: cfg, logger: cfg.Logger, clock: cfg.Clock,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		elections: map[string]*Election{}, eng: eng, coal: newCoalescer(coalesceGroups), peerSubs: map[string]bool{}, echoes: newEchoes()}
	if a.clock == nil {
		a.clock = NewRealClock()
	}
	if noStore(cfg.Store) {
		a.store = statestore.NewMem()
	} else {
		a.store = cfg.Store
	}
	if a.cfg.PublishTimeout <= 0 {
		a.cfg.PublishTimeout = 5 * time.Second
	}
	if a.cfg.MaxPending <= 0 {
		a.cfg.MaxPending = 65536
	}
	if a.cfg.DropLogInterval <= 0 {
		a.cfg.DropLogInterval = 10 * time.Second
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	a.pub = newPublisher(a, &a.workers)
	go a.loop()
	return a
}

// Join starts an election in cfg.Group with the state this agent persisted
// for it before (none: a first start). It fails if the state exists but is
// unusable (ErrStateUnusable), if the config is invalid, or if the group is
// already joined by this agent.
func (a *Agent) Join(ctx context.Context, cfg core.Config, cb Callbacks) (*Election, error) {
	return a.join(ctx, cfg, cb, false)
}

// JoinDrained is Join for a group the operator drained (Election.Drain):
// the drain is applied in the same batch as the join, before anything from
// the bus can make this agent campaign or take a hand-off.
func (a *Agent) JoinDrained(ctx context.Context, cfg core.Config, cb Callbacks) (*Election, error) {
	if cfg.Mode == core.ModeBully {
		return nil, fmt.Errorf("host: join %q drained: bully mode has no hand-off to drain by", cfg.Group)
	}
	return a.join(ctx, cfg, cb, true)
}

func (a *Agent) join(ctx context.Context, cfg core.Config, cb Callbacks, drained bool) (*Election, error) {
	j, err := a.prepareJoin(cfg, cb, drained)
	if err != nil {
		return nil, err
	}
	// Subscribe first: what arrives before the join is applied is stepped
	// in the same batch as the join or later, never lost.
	if err := a.cfg.Transport.Subscribe(j.subCtx, core.Topic(cfg.Group), a.deliver); err != nil {
		j.drop()
		return nil, fmt.Errorf("host: join %q: subscribe: %w", cfg.Group, err)
	}
	for _, topic := range j.peerTopics {
		a.peersSubscribed(topic, a.cfg.Transport.Subscribe(a.ctx, topic, a.deliverEnvelope))
	}
	if err := a.submit(ctx, j.req); err != nil {
		j.drop()
		return nil, err
	}
	a.logger.Info("joined election", "group", cfg.Group, "id", cfg.ID, "term", j.req.join.State.Term, "mode", cfg.Mode)
	return j.req.el, nil
}

// JoinSpec is one group of JoinAll: Join's arguments, and Drained to join
// it as JoinDrained does.
type JoinSpec struct {
	Config    core.Config
	Callbacks Callbacks
	Drained   bool
}

// JoinAll joins every group of specs as Join (JoinDrained where Drained)
// would, returning their elections and one error per spec, in order (a
// failed join leaves no election). When it returns, every group joined is
// as ready as Join leaves it: subscribed, live on the broker and applied by
// the core. It is how to join many groups at once: a transport that
// batches subscriptions (transport.BatchSubscriber: NATS) makes them all
// known to the broker with one round trip instead of one per group, and
// the core takes the joins a few hundred per step.
func (a *Agent) JoinAll(ctx context.Context, specs []JoinSpec) ([]*Election, []error) {
	els := make([]*Election, len(specs))
	errs := make([]error, len(specs))
	joins := make([]*pendingJoin, len(specs))
	var subs []transport.Subscription
	var subOf []int // subs[k] is the group topic of specs[subOf[k]]
	var peerTopics []string
	for i, sp := range specs {
		if sp.Drained && sp.Config.Mode == core.ModeBully {
			errs[i] = fmt.Errorf("host: join %q drained: bully mode has no hand-off to drain by", sp.Config.Group)
			continue
		}
		j, err := a.prepareJoin(sp.Config, sp.Callbacks, sp.Drained)
		if err != nil {
			errs[i] = err
			continue
		}
		joins[i] = j
		subs = append(subs, transport.Subscription{Ctx: j.subCtx, Topic: core.Topic(sp.Config.Group), Deliver: a.deliver})
		subOf = append(subOf, i)
		peerTopics = append(peerTopics, j.peerTopics...)
	}
	for _, topic := range peerTopics {
		subs = append(subs, transport.Subscription{Ctx: a.ctx, Topic: topic, Deliver: a.deliverEnvelope})
	}
	subErrs := a.subscribeAll(ctx, subs)
	for k, i := range subOf {
		if err := subErrs[k]; err != nil {
			joins[i].drop()
			joins[i] = nil
			errs[i] = fmt.Errorf("host: join %q: subscribe: %w", specs[i].Config.Group, err)
		}
	}
	for k, topic := range peerTopics {
		a.peersSubscribed(topic, subErrs[len(subOf)+k])
	}
	var reqs []*request
	for _, j := range joins {
		if j != nil {
			reqs = append(reqs, j.req)
		}
	}
	reqErrs := a.submitAll(ctx, reqs)
	k := 0
	for i, j := range joins {
		if j == nil {
			continue
		}
		if err := reqErrs[k]; err != nil {
			j.drop()
			errs[i] = err
		} else {
			els[i] = j.req.el
		}
		k++
	}
	a.logger.Info("joined elections", "groups", len(reqs), "failed", len(specs)-len(reqs)+countErrs(reqErrs))
	return els, errs
}

func countErrs(errs []error) (n int) {
	for _, err := range errs {
		if err != nil {
			n++
		}
	}
	return n
}

// subscribeAll subscribes to every one of subs, in one batch if the
// transport batches (transport.BatchSubscriber).
func (a *Agent) subscribeAll(ctx context.Context, subs []transport.Subscription) []error {
	if len(subs) == 0 {
		return nil
	}
	if bs, ok := a.cfg.Transport.(transport.BatchSubscriber); ok {
		if errs := bs.SubscribeBatch(ctx, subs); len(errs) == len(subs) {
			return errs
		}
		errs := make([]error, len(subs))
		for i := range errs {
			errs[i] = errors.New("transport: SubscribeBatch returned the wrong number of errors")
		}
		return errs
	}
	errs := make([]error, len(subs))
	for i, s := range subs {
		errs[i] = a.cfg.Transport.Subscribe(s.Ctx, s.Topic, s.Deliver)
	}
	return errs
}

// pendingJoin is a group registered with the agent whose subscription and
// join request are under way.
type pendingJoin struct {
	req        *request
	subCtx     context.Context
	peerTopics []string // peer topics this join is to subscribe
	drop       func()   // undoes the registration
}

// prepareJoin checks cfg, loads its state and registers the group with the
// agent (its members known to the inbox, its subscription's context made),
// before anything is subscribed.
func (a *Agent) prepareJoin(cfg core.Config, cb Callbacks, drained bool) (*pendingJoin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("host: join %q: %w", cfg.Group, err)
	}
	timed, _ := cfg.WithTimingDefaults() // valid: Validate checked them
	st, err := loadState(a.store, cfg.ID, cfg.Group)
	if err != nil {
		return nil, err
	}
	el := &Election{a: a, cfg: cfg, cb: cb, left: make(chan struct{})}
	el.cfg.Members = append([]string(nil), cfg.Members...)
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		return nil, ErrClosed
	}
	if _, dup := a.elections[cfg.Group]; dup {
		a.mu.Unlock()
		return nil, fmt.Errorf("host: group %q already joined by this agent", cfg.Group)
	}
	// Started under mu, once the agent is known not to be closing, so that
	// Close's wait covers it.
	el.disp = newDispatcher(&a.workers)
	a.elections[cfg.Group] = el
	// Known before the subscription delivers anything: the members' own
	// queues (inbox.go).
	a.inbox.thinAcks(core.Topic(cfg.Group), cfg.ID, timed.ElectionTimeoutMs, timed.Mode != core.ModeBully, timed.HeartbeatMs)
	a.inbox.setMembers(core.Topic(cfg.Group), cfg.Members)
	a.inbox.setMembers(core.Topic(cfg.Group), st.Members)
	a.coal.join(cfg.Group, cfg.ID, cfg.Members).lanes = a.inbox.lanes(core.Topic(cfg.Group))
	if len(st.Members) > 0 {
		a.coal.config(cfg.Group, st.Members)
	}
	peerTopics := a.peerTopicsToSubscribe(cfg.Group)
	a.mu.Unlock()
	subCtx, cancel := context.WithCancel(a.ctx)
	el.subCancel = cancel
	// A random incarnation per join: the core tells this process from any
	// other speaking with the same ID by it.
	spec := core.GroupSpec{Config: el.cfg, State: st, Incarnation: randomIncarnation()}
	el.drained.Store(drained)
	return &pendingJoin{
		req:        &request{join: &spec, el: el, drain: drained},
		subCtx:     subCtx,
		peerTopics: peerTopics,
		drop: func() {
			cancel()
			el.disp.close()
			a.mu.Lock()
			delete(a.elections, cfg.Group)
			a.inbox.forget(core.Topic(cfg.Group))
			a.coal.leave(cfg.Group)
			a.mu.Unlock()
		},
	}, nil
}

// textOnly reports whether tr carries only text (transport.TextOnly), so
// no envelope.
func textOnly(tr transport.Transport) bool {
	t, ok := tr.(transport.TextOnly)
	return ok && t.TextOnly()
}

// peerTopicsToSubscribe marks as being subscribed, and returns, the peer
// topics not yet subscribed of the group just joined, or of every group
// when that join brought the agent to the number it coalesces for — none
// while it is in fewer (its traffic is then exactly that of an agent
// without coalescing), or with NoCoalescing. A topic already live makes
// the group's id ready at once. Called with a.mu held.
func (a *Agent) peerTopicsToSubscribe(joined string) []string {
	n := len(a.coal.groups)
	if a.cfg.NoCoalescing || textOnly(a.cfg.Transport) || n < a.coal.minGroups {
		return nil
	}
	groups := []*cgroup{a.coal.groups[joined]}
	if n == a.coal.minGroups {
		groups = slices.Collect(maps.Values(a.coal.groups))
	}
	var topics []string
	now := a.clock.NowMs()
	for _, g := range groups {
		live, known := a.peerSubs[g.topic]
		switch {
		case live:
			a.coal.ready(g.topic, g.id, now)
		case !known:
			a.peerSubs[g.topic] = false
			topics = append(topics, g.topic)
		}
	}
	return topics
}

// peersSubscribed records the outcome of subscribing, for the agent's
// life, to a peer topic. Once it is live, every id of a group of that topic
// may speak there (envelopes are sent only to peers heard there, so a
// failure only leaves the groups' messages on their own topics).
func (a *Agent) peersSubscribed(topic string, err error) {
	if err != nil {
		a.logger.Warn("peer topic: subscribe failed; its groups' messages stay on their own topics", "topic", topic, "err", err)
		a.mu.Lock()
		delete(a.peerSubs, topic)
		a.mu.Unlock()
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.peerSubs[topic] = true
	now := a.clock.NowMs()
	for _, g := range a.coal.groups {
		if g.topic == topic {
			a.coal.ready(topic, g.id, now)
		}
	}
}

// deliverEnvelope is the transport's callback for the peer topics: each
// payload for a joined group is queued as if it had come on the group's
// topic.
func (a *Agent) deliverEnvelope(m transport.Message) {
	a.delivering.RLock()
	defer a.delivering.RUnlock()
	if a.undelivered {
		return
	}
	h := a.echoes.hash(m.Topic, m.Payload)
	a.mu.Lock()
	if a.echoes.echoed(h) {
		a.mu.Unlock()
		a.c.echoes.Add(1)
		return
	}
	now := a.clock.NowMs()
	msgs, from, refused, err := a.coal.receive(now, m.Topic, m.Payload, a.envMsgs[:0])
	var queuedN, dropped, droppedMember uint64
	superseded, thinned := a.inbox.superseded, a.inbox.thinned
	a.inbox.now = now
	for _, cm := range msgs {
		queued, member := a.inbox.addIn(cm, from, a.cfg.MaxPending)
		switch {
		case queued:
			queuedN++
		case member:
			dropped++
			droppedMember++
		default:
			dropped++
		}
	}
	clear(msgs) // it points into the envelope
	a.envMsgs = msgs[:0]
	queuedN -= a.inbox.superseded - superseded // replaced, never handed to the core
	queuedN -= a.inbox.thinned - thinned       // thinned, likewise
	a.mu.Unlock()
	if err != nil {
		refused++
	}
	a.c.rejected.Add(uint64(refused))
	a.c.dropped.Add(dropped)
	a.c.droppedMember.Add(droppedMember)
	a.c.coalescedIn.Add(queuedN)
	if queuedN > 0 {
		a.wake()
	}
}

// randomIncarnation draws a non-zero incarnation (0 would let the core
// derive one that a second process with fresh state would share).
func randomIncarnation() uint64 {
	for {
		if v := rand.Uint64(); v != 0 {
			return v
		}
	}
}

// deliver is the transport's callback for every subscribed topic.
func (a *Agent) deliver(m transport.Message) {
	a.delivering.RLock()
	defer a.delivering.RUnlock()
	if a.undelivered {
		return // closed: the subscription is ending
	}
	if len(m.Payload) > 2*core.MaxPayload || len(m.Topic) > 2*core.MaxIDLen {
		a.c.rejected.Add(1)
		return
	}
	h := a.echoes.hash(m.Topic, m.Payload)
	a.mu.Lock()
	if a.echoes.echoed(h) {
		a.mu.Unlock()
		a.c.echoes.Add(1)
		return
	}
	thinned := a.inbox.thinned
	a.inbox.now = a.clock.NowMs()
	queued, member := a.inbox.add(core.Message{Topic: m.Topic, Payload: m.Payload}, a.cfg.MaxPending)
	thinned = a.inbox.thinned - thinned
	a.mu.Unlock()
	if thinned > 0 {
		return
	}
	if !queued {
		a.c.dropped.Add(1)
		if member {
			a.c.droppedMember.Add(1)
		}
		return
	}
	a.wake()
}

func (a *Agent) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// submit queues r for the next batch and waits for its outcome.
func (a *Agent) submit(ctx context.Context, r *request) error {
	return a.submitAll(ctx, []*request{r})[0]
}

// submitAll queues rs, in order, for the next batches and waits for their
// outcomes.
func (a *Agent) submitAll(ctx context.Context, rs []*request) []error {
	errs := make([]error, len(rs))
	if len(rs) == 0 {
		return errs
	}
	for _, r := range rs {
		r.done = make(chan error, 1)
		r.id = a.nextReq.Add(1)
		switch {
		case r.join != nil:
			r.join.Request = r.id
		case r.cmd != nil:
			r.cmd.Request = r.id
		}
	}
	a.mu.Lock()
	if a.closing && !rs[0].resign {
		a.mu.Unlock()
		for i := range errs {
			errs[i] = ErrClosed
		}
		return errs
	}
	a.reqs = append(a.reqs, rs...)
	a.mu.Unlock()
	a.wake()
	for i, r := range rs {
		select {
		case errs[i] = <-r.done:
		case <-ctx.Done():
			errs[i] = ctx.Err()
		case <-a.done:
			errs[i] = ErrClosed
		}
	}
	return errs
}

func (a *Agent) loop() {
	defer close(a.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-a.kick:
		case <-timer.C:
		case <-a.stop:
			return
		}
		more := a.step()
		a.checkLeases()
		if more {
			a.wake()
		}
		timer.Reset(a.nextDelay())
	}
}

// alignGroups and alignMs: with at least alignGroups groups joined, the
// core's wake-ups are rounded up to a multiple of alignMs, so that timers
// falling due within alignMs of each other (heartbeats above all) are
// stepped together and their messages share an envelope. A core is always
// free to be stepped late (a loaded host is); its heartbeats then stay
// together, as each next one is due a heartbeat interval after the step
// that sent it. A lease's end is never rounded: the host stops
// OnStartedLeading's work at its exact time.
const (
	alignGroups = coalesceGroups
	alignMs     = 20
)

// nextDelay is the time until the core's WakeAt (aligned), the next hello
// on a peer topic, or the first lease to end.
func (a *Agent) nextDelay() time.Duration {
	wake := a.wakeAt
	a.mu.Lock()
	groups, hello := len(a.elections), a.coal.nextHello()
	a.mu.Unlock()
	if wake > 0 && groups >= alignGroups {
		wake = (wake + alignMs - 1) / alignMs * alignMs
	}
	if hello > 0 && (wake == 0 || hello < wake) {
		wake = hello
	}
	if l := a.leases.next(); l > 0 && (wake == 0 || l < wake) {
		wake = l
	}
	if wake == 0 {
		return time.Hour
	}
	return time.Duration(max(wake-a.clock.NowMs(), 0)) * time.Millisecond
}

func (a *Agent) snapshotElections() []*Election {
	a.mu.Lock()
	defer a.mu.Unlock()
	els := make([]*Election, 0, len(a.elections))
	for _, el := range a.elections {
		els = append(els, el)
	}
	return els
}

// election is the joined group g, or nil.
func (a *Agent) election(g string) *Election {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.elections[g]
}

// step runs one batch. It reports whether input is still pending.
func (a *Agent) step() (more bool) {
	a.mu.Lock()
	var in core.Input
	in.Inbound = a.inbox.take(core.MaxBatchBytes / 2)
	reqs := a.takeRequests()
	for _, r := range reqs {
		switch {
		case r.join != nil:
			in.Join = append(in.Join, *r.join)
			if r.drain {
				in.Commands = append(in.Commands, core.Command{Kind: core.CmdDrain, Group: r.join.Config.Group})
			}
		case r.cmd != nil:
			in.Commands = append(in.Commands, *r.cmd)
		case r.resign:
			for g, el := range a.elections {
				if el.isLeader {
					in.Commands = append(in.Commands, core.Command{Kind: core.CmdResign, Group: g})
				}
			}
		}
	}
	more = a.inbox.len() > 0
	// A campaign due now waits for what is still in the inbox (a heartbeat
	// there would make it needless): the core holds it, bounded.
	in.Backlog = more
	more = more || len(a.reqs) > 0
	superseded := a.inbox.superseded
	a.mu.Unlock()
	a.logDrops(superseded)

	in.Now, in.Wall = a.clock.NowMs(), time.Now().UnixMilli()
	a.out.Reset()
	err := a.eng.Step(&in, &a.out)
	if err != nil {
		if !errors.Is(err, engineerr.ErrReplaced) {
			a.logger.Error("step failed", "err", err)
			a.failOrRetry(reqs, err)
			a.wakeAt = a.clock.NowMs() + 100 // try again soon
			return more
		}
		// The batch was lost; the restored instance's output (joins) is
		// applied below. Requests are retried once in the next batch. Its
		// received messages count as dropped: each is then refused, dropped
		// or handled in Stats, also across a trap.
		a.countLost(in.Inbound)
		a.failOrRetry(reqs, err)
		reqs = nil
		in = core.Input{}
	}
	a.c.steps.Add(1)
	a.c.in.Add(uint64(len(in.Inbound)))
	a.apply(&a.out, &in, reqs)
	a.wakeAt = a.out.WakeAt
	return more
}

// stepJoins bounds the joins of one step: a wasm step taking thousands of
// joins at once (JoinAll) would run into the module's call deadline.
const stepJoins = 256

// takeRequests removes the requests of the next step from a.reqs, in
// order: all of them, unless more than stepJoins joins wait. Called with
// a.mu held.
func (a *Agent) takeRequests() []*request {
	n, joins := 0, 0
	for ; n < len(a.reqs); n++ {
		if a.reqs[n].join != nil {
			if joins == stepJoins {
				break
			}
			joins++
		}
	}
	reqs := a.reqs[:n:n]
	if a.reqs = a.reqs[n:]; len(a.reqs) == 0 {
		a.reqs = nil
	}
	return reqs
}

// countLost counts msgs, received but lost with a trapped step, as dropped
// (those naming a known member as from members too).
func (a *Agent) countLost(msgs []core.Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range msgs {
		a.c.dropped.Add(1)
		if from := senderOf(m.Payload); from != "" {
			if a.inbox.member(m.Topic, from) {
				a.c.droppedMember.Add(1)
			}
		}
	}
}

// logDrops says, at most once per DropLogInterval, how many received
// messages were dropped since it last did, and how many were superseded
// (the inbox's count, superseded).
func (a *Agent) logDrops(superseded uint64) {
	if superseded != a.supersededLogged && time.Since(a.supersededLoggedAt) >= a.cfg.DropLogInterval {
		a.logger.Warn("behind: received heartbeats and acks waited so long that newer ones took their place (short of CPU for this many groups?)",
			"superseded", superseded-a.supersededLogged, "total", superseded)
		a.supersededLogged, a.supersededLoggedAt = superseded, time.Now()
	}
	d, dm := a.c.dropped.Load(), a.c.droppedMember.Load()
	if d == a.dropsLogged || time.Since(a.dropsLoggedAt) < a.cfg.DropLogInterval {
		return
	}
	a.logger.Warn("received messages dropped: the queue of messages waiting for the core was full (a flood on the bus?)",
		"dropped", d-a.dropsLogged, "from_members", dm-a.memberDropsLogged, "total", d)
	a.dropsLogged, a.memberDropsLogged, a.dropsLoggedAt = d, dm, time.Now()
}

func (a *Agent) failOrRetry(reqs []*request, err error) {
	var again []*request
	for _, r := range reqs {
		if r.retried {
			r.done <- err
			continue
		}
		r.retried = true
		again = append(again, r)
	}
	if len(again) > 0 {
		a.mu.Lock()
		a.reqs = append(again, a.reqs...)
		a.mu.Unlock()
		a.wake()
	}
}

// apply carries out one Output in the core's order.
func (a *Agent) apply(out *core.Output, in *core.Input, reqs []*request) {
	// The core's order — persist, publish, events — is core.Driver's: a
	// group whose state could not be saved publishes nothing (now or in a
	// later batch) until a save succeeds, and a leadership the same Output
	// revokes never starts OnStartedLeading. The driver's callbacks are
	// made once and keep the step's state in the agent (loop-owned): made
	// per step, they and the map of refusals were allocations of every step.
	d := &a.driver
	if d.Save == nil {
		a.initDriver()
	}
	a.pubs, a.planned = a.pubs[:0], false
	if len(a.refused) > 0 {
		clear(a.refused)
	}
	held, err := d.Apply(out)
	a.sendPlanned()
	clear(a.pubs) // not kept alive until the next step
	if err != nil {
		a.c.persistErrs.Add(1)
		a.logger.Error("persisting election state failed; the group's messages are held until a save succeeds", "err", err)
	}
	a.c.held.Add(uint64(held))
	// 4. Answer the requests of this batch.
	for _, r := range reqs {
		r.done <- requestResult(r, a.refused)
	}
}

// initDriver makes the driver's callbacks (apply).
func (a *Agent) initDriver() {
	d := &a.driver
	d.Save = func(p core.GroupState) error {
		el := a.election(p.Group)
		if el == nil {
			return nil // left in this batch: nothing more is sent for it
		}
		b, err := abi.MarshalState(nil, &p)
		if err == nil {
			err = a.store.Save(StateName(el.cfg.ID, p.Group), b)
		}
		return err
	}
	d.Publish = func(m core.Message) { a.pubs = append(a.pubs, m) }
	d.Event = func(ev core.Event) {
		a.sendPlanned()
		a.event(a.election(ev.Group), ev)
	}
}

// sendPlanned hands the step's publishes to the publisher, once per step
// and before its first event (core.Driver puts every publish before the
// first event), in envelopes where they can be (coalesce.go).
func (a *Agent) sendPlanned() {
	if a.planned {
		return
	}
	a.planned = true
	a.mu.Lock()
	now := a.clock.NowMs()
	msgs, n := a.coal.plan(now, a.pubs)
	for _, m := range msgs {
		a.echoes.sending(now, m.Topic, m.Payload)
	}
	a.mu.Unlock()
	a.c.coalesced.Add(uint64(n))
	a.pub.enqueue(msgs)
}

// event delivers one event to its election (el: nil if it left).
func (a *Agent) event(el *Election, ev core.Event) {
	switch ev.Kind {
	case core.EventRejected:
		a.c.rejected.Add(1)
		if ev.Request != 0 {
			if a.refused == nil {
				a.refused = map[uint64]string{}
			}
			a.refused[ev.Request] = ev.Reason
		}
		a.logger.Debug("input rejected", "group", ev.Group, "reason", ev.Reason)
		if el != nil && ev.Member != "" && (strings.HasPrefix(ev.Reason, authForged) || strings.HasPrefix(ev.Reason, authUnsigned)) {
			el.authFailed(ev.Member, ev.Reason)
		}
	case core.EventJoined: // a join, or a restore after a trap: no leader known
		if el != nil {
			el.known.Store(&knownLeader{"", ev.Term})
		}
	case core.EventLeaderChanged:
		if el != nil {
			el.newLeader(ev.Leader, ev.Term)
		}
	case core.EventBecameLeader:
		if el != nil {
			el.becameLeader(ev.Term, ev.LeaseUntil)
		}
	case core.EventLease:
		if el != nil {
			el.lease(ev.Term, ev.LeaseUntil)
		}
	case core.EventSteppedDown:
		if el != nil {
			el.steppedDown(ev.Term, ev.Reason)
		}
	case core.EventLeft:
		if el != nil {
			el.leave("left the group")
		}
	case core.EventDuplicateID:
		a.c.dups.Add(1)
		a.logger.Error("duplicate agent id", "group", ev.Group, "reason", ev.Reason)
		if el != nil && el.cb.OnDuplicateID != nil {
			f, id, reason := el.cb.OnDuplicateID, ev.Member, ev.Reason
			el.disp.do(func() { f(id, reason) })
		}
	case core.EventConfig:
		a.mu.Lock()
		a.inbox.setMembers(core.Topic(ev.Group), ev.Members)
		a.coal.config(ev.Group, ev.Members)
		a.mu.Unlock()
		if el != nil {
			el.config(ev)
		}
	case core.EventValue:
		if el != nil && el.cb.OnValue != nil {
			f, leader, term, value := el.cb.OnValue, ev.Leader, ev.Term, ev.Value
			el.disp.do(func() { f(leader, term, value) })
		}
	case core.EventTermSpent:
		a.logger.Error("term space spent: this member can hold no election", "group", ev.Group, "term", ev.Term, "reason", ev.Reason)
	}
}

// requestResult is the core's answer to a request: the refusal that echoes
// its id, or nil.
func requestResult(r *request, refused map[uint64]string) error {
	reason, ok := refused[r.id]
	if !ok {
		return nil
	}
	what := "command"
	switch {
	case r.join != nil:
		what = "join"
	case r.cmd != nil:
		what = r.cmd.Kind.String()
	}
	return fmt.Errorf("host: %s %w: %s", what, ErrRefused, reason)
}

// checkLeases ends leaderships whose lease ran out.
func (a *Agent) checkLeases() {
	for _, el := range a.leases.expired(a.clock.NowMs()) {
		el.stopLeading("lease expired")
	}
}

// Stats returns the agent's counters.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	groups, superseded, thinned := len(a.elections), a.inbox.superseded, a.inbox.thinned
	a.mu.Unlock()
	return Stats{
		Traps: a.eng.Traps(), Steps: a.c.steps.Load(), MessagesIn: a.c.in.Load(),
		MessagesOut: a.c.out.Load(), Rejected: a.c.rejected.Load(), Dropped: a.c.dropped.Load(), DroppedFromMembers: a.c.droppedMember.Load(),
		PersistErrors: a.c.persistErrs.Load(), HeldPublishes: a.c.held.Load(), DuplicateIDs: a.c.dups.Load(), PublishErrors: a.c.publishErrs.Load(),
		Coalesced: a.c.coalesced.Load(), CoalescedIn: a.c.coalescedIn.Load(), Echoes: a.c.echoes.Load(), Superseded: superseded, Thinned: thinned,
		Groups: groups, Transport: a.cfg.Transport.Stats(),
	}
}

// Close resigns every group this agent leads (handing leadership to the best
// live member), waits briefly (until ctx ends, at most 2 s) for those
// messages to be published, then stops: subscriptions end, leaders' contexts
// are cancelled, and the instance is closed. The transport is left open.
//
// Close returns once every goroutine the agent started has ended: its loop,
// its publisher, each election's callbacks (the OnStoppedLeading calls this
// causes included) and every OnStartedLeading, which must return once its
// ctx is cancelled. No callback runs after Close returns, and no message the
// transport still hands over reaches the agent. If ctx ends while callbacks
// are still running, Close returns an error wrapping ctx's (the callbacks
// finish on their own, later); a later Close waits for them again.
func (a *Agent) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		<-a.done
		return a.waitWorkers(ctx)
	}
	a.closing = true
	a.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rerr := a.submit(wctx, &request{resign: true})
	a.pub.waitIdle(wctx)
	close(a.stop)
	<-a.done
	a.pub.close()
	a.cancel()
	for _, el := range a.snapshotElections() {
		el.leave("agent closed")
	}
	// The subscriptions' contexts are cancelled; a transport may still be
	// inside a deliver call or about to make one. Shut the door and wait
	// for the calls inside.
	a.delivering.Lock()
	a.undelivered = true
	a.delivering.Unlock()
	err := errors.Join(a.eng.Close(ctx), a.waitWorkers(ctx))
	if rerr != nil && !errors.Is(rerr, context.DeadlineExceeded) {
		return errors.Join(rerr, err)
	}
	return err
}

// waitWorkers waits for the publisher, the dispatchers and the
// OnStartedLeading calls to end, or for ctx.
func (a *Agent) waitWorkers(ctx context.Context) error {
	ended := make(chan struct{})
	go func() {
		a.workers.Wait()
		close(ended)
	}()
	select {
	case <-ended:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("host: close: callbacks still running: %w", ctx.Err())
	}
}

// Election is one group joined by an Agent.
type Election struct {
	a         *Agent
	cfg       core.Config
	cb        Callbacks
	subCancel context.CancelFunc
	disp      *dispatcher
	left      chan struct{}
	leftOnce  sync.Once

	confMu      sync.Mutex
	confChanged chan struct{} // closed at the next EventConfig (confSignal)

	drained atomic.Bool // Drain, JoinDrained

	known atomic.Pointer[knownLeader] // Leader: the last EventLeaderChanged

	authMu     sync.Mutex
	authLast   AuthFailure // the last message refused for its authentication
	authWarned int64       // agent clock ms of the last warning (0: none)
	authQuiet  uint64      // refusals not warned of since then

	// owned by the agent's loop
	reportedLeader string // the last leader and term given to OnNewLeader
	reportedTerm   uint64
	isLeader       bool // the core says this agent leads term
	leading        bool // OnStartedLeading's ctx is live
	term           uint64
	leaseUntil     int64
	leadCancel     context.CancelFunc
}

// AuthFailure describes the last message of a group refused because its
// authentication failed: a bad signature, or none while this agent requires
// one. Such a message changes nothing; a member whose every message fails
// is, for this agent, not there.
type AuthFailure struct {
	From   string    // the sender the message claims (unverified)
	Reason string    // the core's reason ("auth: bad signature", "auth: unsigned", ...)
	Cause  string    // the likely cause, in words
	At     time.Time // when it was refused
	Count  uint64    // such refusals since the election joined
}

// Core reasons of authentication failures (core/auth.go); replays are not
// key trouble and are not among them.
const (
	authForged   = "auth: bad signature"
	authUnsigned = "auth: unsigned"
)

// authCause says what usually makes messages from a sender fail.
func authCause(mode core.AuthMode, from, reason string) string {
	switch {
	case strings.HasPrefix(reason, authUnsigned):
		return from + " sends unsigned messages: it runs with authentication off while this agent requires it"
	case strings.Contains(reason, "(no key for"):
		return "no public key for " + from + " among this agent's member keys: add its key, or it is not a member"
	case strings.Contains(reason, "(length)") || strings.Contains(reason, "(encoding)") || strings.Contains(reason, "(no epoch or counter)"):
		return from + " signs in another way: a different authentication mode (hmac or ed25519) than this agent's"
	case mode == core.AuthHMAC:
		return from + " signs with a different group key than this agent's"
	}
	return from + "'s signature does not match the public key this agent has for it: a different key pair, or an outdated member key"
}

// authFailed records a message refused for its authentication and warns,
// at most once per election timeout, naming the sender and the likely cause.
func (e *Election) authFailed(from, reason string) {
	now := e.a.clock.NowMs()
	e.authMu.Lock()
	e.authLast = AuthFailure{From: from, Reason: reason, Cause: authCause(e.cfg.Auth, from, reason), At: time.Now(), Count: e.authLast.Count + 1}
	e.authQuiet++
	warn := e.authWarned == 0 || now-e.authWarned >= max(e.cfg.ElectionTimeoutMs, core.DefaultElectionTimeoutMs)
	last, n := e.authLast, e.authQuiet
	if warn {
		e.authWarned, e.authQuiet = max(now, 1), 0
	}
	e.authMu.Unlock()
	if warn {
		e.a.logger.Warn("messages fail authentication: "+last.Cause, "group", e.cfg.Group, "from", from, "reason", reason, "refused", n)
	}
}

// AuthFailure returns the last message refused for its authentication, and
// whether there was one.
func (e *Election) AuthFailure() (AuthFailure, bool) {
	e.authMu.Lock()
	defer e.authMu.Unlock()
	return e.authLast, e.authLast.Count > 0
}

// Config is the election's configuration as given to Join.
func (e *Election) Config() core.Config { return e.cfg }

// Status returns the core's snapshot of the group (ID and Group only if it
// cannot be read, e.g. after Leave).
func (e *Election) Status() core.Status {
	st, ok, err := e.a.eng.Status(e.cfg.Group)
	if err != nil || !ok {
		return core.Status{Group: e.cfg.Group, ID: e.cfg.ID, Mode: e.cfg.Mode}
	}
	return st
}

// Resign hands leadership to the best live member. It fails if this agent
// does not lead the group.
func (e *Election) Resign(ctx context.Context) error {
	return e.command(ctx, core.CmdResign, "")
}

// TransferTo hands leadership to member id.
func (e *Election) TransferTo(ctx context.Context, id string) error {
	return e.command(ctx, core.CmdTransfer, id)
}

// Drain (on) stops this agent from leading the group, for maintenance: it
// neither campaigns nor accepts a hand-off, and if it leads it hands over at
// once to the best live member (core.CmdDrain, quorum mode). Drain(false)
// ends it. The core holds it in memory only: a host that wants it to
// outlive a restart persists it and joins with JoinDrained.
func (e *Election) Drain(ctx context.Context, on bool) error {
	kind := core.CmdUndrain
	if on {
		kind = core.CmdDrain
	}
	if err := e.command(ctx, kind, ""); err != nil {
		return err
	}
	e.drained.Store(on)
	return nil
}

// Drained reports whether the group is drained (Drain, JoinDrained).
func (e *Election) Drained() bool { return e.drained.Load() }

// Proclaim makes value this leader's value without an election (etcd's
// Proclaim): its followers see it at once (Callbacks.OnValue,
// Election.Status). It fails unless this agent leads, and for a value
// core.CheckValue refuses (a *core.ValueError, changing nothing). The
// value stays this agent's for its later leaderships while it runs.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	if err := core.CheckValue(value); err != nil {
		return fmt.Errorf("host: proclaim: %w", err)
	}
	select {
	case <-e.left:
		return fmt.Errorf("host: group %q: left", e.cfg.Group)
	default:
	}
	return e.a.submit(ctx, &request{cmd: &core.Command{Kind: core.CmdProclaim, Group: e.cfg.Group, Value: value}})
}

// Campaign starts an election now instead of waiting for a timeout.
func (e *Election) Campaign(ctx context.Context) error {
	return e.command(ctx, core.CmdCampaign, "")
}

// Leave removes the group from the agent (resign first for a graceful
// hand-off). Its persisted state is kept, so a later Join resumes its term.
func (e *Election) Leave(ctx context.Context) error {
	if err := e.command(ctx, core.CmdLeave, ""); err != nil {
		return err
	}
	e.leave("left the group")
	return nil
}

func (e *Election) command(ctx context.Context, kind core.CommandKind, target string) error {
	select {
	case <-e.left:
		return fmt.Errorf("host: group %q: left", e.cfg.Group)
	default:
	}
	return e.a.submit(ctx, &request{cmd: &core.Command{Kind: kind, Group: e.cfg.Group, Target: target}})
}

// knownLeader is a group's leader as its last EventLeaderChanged said.
type knownLeader struct {
	id   string
	term uint64
}

// Leader is the group's leader as the core last reported it ("" while
// none is known) and its term (with "", the term this member is in):
// Status's Leader without a call into the core, which in wasm costs
// microseconds a group and waits for the agent's step. An agent in
// thousands of groups can poll it for each.
func (e *Election) Leader() (id string, term uint64) {
	if k := e.known.Load(); k != nil {
		return k.id, k.term
	}
	return "", 0
}

func (e *Election) newLeader(leader string, term uint64) {
	e.known.Store(&knownLeader{leader, term})
	if leader == "" || (leader == e.reportedLeader && term == e.reportedTerm) {
		return
	}
	e.reportedLeader, e.reportedTerm = leader, term
	if f := e.cb.OnNewLeader; f != nil {
		e.disp.do(func() { f(leader, term) })
	}
}

func (e *Election) becameLeader(term uint64, lease int64) {
	if e.leading {
		e.stopLeading("new term")
	}
	e.isLeader, e.term, e.leaseUntil = true, term, lease
	e.a.leases.track(e, lease)
	if e.cfg.Mode == core.ModeBully || lease > e.a.clock.NowMs() {
		e.startLeading()
	}
}

func (e *Election) lease(term uint64, until int64) {
	if !e.isLeader || term != e.term {
		return
	}
	if e.leading && e.leaseUntil <= e.a.clock.NowMs() {
		// The lease this renews already ended (the loop had not come to
		// it yet): a new lease in the same term is a new leadership for
		// the application, never a silent continuation across the gap.
		e.stopLeading("lease expired")
	}
	e.leaseUntil = until
	e.a.leases.track(e, until)
	if !e.leading && until > e.a.clock.NowMs() {
		e.startLeading()
	}
}

func (e *Election) steppedDown(term uint64, reason string) {
	e.isLeader = false
	if e.leading {
		e.stopLeading(reason)
	}
}

func (e *Election) startLeading() {
	ctx, cancel := context.WithCancel(e.a.ctx)
	e.leading, e.leadCancel = true, cancel
	term := e.term
	if f := e.cb.OnStartedLeading; f != nil {
		// Counted from the dispatcher, whose own count keeps the agent's
		// workers above zero until this one is added (sync.WaitGroup's rule).
		workers := &e.a.workers
		e.disp.do(func() {
			workers.Add(1)
			go func() {
				defer workers.Done()
				f(ctx, term)
			}()
		})
	}
	e.a.logger.Info("started leading", "group", e.cfg.Group, "id", e.cfg.ID, "term", term)
}

func (e *Election) stopLeading(reason string) {
	if !e.leading {
		return
	}
	e.leading = false
	e.leadCancel()
	term := e.term
	if f := e.cb.OnStoppedLeading; f != nil {
		e.disp.do(func() { f(term, reason) })
	}
	e.a.logger.Info("stopped leading", "group", e.cfg.Group, "id", e.cfg.ID, "term", term, "reason", reason)
}

// leave ends the election on the host side.
func (e *Election) leave(reason string) {
	e.leftOnce.Do(func() {
		e.stopLeading(reason)
		e.isLeader = false
		e.subCancel()
		e.disp.close()
		close(e.left)
		e.a.mu.Lock()
		if e.a.elections[e.cfg.Group] == e {
			delete(e.a.elections, e.cfg.Group)
			e.a.inbox.forget(core.Topic(e.cfg.Group))
			e.a.coal.leave(e.cfg.Group)
		}
		e.a.mu.Unlock()
	})
}

// dispatcher runs an election's callbacks in order, on a goroutine that
// runs only while some are queued: ten thousand idle elections cost no
// goroutine (and no stack) each.
type dispatcher struct {
	wg      *sync.WaitGroup
	mu      sync.Mutex
	q       []func()
	running bool
	closed  bool
}

// newDispatcher returns a dispatcher whose goroutine, while one runs, is
// counted in wg.
func newDispatcher(wg *sync.WaitGroup) *dispatcher {
	return &dispatcher{wg: wg}
}

func (d *dispatcher) do(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	d.q = append(d.q, f)
	if !d.running {
		d.running = true
		// Added by the caller (the loop, Close, or a callback's own
		// goroutine), before any wait on wg that must cover it.
		d.wg.Add(1)
		go d.run()
	}
}

// close drops callbacks queued after it; those queued before still run.
func (d *dispatcher) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
}

func (d *dispatcher) run() {
	defer d.wg.Done()
	for {
		d.mu.Lock()
		if len(d.q) == 0 {
			d.running = false
			d.q = nil // an idle election keeps no array
			d.mu.Unlock()
			return
		}
		f := d.q[0]
		d.q[0] = nil
		d.q = d.q[1:]
		d.mu.Unlock()
		f()
	}
}

// publisher sends an agent's publishes in order, off the step loop.
type publisher struct {
	a      *Agent
	mu     sync.Mutex
	q      []core.Message
	busy   bool
	wake   chan struct{}
	idle   chan struct{} // closed and replaced when the queue drains
	closed bool
}

// newPublisher starts a publisher counted in wg until it ends (after close).
func newPublisher(a *Agent, wg *sync.WaitGroup) *publisher {
	p := &publisher{a: a, wake: make(chan struct{}, 1), idle: make(chan struct{})}
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.run()
	}()
	return p
}

func (p *publisher) enqueue(ms []core.Message) {
	if len(ms) == 0 {
		return
	}
	p.mu.Lock()
	p.q = append(p.q, ms...)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *publisher) run() {
	for range p.wake {
		for {
			p.mu.Lock()
			if len(p.q) == 0 || p.closed {
				p.busy = false
				close(p.idle)
				p.idle = make(chan struct{})
				closed := p.closed
				p.mu.Unlock()
				if closed {
					return
				}
				break
			}
			ms := p.q // everything queued, in one batch
			p.q = nil
			p.busy = true
			p.mu.Unlock()
			p.send(ms)
		}
	}
}

// send publishes ms in order: a failed message is counted, logged and
// skipped. A transport that batches (transport.BatchPublisher) gets them
// together under one deadline (a context and its timer per message cost
// more than a NATS publish); others one by one, each under its own.
func (p *publisher) send(ms []core.Message) {
	failed := func(topic string, err error) {
		p.a.c.publishErrs.Add(1)
		p.a.logger.Warn("publish failed", "topic", topic, "err", err)
	}
	bp, ok := p.a.cfg.Transport.(transport.BatchPublisher)
	if !ok {
		for _, m := range ms {
			ctx, cancel := context.WithTimeout(p.a.ctx, p.a.cfg.PublishTimeout)
			err := p.a.cfg.Transport.Publish(ctx, m.Topic, m.Payload)
			cancel()
			if err != nil {
				failed(m.Topic, err)
			} else {
				p.a.c.out.Add(1)
			}
		}
		return
	}
	batch := make([]transport.Message, len(ms))
	for i, m := range ms {
		batch[i] = transport.Message{Topic: m.Topic, Payload: m.Payload}
	}
	ctx, cancel := context.WithTimeout(p.a.ctx, p.a.cfg.PublishTimeout)
	defer cancel()
	for len(batch) > 0 {
		n, err := bp.PublishBatch(ctx, batch)
		n = min(max(n, 0), len(batch))
		p.a.c.out.Add(uint64(n))
		if err == nil {
			return
		}
		if n == len(batch) { // all sent yet an error: count it, do not spin
			failed("", err)
			return
		}
		failed(batch[n].Topic, err)
		batch = batch[n+1:]
	}
}

// waitIdle waits until everything queued so far is published or ctx ends.
func (p *publisher) waitIdle(ctx context.Context) {
	for {
		p.mu.Lock()
		if len(p.q) == 0 && !p.busy {
			p.mu.Unlock()
			return
		}
		idle := p.idle
		p.mu.Unlock()
		select {
		case <-idle:
		case <-ctx.Done():
			return
		}
	}
}

func (p *publisher) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}
