package core

import (
	"errors"
	"strconv"
)

// Wire message types. The first three are the seed skill's and keep its
// fields; the rest are electcore's extensions. Every extension field is
// optional, so seed agents' messages decode and ours stay readable to them.
const (
	typeElection  = "election"  // a candidacy; in quorum mode a (pre-)vote request
	typeLeader    = "leader"    // a victory announcement (also a heartbeat)
	typeHeartbeat = "heartbeat" // the leader is alive
	typeVote      = "vote"      // quorum: a (pre-)vote answer
	typeAck       = "ack"       // quorum: a follower heard heartbeat Seq of Term
	typeResign    = "resign"    // the leader hands over to To and votes for it
	typeConfig    = "config"    // quorum: a member set and its version (membership.go)
	typeChange    = "change"    // quorum: a member asks the leader to add or remove Member
)

// wireMsg is the union of every message's fields, decoded from JSON by
// parseWire (wirejson.go). The json tags name the keys; parseWire matches
// them exactly, and the reference decoder of the tests (encoding/json) reads
// the tags.
type wireMsg struct {
	Type      string  `json:"type"`
	Group     string  `json:"group,omitempty"`
	From      string  `json:"from,omitempty"`
	Candidate string  `json:"candidate,omitempty"`
	Leader    string  `json:"leader,omitempty"`
	To        string  `json:"to,omitempty"`
	Priority  *uint32 `json:"priority,omitempty"`
	Term      uint64  `json:"term"`
	Seq       uint64  `json:"seq,omitempty"`
	Inc       uint64  `json:"inc,omitempty"`        // the sender's incarnation (GroupSpec.Incarnation)
	LeaderInc uint64  `json:"leader_inc,omitempty"` // an ack: the incarnation of the leader it answers
	Pre       bool    `json:"pre,omitempty"`
	Granted   bool    `json:"granted,omitempty"`
	Handoff   bool    `json:"handoff,omitempty"` // a vote pushed by a resign, not asked for
	Hold      uint64  `json:"hold,omitempty"`    // a resign (and the votes it pushes): the resigning leader's HandoffHoldMs (see heldFor)
	ElectedAt string  `json:"elected_at,omitempty"`
	// Membership (membership.go): the configuration version a vote request,
	// heartbeat, ack or config message carries; a config message's member
	// set (and, with ed25519, the members' public keys in the same order);
	// a change request's operation, member and key.
	ConfTerm  uint64    `json:"conf_term,omitempty"`
	ConfIndex uint64    `json:"conf_index,omitempty"`
	Committed bool      `json:"committed,omitempty"` // a heartbeat: its configuration is committed
	Remove    bool      `json:"remove,omitempty"`    // a resign: the successor removes the resigning leader
	Pin       bool      `json:"pin,omitempty"`       // a resign: an operator's transfer, which no priority hand-off undoes
	Members   []string  `json:"members,omitempty"`
	Keys      []string  `json:"keys,omitempty"`
	Op        string    `json:"op,omitempty"`
	Member    string    `json:"member,omitempty"`
	Key       string    `json:"key,omitempty"`
	Timestamp flexStamp `json:"timestamp,omitempty"`
	// A leader's value (Config.Value) and its version in the leader's term,
	// on leader and heartbeat messages: a follower takes a value only of
	// the leader and term it follows, and only a newer version than it
	// holds, so a late heartbeat never brings back a replaced value.
	ValueVer uint64 `json:"value_ver,omitempty"`
	Value    string `json:"value,omitempty"`
	// The signed envelope (auth.go).
	Epoch uint64 `json:"epoch,omitempty"`
	Ctr   uint64 `json:"ctr,omitempty"`
	Sig   string `json:"sig,omitempty"`

	prio    uint32 // Priority points here when parseWire sets it
	holdSet bool   // the message carries a hold (a missing one is the longest: heldFor)
	// groupHint: set by the caller before parseWire, the name of the group
	// whose topic the payload came on, reused (not allocated) for an equal
	// "group" (zeroed with the rest).
	groupHint string
	// named: the name fields parseWire found to be names (namedGroup, …),
	// which checkWire does not check again.
	named uint8
}

// Bits of wireMsg.named.
const (
	namedGroup uint8 = 1 << iota
	namedFrom
	namedLeader
	namedCandidate
	namedTo
)

// checkNamed is checkName(what, s) unless parseWire checked s (bit).
func (m *wireMsg) checkNamed(what, s string, bit uint8) error {
	if m.named&bit != 0 {
		return nil
	}
	return checkName(what, s)
}

// nameFrom marks from as named if bit is set (from copied that field).
func (m *wireMsg) nameFrom(bit uint8) {
	if m.named&bit != 0 {
		m.named |= namedFrom
	}
}

// flexStamp stands for the seed's heartbeat "timestamp", which it writes as a
// string of Unix seconds; a bare number is accepted too. It is informational
// only, so nothing of it is kept.
type flexStamp struct{}

// decodeWire parses one payload (parseWire) and checks every field the
// protocol relies on (checkWire). It fills m (reused by the caller to save
// allocations) or returns the reason the payload is rejected.
func decodeWire(payload []byte, m *wireMsg) error {
	if len(payload) > MaxPayload {
		return errors.New("oversized: " + strconv.Itoa(len(payload)) + " bytes, at most " + strconv.Itoa(MaxPayload))
	}
	if err := parseWire(payload, m); err != nil { // (zeroes m first)
		return err
	}
	return checkWire(m)
}

// checkWire checks a parsed message: its type, the names it carries and that
// its sender speaks for itself.
func checkWire(m *wireMsg) error {
	switch m.Type {
	case typeElection:
		if m.From == "" {
			m.From = m.Candidate
			m.nameFrom(namedCandidate)
		}
		if err := m.checkNamed("candidate", m.Candidate, namedCandidate); err != nil {
			return errors.New("malformed: " + err.Error())
		}
		if m.Priority == nil {
			return errors.New("malformed: election without priority")
		}
	case typeLeader, typeHeartbeat:
		if m.From == "" {
			m.From = m.Leader
			m.nameFrom(namedLeader)
		}
		if err := m.checkNamed("leader", m.Leader, namedLeader); err != nil {
			return errors.New("malformed: " + err.Error())
		}
	case typeVote:
		if err := m.checkNamed("candidate", m.Candidate, namedCandidate); err != nil {
			return errors.New("malformed: " + err.Error())
		}
	case typeAck:
		if err := m.checkNamed("leader", m.Leader, namedLeader); err != nil {
			return errors.New("malformed: " + err.Error())
		}
	case typeResign:
		if m.From == "" {
			m.From = m.Leader
			m.nameFrom(namedLeader)
		}
		if err := m.checkNamed("leader", m.Leader, namedLeader); err != nil {
			return errors.New("malformed: " + err.Error())
		}
		if m.To != "" {
			if err := m.checkNamed("to", m.To, namedTo); err != nil {
				return errors.New("malformed: " + err.Error())
			}
		}
	case typeConfig:
		if err := checkConfigFields(m); err != nil {
			return errors.New("malformed: " + err.Error())
		}
	case typeChange:
		if err := m.checkNamed("leader", m.Leader, namedLeader); err != nil {
			return errors.New("malformed: " + err.Error())
		}
		if m.Op != opAdd && m.Op != opRemove {
			return errors.New("malformed: change op " + strconv.Quote(truncate(m.Op)) + ": want " + strconv.Quote(opAdd) + " or " + strconv.Quote(opRemove))
		}
		if err := checkName("member", m.Member); err != nil {
			return errors.New("malformed: " + err.Error())
		}
		if m.Key != "" {
			if err := checkName("key", m.Key); err != nil {
				return errors.New("malformed: " + err.Error())
			}
		}
	case "":
		return errors.New("malformed: no type")
	default:
		return errors.New("unknown type " + strconv.Quote(truncate(m.Type)))
	}
	if err := m.checkNamed("from", m.From, namedFrom); err != nil {
		return errors.New("malformed: " + err.Error())
	}
	// Every count stays exact in every JSON reader, as terms do: a
	// configuration index of 2^64−1 once wrapped to 0 at the next leader's
	// re-stamp, and the configuration never committed again. A priority
	// fits 32 bits (its parser); inc and leader_inc are random
	// identifiers, only ever compared.
	// (One test for all first: building the list costs more than the
	// tests, in wasm.)
	if m.Term|m.ConfTerm|m.ConfIndex|m.Seq|m.Epoch|m.Ctr > MaxTerm {
		for _, f := range [...]struct {
			name string
			v    uint64
		}{{"term", m.Term}, {"conf_term", m.ConfTerm}, {"conf_index", m.ConfIndex}, {"seq", m.Seq}, {"epoch", m.Epoch}, {"ctr", m.Ctr}} {
			if f.v > MaxTerm {
				return errors.New("malformed: " + f.name + " " + uitoa(f.v) + " exceeds " + uitoa(MaxTerm))
			}
		}
	}
	if m.Hold > maxHold {
		return errors.New("malformed: hold " + uitoa(m.Hold) + " exceeds " + uitoa(maxHold))
	}
	// Only the candidate asks for votes for itself, and only a leader speaks
	// for itself: a message on someone else's behalf is refused here, before
	// it can count as contact from anyone.
	switch m.Type {
	case typeElection:
		if m.Candidate != m.From {
			return errors.New("election for " + m.Candidate + " sent by " + m.From)
		}
	case typeLeader, typeHeartbeat, typeResign:
		if m.Leader != m.From {
			return errors.New(m.Type + " for " + m.Leader + " sent by " + m.From)
		}
	}
	if m.Group != "" {
		if err := m.checkNamed("group", m.Group, namedGroup); err != nil {
			return errors.New("malformed: " + err.Error())
		}
	}
	if m.ValueVer != 0 || m.Value != "" {
		switch {
		case m.Type != typeLeader && m.Type != typeHeartbeat:
			return errors.New("malformed: a value on a " + m.Type + " message")
		case m.ValueVer == 0:
			return errors.New("malformed: a value without value_ver")
		case m.ValueVer > MaxTerm:
			return errors.New("malformed: value_ver " + uitoa(m.ValueVer) + " exceeds " + uitoa(MaxTerm))
		}
		if err := CheckValue(m.Value); err != nil {
			return errors.New("malformed: " + err.Error())
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// encoder writes wire messages. Every string it writes is a checked name
// (no quotes, no escapes), so it writes JSON directly, in a fixed field order
// that keeps outputs byte-identical everywhere.
//
// A message is written straight into the free end of a chunk of payload
// memory and end hands it out as a slice of that chunk, which is not written
// again by default: a host may keep a published payload as long as it likes,
// yet a step makes one allocation every few dozen messages instead of one
// per message. With Engine.ReusePayloads each step starts over in the same
// chunk and a step allocates nothing (in wasm, the bytes allocated had cost
// garbage collections that slowed every step while they ran).
type encoder struct {
	b       []byte // the message being written, from chunk's free end
	chunk   []byte // the payloads handed out so far; its capacity is the free room
	reusing bool   // chunk is emptied at every step (Engine.ReusePayloads)

	// The group, sender and incarnation fields begin last wrote, kept for
	// the next message of the same group (formatting a 20-digit incarnation
	// costs more than the rest of an ack).
	hdr      []byte
	hdrGroup *group
	hdrInc   uint64
}

// encoderChunk is the size of a chunk of payload memory; a message starts a
// new chunk when less than encoderRoom is left (the longest message, a
// resign or an election with names of MaxIDLen, is well under it; a longer
// one still works, in memory of its own).
const (
	encoderChunk = 4096
	encoderRoom  = 512
)

// begin starts a message of g: its type, group, sender and the sender's
// incarnation.
func (e *encoder) begin(typ string, g *group) {
	if cap(e.chunk)-len(e.chunk) < encoderRoom {
		size := encoderChunk
		if e.reusing { // grow until one chunk holds a whole step's messages
			size = max(size, 2*cap(e.chunk))
		}
		e.chunk = make([]byte, 0, size)
	}
	if g != e.hdrGroup || g.inc != e.hdrInc {
		e.hdr = append(e.hdr[:0], `","group":"`...)
		e.hdr = append(e.hdr, g.cfg.Group...)
		e.hdr = append(e.hdr, `","from":"`...)
		e.hdr = append(e.hdr, g.cfg.ID...)
		e.hdr = append(e.hdr, `","inc":`...)
		e.hdr = appendUint(e.hdr, g.inc)
		e.hdrGroup, e.hdrInc = g, g.inc
	}
	// (Constants are appended as bytes here and below: Go's wasm port makes
	// every copy a call to memmove, even of a constant, and wazero a second
	// call from there into Go's runtime.)
	e.b = append(e.chunk[len(e.chunk):], '{', '"', 't', 'y', 'p', 'e', '"', ':', '"')
	e.b = append(e.b, typ...)
	e.b = append(e.b, e.hdr...)
}

// reuse lets the next messages overwrite the current chunk (Engine.ReusePayloads).
func (e *encoder) reuse() {
	e.reusing = true
	e.chunk = e.chunk[:0]
}

// forget drops what the encoder keeps of g (it left the engine).
func (e *encoder) forget(g *group) {
	if e.hdrGroup == g {
		e.hdrGroup = nil
	}
}

func (e *encoder) str(key, v string) {
	e.b = append(e.b, ',', '"')
	e.b = append(e.b, key...)
	e.b = append(e.b, '"', ':', '"')
	e.b = append(e.b, v...)
	e.b = append(e.b, '"')
}

func (e *encoder) num(key string, v uint64) {
	e.b = append(e.b, ',', '"')
	e.b = append(e.b, key...)
	e.b = append(e.b, '"', ':')
	e.b = appendUint(e.b, v)
}

// text writes a checked value (CheckValue: no control characters), which
// may hold the two bytes JSON strings escape.
func (e *encoder) text(key, v string) {
	e.b = append(e.b, ',', '"')
	e.b = append(e.b, key...)
	e.b = append(e.b, '"', ':', '"')
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '"' || c == '\\' {
			e.b = append(e.b, '\\', c)
		} else {
			e.b = append(e.b, c)
		}
	}
	e.b = append(e.b, '"')
}

// strs writes a list of checked names.
func (e *encoder) strs(key string, vs []string) {
	e.b = append(e.b, `,"`...)
	e.b = append(e.b, key...)
	e.b = append(e.b, `":[`...)
	for i, v := range vs {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.b = append(e.b, '"')
		e.b = append(e.b, v...)
		e.b = append(e.b, '"')
	}
	e.b = append(e.b, ']')
}

func (e *encoder) flag(key string) {
	e.b = append(e.b, ',', '"')
	e.b = append(e.b, key...)
	e.b = append(e.b, '"', ':', 't', 'r', 'u', 'e')
}

// appendUint is strconv.AppendUint(b, v, 10) in 32-bit arithmetic below the
// top nine digits, two digits a step: a 64-bit division by a constant costs
// several multiplications in wasm, a 32-bit one a single one, and every
// turn of a loop costs a dispatch.
func appendUint(b []byte, v uint64) []byte {
	if v < 10 {
		return append(b, byte('0'+v))
	}
	var buf [20]byte
	i := len(buf)
	for v >= 1e9 {
		q := v / 1e9
		r := uint32(v - q*1e9)
		for range 4 {
			d := r % 100 * 2
			r /= 100
			i -= 2
			buf[i], buf[i+1] = digitPairs[d], digitPairs[d+1]
		}
		i--
		buf[i] = byte('0' + r)
		v = q
	}
	r := uint32(v)
	for r >= 100 {
		d := r % 100 * 2
		r /= 100
		i -= 2
		buf[i], buf[i+1] = digitPairs[d], digitPairs[d+1]
	}
	if r >= 10 {
		i -= 2
		buf[i], buf[i+1] = digitPairs[2*r], digitPairs[2*r+1]
	} else if r > 0 {
		i--
		buf[i] = byte('0' + r)
	}
	return append(b, buf[i:]...)
}

// digitPairs holds 00 to 99.
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899"

// wall adds the seed format's informational wall-clock field, if known.
func (e *encoder) wall(typ string, wallMs int64) {
	if wallMs <= 0 {
		return
	}
	switch typ {
	case typeLeader:
		e.b = append(e.b, `,"elected_at":"`...)
		e.b = appendUTC(e.b, wallMs)
		e.b = append(e.b, '"')
	case typeHeartbeat: // e.str("timestamp", …), without formatting a string first
		e.b = append(e.b, `,"timestamp":"`...)
		e.b = appendUint(e.b, uint64(wallMs/1000))
		e.b = append(e.b, '"')
	}
}

// appendUTC appends what time.UnixMilli(ms).UTC().Format(
// "2006-01-02T15:04:05Z") returns for ms > 0 (a proleptic Gregorian date
// from 1970 on), without time's formatter and time zone code: they were
// ~70 KB of the wasm module.
func appendUTC(b []byte, ms int64) []byte {
	secs := ms / 1000
	days, rem := secs/86400, secs%86400
	// Days since 1970-01-01 to a date (Howard Hinnant's civil_from_days), in
	// eras of 400 years that start on March 1st.
	z := days + 719468
	era := z / 146097
	doe := z - era*146097                                  // day of era, 0..146096
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // year of era, 0..399
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // day of year from March 1st
	mp := (5*doy + 2) / 153                                // month from March, 0..11
	day := doy - (153*mp+2)/5 + 1
	month, year := mp+3, yoe+era*400
	if mp >= 10 {
		month, year = mp-9, year+1
	}
	b = appendUint(b, uint64(year)) // ≥ 1970: four digits or more, as time writes it
	b = append2(append(b, '-'), month)
	b = append2(append(b, '-'), day)
	b = append2(append(b, 'T'), rem/3600)
	b = append2(append(b, ':'), rem/60%60)
	b = append2(append(b, ':'), rem%60)
	return append(b, 'Z')
}

// append2 appends v (0..99) as two digits.
func append2(b []byte, v int64) []byte {
	return append(b, byte('0'+v/10), byte('0'+v%10))
}

// end closes the message and returns it, to keep: its bytes are never
// written again.
func (e *encoder) end() []byte {
	e.b = append(e.b, '}')
	if n := len(e.b); n <= cap(e.chunk)-len(e.chunk) { // written in the chunk (else append moved it)
		e.chunk = e.chunk[:len(e.chunk)+n]
	}
	return e.b[:len(e.b):len(e.b)]
}
