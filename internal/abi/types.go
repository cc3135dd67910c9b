package abi

import "github.com/electcore/electcore/core"

// The msgpack encoding of core's types is msgp's, generated (types_gen.go)
// for the mirror types below: each has exactly the fields of its core type,
// in the same order, with the encoding's keys as tags, so that a *core.X
// converts to a *x at no cost and the generated methods run on core's own
// values. The conversions below fail to compile if a core type gains,
// loses or reorders a field without its mirror; the golden encodings
// (testdata/golden) fail if a key or an omission rule changes.
//
// msgp's replace directive makes every field of a core type go through its
// mirror's methods ((*x)(&field)), and the enums through their integer or
// string. msgp's omitempty leaves out a nil list only: MarshalInput leaves out
// an empty one too (emptyAsNil), so a batch's bytes never depend on whether
// a host reuses its buffers, and an idle batch is a few bytes.

//go:generate go tool msgp -io=false -tests=true -unexported
//msgp:clearomitted
//msgp:replace core.Mode with:string
//msgp:replace core.AuthMode with:string
//msgp:replace core.CommandKind with:uint8
//msgp:replace core.EventKind with:uint8
//msgp:replace core.Role with:uint8
//msgp:replace core.Config with:config
//msgp:replace core.GroupState with:groupState
//msgp:replace core.GroupSpec with:groupSpec
//msgp:replace core.Message with:message
//msgp:replace core.Command with:command
//msgp:replace core.Event with:event
//msgp:replace core.MemberStatus with:memberStatus

type input struct {
	Now      int64            `msg:"now"`
	Wall     int64            `msg:"wall,omitempty"`
	Join     []core.GroupSpec `msg:"join,omitempty"`
	Inbound  []core.Message   `msg:"in,omitempty"`
	Commands []core.Command   `msg:"cmd,omitempty"`
	Backlog  bool             `msg:"backlog,omitempty"`
}

type output struct {
	Persist   []core.GroupState `msg:"persist,omitempty"`
	Publishes []core.Message    `msg:"pub,omitempty"`
	Events    []core.Event      `msg:"ev,omitempty"`
	WakeAt    int64             `msg:"wake,omitempty"`
}

type message struct {
	Topic   string `msg:"t"`
	Payload []byte `msg:"p"`
}

type groupSpec struct {
	Config      core.Config     `msg:"config"`
	State       core.GroupState `msg:"state"`
	Incarnation uint64          `msg:"inc,omitempty"`
	Request     uint64          `msg:"req,omitempty"`
}

type groupState struct {
	Group     string   `msg:"group"`
	Term      uint64   `msg:"term"`
	Vote      string   `msg:"vote"`
	Epoch     uint64   `msg:"epoch"`
	ConfTerm  uint64   `msg:"conf_term,omitempty"`
	ConfIndex uint64   `msg:"conf_index,omitempty"`
	Members   []string `msg:"members,omitempty"`
	Keys      [][]byte `msg:"keys,omitempty"`
}

type command struct {
	Kind    core.CommandKind `msg:"k"`
	Group   string           `msg:"g"`
	Target  string           `msg:"to"`
	Key     []byte           `msg:"key,omitempty"`
	Value   string           `msg:"value,omitempty"`
	Request uint64           `msg:"req,omitempty"`
}

type event struct {
	Kind       core.EventKind `msg:"k"`
	Group      string         `msg:"g"`
	Term       uint64         `msg:"term"`
	Leader     string         `msg:"leader"`
	LeaseUntil int64          `msg:"lease"`
	Reason     string         `msg:"why"`
	Request    uint64         `msg:"req,omitempty"`
	Member     string         `msg:"member,omitempty"`
	Members    []string       `msg:"members,omitempty"`
	ConfIndex  uint64         `msg:"conf_index,omitempty"`
	Value      string         `msg:"value,omitempty"`
}

type status struct {
	Group         string              `msg:"group"`
	ID            string              `msg:"id"`
	Mode          core.Mode           `msg:"mode"`
	Role          core.Role           `msg:"role"`
	Leader        string              `msg:"leader"`
	Term          uint64              `msg:"term"`
	Vote          string              `msg:"vote"`
	LeaseUntil    int64               `msg:"lease_until"`
	Priority      uint32              `msg:"priority"`
	Members       []core.MemberStatus `msg:"members"`
	ConfTerm      uint64              `msg:"conf_term"`
	ConfIndex     uint64              `msg:"conf_index"`
	ConfCommitted bool                `msg:"conf_committed"`
	Voter         bool                `msg:"voter"`
	Elections     uint64              `msg:"elections"`
	Received      uint64              `msg:"received"`
	Rejected      uint64              `msg:"rejected"`
	Duplicates    uint64              `msg:"duplicates"`
	Auth          core.AuthMode       `msg:"auth"`
	Epoch         uint64              `msg:"epoch"`
	Unsigned      uint64              `msg:"unsigned"`
	Forged        uint64              `msg:"forged"`
	Replayed      uint64              `msg:"replayed"`
	Value         string              `msg:"value"`
	ValueVersion  uint64              `msg:"value_ver"`
}

type memberStatus struct {
	ID        string `msg:"id"`
	Priority  uint32 `msg:"priority"`
	LastHeard int64  `msg:"last_heard"`
}

type config struct {
	ID                 string            `msg:"id"`
	Group              string            `msg:"group"`
	Priority           uint32            `msg:"priority"`
	BalancedPriority   bool              `msg:"balanced_priority"`
	Mode               core.Mode         `msg:"mode"`
	Members            []string          `msg:"members"`
	AwaitConfig        bool              `msg:"await_config"`
	HeartbeatMs        int64             `msg:"heartbeat_ms"`
	ElectionTimeoutMs  int64             `msg:"election_timeout_ms"`
	MaxDriftPPM        int64             `msg:"max_drift_ppm"`
	LeaseMs            int64             `msg:"lease_ms"`
	HandoffHoldMs      int64             `msg:"handoff_hold_ms"`
	CollectMs          int64             `msg:"collect_ms"`
	NoPriorityTransfer bool              `msg:"no_priority_transfer"`
	Seed               uint64            `msg:"seed"`
	Auth               core.AuthMode     `msg:"auth"`
	Key                []byte            `msg:"key"`
	MemberKeys         map[string][]byte `msg:"member_keys"`
	Value              string            `msg:"value"`
}

// Every mirror converts from its core type: a field added to one and not
// the other stops the build here.
var (
	_ = (*input)((*core.Input)(nil))
	_ = (*output)((*core.Output)(nil))
	_ = (*message)((*core.Message)(nil))
	_ = (*groupSpec)((*core.GroupSpec)(nil))
	_ = (*groupState)((*core.GroupState)(nil))
	_ = (*command)((*core.Command)(nil))
	_ = (*event)((*core.Event)(nil))
	_ = (*status)((*core.Status)(nil))
	_ = (*memberStatus)((*core.MemberStatus)(nil))
	_ = (*config)((*core.Config)(nil))
)
