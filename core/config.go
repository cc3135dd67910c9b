package core

import (
	"slices"
	"strconv"
	"unicode/utf8"
)

// Mode selects the election algorithm of a group.
type Mode string

const (
	// ModeQuorum is a Raft-style election (PreVote, CheckQuorum, persistent
	// term and vote, leader lease) over a fixed member list. At most one
	// leader per term under any partition, loss or crash.
	ModeQuorum Mode = "quorum"
	// ModeBully is the seed skill's algorithm made correct: dynamic
	// membership, highest (priority, id) wins an election, terms, heartbeats.
	// It cannot prevent two leaders on the two sides of a partition; it
	// converges to one, the highest term winning, within one heartbeat
	// interval after the partition heals.
	ModeBully Mode = "bully"
)

// AuthMode selects how a group authenticates its messages (auth.go).
type AuthMode string

const (
	// AuthOff (or ""): messages are not signed; signatures are ignored.
	AuthOff AuthMode = "off"
	// AuthHMAC: HMAC-SHA256 with one secret shared by the group (Config.Key).
	// Any key holder can speak as any member: it keeps outsiders out.
	AuthHMAC AuthMode = "hmac"
	// AuthEd25519: every member signs with its own ed25519 key (Config.Key);
	// Config.MemberKeys holds every member's public key.
	AuthEd25519 AuthMode = "ed25519"
)

// Defaults. The bus this is tuned for delivers in ~100 ms (median) with rare
// outliers of 1 s, and pilotctl carries about 25 events/s per subscription.
const (
	// DefaultHeartbeatMs: a leader heartbeat every 500 ms costs a 5-member
	// quorum group 10 messages/s (heartbeat plus 4 acks), well under
	// pilotctl's ~25 events/s per subscription.
	DefaultHeartbeatMs = 500
	// DefaultElectionTimeoutMs: 4 heartbeat intervals, so a 1 s outlier
	// (two late heartbeats) never starts an election, while failover stays
	// near 2–3 s instead of the seed skill's 20 s.
	DefaultElectionTimeoutMs = 2000
	// DefaultMaxDriftPPM: clocks may run 1% fast or slow relative to each
	// other; the lease shrinks to stay safe under that drift.
	DefaultMaxDriftPPM = 10_000
)

// Limits enforced by Validate and by the decoders.
const (
	MaxIDLen      = 128     // bytes in an agent id or group name
	MaxMembers    = 4096    // members of one group (quorum list or bully peers seen)
	MaxPayload    = 4096    // bytes in one wire message; larger ones are rejected undecoded
	MaxBatchBytes = 1 << 20 // bytes in one msgp Input batch
	maxDriftPPM   = 100_000 // a 10% drift bound is already a broken clock
	// MaxTerm is the highest term: 2^53−1, exact in every JSON number
	// reader (JavaScript's included). Messages beyond it are malformed, and
	// a member at MaxTerm holds no further election, so terms never wrap.
	// At a thousand elections a second it lasts 285,000 years.
	MaxTerm = 1<<53 - 1
	// MaxTermStep bounds how far one message may move a member's term
	// beyond a thousand terms per millisecond since its term last moved (or
	// it joined): a message further ahead is refused (implausibleTerm).
	// Honest terms advance far slower (a term per election or hand-off), so
	// a member cut off catches up with the first message it hears; a flood
	// of N messages over t ms moves a term at most N×(MaxTermStep+1) +
	// 1000×t, so the term space lasts 285 years of flooding, and members a
	// flood set apart agree again within N×MaxTermStep µs.
	MaxTermStep = 16
	// termsPerMs is the rate at which that allowance grows.
	termsPerMs = 1000
)

// MaxValueLen bounds a leader value (Config.Value, CmdProclaim) in bytes.
// Every heartbeat carries it, escaped (a quote or backslash takes two
// bytes), next to names of MaxIDLen and a signature: at 1 KiB the longest
// heartbeat stays inside MaxPayload (TestValueBoundFitsPayload). Larger
// values belong in a store the value points to.
const MaxValueLen = 1024

// Config configures one election group. The zero value of every field but ID,
// Group and (in quorum mode) Members selects the documented default. A Config
// is validated and normalised once, by Engine.Join; it is never changed after.
type Config struct {
	// ID names this agent; unique in the group. 1–128 bytes of
	// [A-Za-z0-9._:@/+-].
	ID string
	// Group names the election; its topic on the bus is "election:<Group>".
	// Same alphabet and length as ID.
	Group string
	// Priority orders candidates: higher campaigns sooner, wins bully
	// elections, and receives leadership by graceful transfer in quorum mode.
	// 0 means the POSIX cksum of ID, as the seed skill computes it (with
	// BalancedPriority: RendezvousPriority(Group, ID)).
	Priority uint32
	// BalancedPriority is for an agent that joins many groups with the same
	// members: a zero Priority becomes RendezvousPriority(Group, ID) instead
	// of the cksum of ID, and members not yet heard are assumed to use it
	// too. Each member then ranks first in about an equal share of the
	// groups, so leadership spreads evenly over the agents, and a dead
	// agent's groups spread over the survivors. With the cksum every group
	// ranks the members alike and one agent leads them all. Give every
	// member of a group the same choice: a member that differs is ranked
	// by the priority it announces once heard.
	BalancedPriority bool
	// Mode is ModeQuorum (default) or ModeBully.
	Mode Mode
	// Members lists every member's ID, including this one. Required in quorum
	// mode (a majority of it elects); optional in bully mode, where a
	// non-empty list restricts who may take part. At most MaxMembers.
	Members []string
	// AwaitConfig (quorum mode) starts this agent as one waiting to be
	// added: it neither campaigns nor counts until a configuration that
	// lists it arrives from the group (CmdAddMember at any member), and
	// Members need not include it: they are the members it learns that
	// configuration from. Ignored once a configuration was persisted.
	AwaitConfig bool
	// HeartbeatMs is the leader's heartbeat interval. Default 500, at least 10.
	HeartbeatMs int64
	// ElectionTimeoutMs is how long a follower waits without hearing a leader
	// before it campaigns (plus a priority-ranked, randomised offset of up to
	// 5/8 of it). Default 2000; at least 3 × HeartbeatMs.
	ElectionTimeoutMs int64
	// MaxDriftPPM bounds, in parts per million, how far each member's clock
	// rate may stray from real time (ρ): a clock measures a real interval d
	// as somewhere in d×(1±ρ), so two members' clocks may differ in rate by
	// up to 2ρ. Default 10000 (1%), at most 100000.
	MaxDriftPPM int64
	// LeaseMs is how long a quorum leader may act after a majority last
	// acknowledged it, counted on its own clock from when it sent what they
	// acknowledged. Default and maximum: MaxLeaseMs − HandoffHoldMs, with ElectionTimeoutMs ×
	// (1−ρ)/(1+ρ) − 1: the lease then ends, in real time, no later than
	// LeaseMs/(1−ρ) after that send, while a member that acknowledged grants
	// no vote for ElectionTimeoutMs of its own clock, at least
	// ElectionTimeoutMs/(1+ρ) real time after it received it, which is later.
	// Minimum 2 × HeartbeatMs: a lease is renewed by the acks of the next
	// heartbeat, which leave a heartbeat interval plus a round trip later;
	// shorter, the leader loses its lease between heartbeats, forever.
	LeaseMs int64
	// HandoffHoldMs is how long this agent's application may still be acting
	// after it hands leadership over (resign, transfer or a priority
	// hand-off): its leader-only work is told to stop at that instant, but
	// a command may take a grace period to exit. The successor takes no
	// lease (so its own work does not start) until that long after it heard
	// of the hand-off, stretched by the drift bound. The resign carries it,
	// so each leader's own value applies. That work must also end within
	// the safe lease of the last acknowledged heartbeat, so LeaseMs +
	// HandoffHoldMs may not exceed MaxLeaseMs (the default lease shrinks by
	// it). Default 0; at most MaxLeaseMs − 2 × HeartbeatMs. electhost sets
	// it to --grace + 50 ms when it runs a command (and the lease to the
	// rest).
	HandoffHoldMs int64
	// CollectMs is how long a bully candidate waits for a higher candidate
	// before it declares itself leader: it must exceed a round trip.
	// Default ElectionTimeoutMs/4 (500 ms at the defaults).
	CollectMs int64
	// NoPriorityTransfer turns off the quorum leader's graceful hand-off to a
	// healthy member of higher priority.
	NoPriorityTransfer bool
	// Seed seeds this group's random generator (timeouts). 0 derives one from
	// ID and Group, so agents differ but runs repeat.
	Seed uint64
	// Auth selects message authentication (auth.go): AuthOff (the default),
	// AuthHMAC or AuthEd25519. With it on, unsigned, forged, replayed and
	// wrong-group messages are refused; the host must persist GroupState.
	Auth AuthMode
	// Key is this agent's key: the group's shared secret (hmac, 16–1024
	// bytes) or its ed25519 private key (64 bytes, or its 32-byte seed).
	Key []byte
	// MemberKeys maps member ids to their ed25519 public keys (32 bytes).
	// Only senders listed here are heard; every listed Member needs a key.
	// This agent's own entry is derived from Key when missing.
	MemberKeys map[string][]byte
	// Value is what this agent announces with its leadership (etcd's
	// Campaign value, a Consul lock's value): say, the address where it
	// serves as leader. Every heartbeat of its terms carries it, so every
	// follower learns it (Status.Value, EventValue); CmdProclaim changes it
	// while leading. At most MaxValueLen bytes of UTF-8 without control
	// characters (CheckValue); "" announces none.
	Value string
}

// defaultPriority is the priority member id is assumed to have until it
// announces one: its own default.
func (c *Config) defaultPriority(id string) uint32 {
	if c.BalancedPriority {
		return RendezvousPriority(c.Group, id)
	}
	return Cksum([]byte(id))
}

// RendezvousPriority is the balanced default priority of member id in group
// (Config.BalancedPriority): a well-mixed 64-bit hash of both names (FNV-1a,
// then the MurmurHash3 finalizer), its upper half, never 0. Rendezvous
// (highest random weight) hashing: over many groups every member is the
// highest in about an equal share, and without one member each of its
// groups goes to the next highest, spread alike over the others. The cksum
// cannot serve here: a CRC is linear, so which of two ids of one length
// ranks higher would hang on a single bit of the group's CRC.
func RendezvousPriority(group, id string) uint32 {
	h := uint64(14695981039346656037)
	for i := range len(group) {
		h = (h ^ uint64(group[i])) * 1099511628211
	}
	h = (h ^ 0xff) * 1099511628211 // not in the name alphabet: a separator
	for i := range len(id) {
		h = (h ^ uint64(id[i])) * 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return max(uint32(h>>32), 1)
}

// MaxLeaseMs is the longest safe lease for an election timeout and a drift
// bound ρ (ppm): electionTimeoutMs × (1−ρ)/(1+ρ) − 1 (see Config.LeaseMs).
func MaxLeaseMs(electionTimeoutMs, maxDriftPPM int64) int64 {
	return electionTimeoutMs*(1_000_000-maxDriftPPM)/(1_000_000+maxDriftPPM) - 1
}

// Topic is the bus topic of a group.
func Topic(group string) string { return topicPrefix + group }

const topicPrefix = "election:"

// Validate reports the first problem with c, or nil. It does not change c.
func (c Config) Validate() error {
	_, err := c.normalize()
	return err
}

// WithTimingDefaults returns c with its timings — HeartbeatMs,
// ElectionTimeoutMs, MaxDriftPPM, HandoffHoldMs, LeaseMs, CollectMs —
// validated and their defaults filled in, as Engine.Join will run them; the
// other fields are neither checked nor changed. Hosts, CLIs and the
// simulator use it instead of restating the timing rules.
func (c Config) WithTimingDefaults() (Config, error) {
	if c.HeartbeatMs == 0 {
		c.HeartbeatMs = DefaultHeartbeatMs
	}
	if c.HeartbeatMs < 10 || c.HeartbeatMs > 600_000 {
		return c, configErr("heartbeat_ms", "heartbeat-range", itoa(c.HeartbeatMs), 10, 600_000, "heartbeat_ms "+itoa(c.HeartbeatMs)+": want 10..600000")
	}
	if c.ElectionTimeoutMs == 0 {
		c.ElectionTimeoutMs = max(DefaultElectionTimeoutMs, 3*c.HeartbeatMs)
	}
	if c.ElectionTimeoutMs < 3*c.HeartbeatMs || c.ElectionTimeoutMs > 3_600_000 {
		return c, configErr("election_timeout_ms", "election-timeout-range", itoa(c.ElectionTimeoutMs), 3*c.HeartbeatMs, 3_600_000, "election_timeout_ms "+itoa(c.ElectionTimeoutMs)+": want 3×heartbeat ("+itoa(3*c.HeartbeatMs)+")..3600000")
	}
	if c.MaxDriftPPM == 0 {
		c.MaxDriftPPM = DefaultMaxDriftPPM
	}
	if c.MaxDriftPPM < 0 || c.MaxDriftPPM > maxDriftPPM {
		return c, configErr("max_drift_ppm", "drift-range", itoa(c.MaxDriftPPM), 0, maxDriftPPM, "max_drift_ppm "+itoa(c.MaxDriftPPM)+": want 0.."+itoa(maxDriftPPM))
	}
	maxLease := MaxLeaseMs(c.ElectionTimeoutMs, c.MaxDriftPPM)
	if c.HandoffHoldMs < 0 || c.HandoffHoldMs > maxLease-2*c.HeartbeatMs {
		return c, configErr("handoff_hold_ms", "handoff-hold-range", itoa(c.HandoffHoldMs), 0, max(maxLease-2*c.HeartbeatMs, 0), "handoff_hold_ms "+itoa(c.HandoffHoldMs)+": want 0.."+itoa(max(maxLease-2*c.HeartbeatMs, 0))+" (the safe lease "+itoa(maxLease)+" less two heartbeats)")
	}
	if c.LeaseMs == 0 {
		c.LeaseMs = maxLease - c.HandoffHoldMs
	}
	if c.LeaseMs < 2*c.HeartbeatMs || c.LeaseMs+c.HandoffHoldMs > maxLease {
		return c, configErr("lease_ms", "lease-range", itoa(c.LeaseMs), 2*c.HeartbeatMs, maxLease-c.HandoffHoldMs, "lease_ms "+itoa(c.LeaseMs)+": want 2×heartbeat ("+itoa(2*c.HeartbeatMs)+").."+itoa(maxLease-c.HandoffHoldMs)+" (election timeout shrunk by the drift bound, less handoff_hold_ms)")
	}
	if c.CollectMs == 0 {
		c.CollectMs = c.ElectionTimeoutMs / 4
	}
	if c.CollectMs < 1 || c.CollectMs > c.ElectionTimeoutMs {
		return c, configErr("collect_ms", "collect-range", itoa(c.CollectMs), 1, c.ElectionTimeoutMs, "collect_ms "+itoa(c.CollectMs)+": want 1..election timeout ("+itoa(c.ElectionTimeoutMs)+")")
	}
	return c, nil
}

// normalize validates c and fills in the defaults.
func (c Config) normalize() (Config, error) {
	if err := checkName("id", c.ID); err != nil {
		return c, err
	}
	if err := checkName("group", c.Group); err != nil {
		return c, err
	}
	switch c.Mode {
	case "":
		c.Mode = ModeQuorum
	case ModeQuorum, ModeBully:
	default:
		return c, configErr("mode", "mode-unknown", string(c.Mode), 0, 0, "mode "+strconv.Quote(string(c.Mode))+": want "+strconv.Quote(string(ModeQuorum))+" or "+strconv.Quote(string(ModeBully)))
	}
	if c.Priority == 0 {
		c.Priority = c.defaultPriority(c.ID)
	}
	if len(c.Members) > MaxMembers {
		return c, configErr("members", "members-count", strconv.Itoa(len(c.Members)), 0, MaxMembers, "members: "+strconv.Itoa(len(c.Members))+" listed, at most "+strconv.Itoa(MaxMembers))
	}
	members := slices.Clone(c.Members)
	slices.Sort(members)
	for i, m := range members {
		if err := checkName("member", m); err != nil {
			return c, err
		}
		if i > 0 && members[i-1] == m {
			return c, configErr("members", "members-twice", m, 0, 0, "members: "+strconv.Quote(m)+" listed twice")
		}
	}
	if c.AwaitConfig && c.Mode != ModeQuorum {
		return c, configErr("await_config", "await-quorum-only", "true", 0, 0, "await_config: only quorum mode has a configuration to wait for")
	}
	if len(members) > 0 {
		if _, ok := slices.BinarySearch(members, c.ID); !ok && !c.AwaitConfig {
			return c, configErr("members", "members-self", c.ID, 0, 0, "members: must include this agent's id "+strconv.Quote(c.ID)+" (or await_config to wait to be added)")
		}
	} else if c.Mode == ModeQuorum {
		return c, configErr("members", "members-required", "", 0, 0, "members: quorum mode needs the full member list (or use bully mode)")
	}
	c.Members = members
	c, err := c.WithTimingDefaults()
	if err != nil {
		return c, err
	}
	if c.Seed == 0 {
		c.Seed = uint64(Cksum([]byte(c.ID)))<<32 | uint64(Cksum([]byte(c.Group)))
	}
	if err := c.normalizeAuth(); err != nil {
		return c, err
	}
	if err := CheckValue(c.Value); err != nil {
		ve := err.(*ValueError)
		if ve.Offset < 0 {
			return c, configErr("value", "value-length", itoa(int64(ve.Bytes)), 0, MaxValueLen, err.Error())
		}
		return c, configErr("value", "value-byte", truncate(c.Value), int64(ve.Offset), int64(ve.Offset), err.Error())
	}
	return c, nil
}

//msgp:ignore ValueError

// ValueError is why a leader value (Config.Value, CmdProclaim, a
// heartbeat's value) is refused: Bytes long (the bound is MaxValueLen), or a
// byte at Offset that is a control character or not UTF-8.
type ValueError struct {
	Bytes  int
	Offset int    // of the bad byte; -1 when the length is the problem
	Reason string // "too long", "control character", "invalid UTF-8"
}

func (e *ValueError) Error() string {
	if e.Offset < 0 {
		return "value: " + strconv.Itoa(e.Bytes) + " bytes, at most " + strconv.Itoa(MaxValueLen)
	}
	return "value: byte " + strconv.Itoa(e.Offset) + ": " + e.Reason + " (UTF-8 text without control characters, at most " + strconv.Itoa(MaxValueLen) + " bytes)"
}

// CheckValue accepts a leader value: at most MaxValueLen bytes of UTF-8
// without control characters (they have no place in an address or a name,
// and a NUL cannot pass in an environment variable), so that every host,
// shell and log shows it as it is. It returns a *ValueError.
func CheckValue(v string) error {
	if len(v) > MaxValueLen {
		return &ValueError{Bytes: len(v), Offset: -1, Reason: "too long"}
	}
	for i, r := range v {
		switch {
		case r == utf8.RuneError:
			if _, n := utf8.DecodeRuneInString(v[i:]); n == 1 { // (a real U+FFFD is 3 bytes)
				return &ValueError{Bytes: len(v), Offset: i, Reason: "invalid UTF-8"}
			}
		case r < 0x20 || r == 0x7f || 0x80 <= r && r < 0xa0:
			return &ValueError{Bytes: len(v), Offset: i, Reason: "control character"}
		}
	}
	return nil
}

// checkName accepts 1–MaxIDLen bytes of a conservative alphabet, so that ids
// and group names never need escaping in JSON, topics, file names or argv.
func checkName(what, s string) error {
	if s == "" {
		return configErr(what, "name-empty", "", 1, MaxIDLen, what+": empty")
	}
	if len(s) > MaxIDLen {
		return configErr(what, "name-length", strconv.Itoa(len(s)), 1, MaxIDLen, what+": "+strconv.Itoa(len(s))+" bytes, at most "+strconv.Itoa(MaxIDLen))
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return configErr(what, "name-byte", s, int64(i), int64(i), what+" "+strconv.Quote(s)+": byte "+strconv.Itoa(i)+" ("+strconv.QuoteRune(rune(s[i]))+") not in [A-Za-z0-9._:@/+-]")
		}
	}
	return nil
}

func nameByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '.' || b == '_' || b == ':' || b == '@' || b == '/' || b == '+' || b == '-'
}
