package core

// Input is one batch handed to Engine.Step.
type Input struct {
	// Now is the host's monotonic clock in milliseconds. It must not go
	// backwards; a smaller value is treated as the last one seen. Read it
	// no earlier than the arrival of every message in Inbound: the core
	// dates what it heard by Now, and a member that heard a leader refuses
	// votes for an election timeout from then, so a Now from before an
	// arrival would end that refusal early and let two leases overlap.
	Now int64
	// Wall is the wall clock in Unix milliseconds, used only to fill the seed
	// format's informational "elected_at" and "timestamp" fields; 0 omits
	// them. Timing never depends on it, so wall-clock jumps are harmless.
	Wall int64
	// Join adds groups (or restarts them from persisted state).
	Join []GroupSpec
	// Inbound are payloads received on the bus, in arrival order.
	Inbound []Message
	// Commands are the application's requests, applied after Inbound.
	Commands []Command
	// Backlog says that more received messages wait behind this batch (the
	// host took only part of what it holds). A campaign that is due then
	// waits for the batches that follow, where a heartbeat or a vote may
	// make it needless, but never more than a heartbeat interval past its
	// time: under overload every message is handled before an election
	// timer is taken for silence.
	Backlog bool
}

// Message is one payload on a bus topic.
type Message struct {
	Topic   string
	Payload []byte
}

// GroupSpec joins a group: its configuration and the state it persisted
// before (the zero GroupState for a first start).
type GroupSpec struct {
	Config Config
	State  GroupState
	// Incarnation tells this run of the agent from every other process that
	// uses the same ID: a restart, or a second process given the ID by
	// mistake. Hosts draw it at random for every join; every message carries
	// it, so the core notices another process speaking with this agent's ID,
	// or with a member's ID from two incarnations at once
	// (EventDuplicateID). 0 derives one from Config.Seed and the join epoch,
	// which tells restarts apart but not two processes with fresh state.
	Incarnation uint64
	// Request, if not 0, is echoed in the EventRejected that refuses this
	// join, so a host matches the answer to its request without reading
	// the reason.
	Request uint64
}

// GroupState is what a group needs persisted: its term and the vote it cast
// in that term. A host writes it durably before sending the publishes of the
// same Output, and hands it back in GroupSpec.State on restart.
type GroupState struct {
	Group string
	Term  uint64
	Vote  string
	// Epoch counts this agent's joins of the group with auth on: signed
	// messages carry it so that a restarted sender is not taken for a replay
	// (auth.go). Persist it like Term.
	Epoch uint64
	// The quorum group's configuration (membership.go): its version and
	// member set (sorted), with Keys[i] the ed25519 public key of
	// Members[i] when the group uses ed25519 (a list, not a map, so that
	// the encoding is the same on every host). ConfIndex 0 (a group that
	// never had a leader) means Config.Members.
	ConfTerm  uint64
	ConfIndex uint64
	Members   []string
	Keys      [][]byte
}

// CommandKind says what a Command asks for.
type CommandKind uint8

const (
	// CmdCampaign starts an election now instead of waiting for a timeout.
	CmdCampaign CommandKind = iota + 1
	// CmdResign hands leadership to the best live member (highest priority
	// heard from within an election timeout), without waiting for a timeout.
	// No priority hand-off returns leadership here until ten election
	// timeouts after this agent is heard again: a resign is a move.
	CmdResign
	// CmdTransfer hands leadership to Command.Target, which keeps it for
	// as long as it leads: no priority hand-off moves it on.
	CmdTransfer
	// CmdLeave removes the group from the engine (resign first for a
	// graceful exit).
	CmdLeave
	// CmdAddMember adds Command.Target to a quorum group's configuration
	// (with its ed25519 public key in Command.Key when the group uses
	// ed25519); CmdRemoveMember removes it. A follower forwards the request
	// to its leader. The change is done when an EventConfig reports it
	// committed; a refusal comes as EventRejected, at the leader for a
	// forwarded request. One change at a time: the next waits until the
	// last commits.
	CmdAddMember
	CmdRemoveMember
	// CmdDrain (quorum mode) stops this agent from leading, like a node
	// cordoned for maintenance: it never campaigns nor accepts a hand-off,
	// it announces priority 0 so that no leader hands over to it, and as
	// leader it hands over at once to the best live member. CmdUndrain
	// ends that. The core keeps it only in memory: a host that persists
	// it sends it again with the join, in the same Input.
	CmdDrain
	CmdUndrain
	// CmdProclaim (etcd's Proclaim) makes Command.Value this leader's
	// value (Config.Value) without an election: the leader announces it at
	// once, with a newer version, and its followers take it (EventValue).
	// Refused unless this agent leads. The core keeps it in memory: a host
	// that rejoins (a restart, a trap) gives it as Config.Value.
	CmdProclaim
)

func (k CommandKind) String() string {
	switch k {
	case CmdCampaign:
		return "campaign"
	case CmdResign:
		return "resign"
	case CmdTransfer:
		return "transfer"
	case CmdLeave:
		return "leave"
	case CmdAddMember:
		return "add-member"
	case CmdRemoveMember:
		return "remove-member"
	case CmdDrain:
		return "drain"
	case CmdUndrain:
		return "undrain"
	case CmdProclaim:
		return "proclaim"
	}
	return "unknown"
}

// Command is an application request for one group.
type Command struct {
	Kind   CommandKind
	Group  string
	Target string
	// Key is the ed25519 public key of the member CmdAddMember adds.
	Key []byte
	// Value is CmdProclaim's new value (see Config.Value).
	Value string
	// Request, if not 0, is echoed in the EventRejected that refuses this
	// command (see GroupSpec.Request).
	Request uint64
}

// Output is what one Step produced, to be applied in field order: persist,
// publish, act on events, and wake the engine at WakeAt.
type Output struct {
	Persist   []GroupState
	Publishes []Message
	Events    []Event
	// WakeAt is the monotonic time (ms) by which Step must be called again;
	// 0 when no group has a timer.
	WakeAt int64
}

// Reset empties o for reuse, keeping its capacity.
func (o *Output) Reset() {
	o.Persist = o.Persist[:0]
	o.Publishes = o.Publishes[:0]
	o.Events = o.Events[:0]
	o.WakeAt = 0
}

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventLeaderChanged: the group's known leader changed (Leader "" means
	// none is known). Term is the leader's term.
	EventLeaderChanged EventKind = iota + 1
	// EventBecameLeader: this agent won the election for Term. LeaseUntil is
	// set when the votes already grant a lease, one that more remains of
	// than the vote round took (0: act only after an EventLease). It comes before the leader-changed
	// that names this agent, and a later event of the same Output may
	// revoke it (stepped-down): a host starts leader-only work only for a
	// leadership still held at the end of the Output.
	EventBecameLeader
	// EventLease: a quorum leader's lease now runs until LeaseUntil (monotonic
	// ms). The leader must stop acting for Term at LeaseUntil unless a later
	// EventLease extends it. Nothing is reported when a lease ends: a leader
	// may keep its term without one (its votes' lease ran out before its
	// first heartbeat's acks came back), and an EventLease that comes after
	// the last LeaseUntil passed is a new lease of the same term, from a
	// heartbeat sent after the leadership began: the host may act for Term
	// again from it, having stopped at the old LeaseUntil.
	EventLease
	// EventSteppedDown: this agent stopped leading Term; Reason says why.
	EventSteppedDown
	// EventRejected: an input was refused (Reason says why) and changed
	// nothing.
	EventRejected
	// EventJoined: a group was joined; EventLeft: it was removed.
	EventJoined
	EventLeft
	// EventDuplicateID: another process speaks with this agent's ID, or a
	// member's ID is heard from two live incarnations at once. Two agents
	// with one ID vote twice and break the quorum's guarantee: Reason says
	// which ID and how to fix it. Reported once per election timeout per ID.
	EventDuplicateID
	// EventConfig: a quorum group's configuration changed. Members lists
	// it and ConfIndex is its index; Reason says how: "proposed …" (this
	// leader), "adopted from X" (learnt; not yet known to be committed),
	// or "committed" (a majority of it holds it: the change is done). A
	// leader reports every commit, its re-stamp after each election
	// included; a follower reports a commit it is told of when the member
	// set differs from the last it reported.
	EventConfig // EventTermSpent: this member's term is MaxTerm, so it can hold no
	// further election (terms never wrap): reported when it joins so and
	// whenever it would campaign (once per election timeout). Only a reset
	// of its persisted state brings it back (Reason says so).
	EventTermSpent
	// EventValue: the value of the group's leader, as this member sees it,
	// changed: Leader announced Value in Term (Config.Value, CmdProclaim).
	// A member reports only its own leader's value of that leader's term,
	// and a newer one than it last reported: a follower learns it from the
	// leader's first heartbeat it hears, a leader reports its own when it
	// starts leading and at each proclaim. A leader that announces none
	// brings none; a new leader or term forgets the old value (Status.Value
	// is "" until the new leader's arrives).
	EventValue
)

func (k EventKind) String() string {
	switch k {
	case EventLeaderChanged:
		return "leader-changed"
	case EventBecameLeader:
		return "became-leader"
	case EventLease:
		return "lease"
	case EventSteppedDown:
		return "stepped-down"
	case EventRejected:
		return "rejected"
	case EventJoined:
		return "joined"
	case EventLeft:
		return "left"
	case EventDuplicateID:
		return "duplicate-id"
	case EventConfig:
		return "config"
	case EventTermSpent:
		return "term-spent"
	case EventValue:
		return "value"
	}
	return "unknown"
}

// Event reports a change to the application. Term is the fencing token: a
// leader tags every action with it, and a resource that has seen a higher
// term refuses the action.
type Event struct {
	Kind       EventKind
	Group      string
	Term       uint64
	Leader     string
	LeaseUntil int64
	Reason     string
	// Request is the GroupSpec.Request or Command.Request this
	// EventRejected refuses (0: none, or an inbound message).
	Request uint64
	// Member is the member an EventDuplicateID is about: the ID heard from
	// two processes (this agent's own ID when another process uses it); of
	// an EventRejected that failed authentication, the sender it claims.
	Member string
	// Members and ConfIndex: an EventConfig's configuration.
	Members   []string
	ConfIndex uint64
	// Value is an EventValue's leader value.
	Value string
}

// Role is a member's part in its group.
type Role uint8

const (
	RoleFollower Role = iota
	RolePreCandidate
	RoleCandidate
	RoleLeader
)

func (r Role) String() string {
	switch r {
	case RoleFollower:
		return "follower"
	case RolePreCandidate:
		return "pre-candidate"
	case RoleCandidate:
		return "candidate"
	case RoleLeader:
		return "leader"
	}
	return "unknown"
}

// Status is a snapshot of one group, for health endpoints and tooling.
type Status struct {
	Group      string
	ID         string
	Mode       Mode
	Role       Role
	Leader     string
	Term       uint64
	Vote       string
	LeaseUntil int64
	Priority   uint32
	// Members are the configuration's, sorted by ID; LastHeard is 0 for a
	// member never heard.
	Members []MemberStatus
	// The configuration's version, whether it is known to be committed, and
	// whether this agent is in it (false: removed, or waiting to be added).
	ConfTerm      uint64
	ConfIndex     uint64
	ConfCommitted bool
	Voter         bool
	Elections     uint64 // campaigns this agent started
	Received      uint64 // wire messages accepted
	Rejected      uint64 // wire messages refused
	// Duplicates counts EventDuplicateID reports.
	Duplicates uint64
	// Authentication (auth.go): the mode, this agent's epoch, and the
	// refusals by reason (all included in Rejected).
	Auth     AuthMode
	Epoch    uint64
	Unsigned uint64 // no signature while auth is on
	Forged   uint64 // bad signature, unknown key, malformed envelope
	Replayed uint64 // an epoch that is over, or a counter already seen
	// Value is the leader's value (Config.Value, CmdProclaim) as this
	// member last heard it from Leader in Term, and ValueVersion its
	// version in that term; "" and 0 while none is known.
	Value        string
	ValueVersion uint64
}

// MemberStatus is what a group knows of one member.
type MemberStatus struct {
	ID        string
	Priority  uint32
	LastHeard int64
}
