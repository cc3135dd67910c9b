package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
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
)

// wireMsg is the union of every message's fields, decoded from JSON.
type wireMsg struct {
	Type      string    `json:"type"`
	Group     string    `json:"group,omitempty"`
	From      string    `json:"from,omitempty"`
	Candidate string    `json:"candidate,omitempty"`
	Leader    string    `json:"leader,omitempty"`
	To        string    `json:"to,omitempty"`
	Priority  *uint32   `json:"priority,omitempty"`
	Term      uint64    `json:"term"`
	Seq       uint64    `json:"seq,omitempty"`
	Pre       bool      `json:"pre,omitempty"`
	Granted   bool      `json:"granted,omitempty"`
	ElectedAt string    `json:"elected_at,omitempty"`
	Timestamp flexStamp `json:"timestamp,omitempty"`
	// The signed envelope (auth.go).
	Epoch uint64 `json:"epoch,omitempty"`
	Ctr   uint64 `json:"ctr,omitempty"`
	Sig   string `json:"sig,omitempty"`

	prio uint32 // Priority points here when decodeFast sets it
}

// flexStamp accepts the seed's heartbeat "timestamp", which it writes as a
// string of Unix seconds, and also a bare number. It is informational only.
type flexStamp struct{}

func (*flexStamp) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && (b[0] == '"' || b[0] == '-' || b[0] >= '0' && b[0] <= '9' || b[0] == 'n') {
		return nil
	}
	return errors.New("timestamp: want a string or a number")
}

// decodeWire parses one payload and checks every field the protocol relies on.
// It fills m (reused by the caller to save allocations) or returns the reason
// the payload is rejected.
func decodeWire(payload []byte, m *wireMsg) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("oversized: %d bytes, at most %d", len(payload), MaxPayload)
	}
	*m = wireMsg{}
	if !decodeFast(payload, m) {
		*m = wireMsg{}
		if err := checkNesting(payload); err != nil {
			return err
		}
		if err := json.Unmarshal(payload, m); err != nil {
			return fmt.Errorf("malformed: %v", err)
		}
	}
	switch m.Type {
	case typeElection:
		if m.From == "" {
			m.From = m.Candidate
		}
		if err := checkName("candidate", m.Candidate); err != nil {
			return fmt.Errorf("malformed: %v", err)
		}
		if m.Priority == nil {
			return errors.New("malformed: election without priority")
		}
	case typeLeader, typeHeartbeat:
		if m.From == "" {
			m.From = m.Leader
		}
		if err := checkName("leader", m.Leader); err != nil {
			return fmt.Errorf("malformed: %v", err)
		}
	case typeVote:
		if err := checkName("candidate", m.Candidate); err != nil {
			return fmt.Errorf("malformed: %v", err)
		}
	case typeAck:
		if err := checkName("leader", m.Leader); err != nil {
			return fmt.Errorf("malformed: %v", err)
		}
	case typeResign:
		if m.From == "" {
			m.From = m.Leader
		}
		if err := checkName("leader", m.Leader); err != nil {
			return fmt.Errorf("malformed: %v", err)
		}
		if m.To != "" {
			if err := checkName("to", m.To); err != nil {
				return fmt.Errorf("malformed: %v", err)
			}
		}
	case "":
		return errors.New("malformed: no type")
	default:
		return fmt.Errorf("unknown type %q", truncate(m.Type))
	}
	if err := checkName("from", m.From); err != nil {
		return fmt.Errorf("malformed: %v", err)
	}
	// Only the candidate asks for votes for itself, and only a leader speaks
	// for itself: a message on someone else's behalf is refused here, before
	// it can count as contact from anyone.
	switch m.Type {
	case typeElection:
		if m.Candidate != m.From {
			return fmt.Errorf("election for %s sent by %s", m.Candidate, m.From)
		}
	case typeLeader, typeHeartbeat, typeResign:
		if m.Leader != m.From {
			return fmt.Errorf("%s for %s sent by %s", m.Type, m.Leader, m.From)
		}
	}
	if m.Group != "" {
		if err := checkName("group", m.Group); err != nil {
			return fmt.Errorf("malformed: %v", err)
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

// encoder appends wire messages. Every string it writes is a checked name
// (no quotes, no escapes), so it writes JSON directly, in a fixed field order
// that keeps outputs byte-identical everywhere.
type encoder struct {
	b []byte
}

func (e *encoder) begin(typ, group, from string) {
	e.b = append(e.b[:0], `{"type":"`...)
	e.b = append(e.b, typ...)
	e.b = append(e.b, '"')
	e.str("group", group)
	e.str("from", from)
}

func (e *encoder) str(key, v string) {
	e.b = append(e.b, `,"`...)
	e.b = append(e.b, key...)
	e.b = append(e.b, `":"`...)
	e.b = append(e.b, v...)
	e.b = append(e.b, '"')
}

func (e *encoder) num(key string, v uint64) {
	e.b = append(e.b, `,"`...)
	e.b = append(e.b, key...)
	e.b = append(e.b, `":`...)
	e.b = strconv.AppendUint(e.b, v, 10)
}

func (e *encoder) flag(key string) {
	e.b = append(e.b, `,"`...)
	e.b = append(e.b, key...)
	e.b = append(e.b, `":true`...)
}

// wall adds the seed format's informational wall-clock field, if known.
func (e *encoder) wall(typ string, wallMs int64) {
	if wallMs <= 0 {
		return
	}
	switch typ {
	case typeLeader:
		e.str("elected_at", time.UnixMilli(wallMs).UTC().Format("2006-01-02T15:04:05Z"))
	case typeHeartbeat:
		e.str("timestamp", strconv.FormatInt(wallMs/1000, 10))
	}
}

// end closes the object and returns a copy the caller may keep.
func (e *encoder) end() []byte {
	e.b = append(e.b, '}')
	return append([]byte(nil), e.b...)
}

// decodeFast parses the canonical form the encoder writes (and that most
// agents write): one flat object, no whitespace, every key one of wireMsg's
// in lower case, every string printable ASCII without escapes, every number a
// plain integer in range, booleans true or false. It reports false, leaving m
// in any state, for anything else, which then goes to encoding/json. For
// every payload it accepts it yields exactly what json.Unmarshal would, about
// ten times faster and without reflection (which matters most in WebAssembly,
// where every member decodes every message on the topic).
func decodeFast(p []byte, m *wireMsg) bool {
	n := len(p)
	if n < 2 || p[0] != '{' || p[n-1] != '}' {
		return false
	}
	if n == 2 {
		return true
	}
	i := 1
	for {
		key, j, ok := fastString(p, i)
		if !ok || j >= n || p[j] != ':' {
			return false
		}
		i = j + 1
		var v uint64
		switch string(key) {
		case "type":
			m.Type, i, ok = fastStringValue(p, i)
		case "group":
			m.Group, i, ok = fastStringValue(p, i)
		case "from":
			m.From, i, ok = fastStringValue(p, i)
		case "candidate":
			m.Candidate, i, ok = fastStringValue(p, i)
		case "leader":
			m.Leader, i, ok = fastStringValue(p, i)
		case "to":
			m.To, i, ok = fastStringValue(p, i)
		case "elected_at":
			m.ElectedAt, i, ok = fastStringValue(p, i)
		case "priority":
			v, i, ok = fastUint(p, i)
			if ok && v > 1<<32-1 {
				return false
			}
			m.prio = uint32(v)
			m.Priority = &m.prio
		case "term":
			m.Term, i, ok = fastUint(p, i)
		case "seq":
			m.Seq, i, ok = fastUint(p, i)
		case "epoch":
			m.Epoch, i, ok = fastUint(p, i)
		case "ctr":
			m.Ctr, i, ok = fastUint(p, i)
		case "sig":
			m.Sig, i, ok = fastStringValue(p, i)
		case "pre":
			m.Pre, i, ok = fastBool(p, i)
		case "granted":
			m.Granted, i, ok = fastBool(p, i)
		case "timestamp":
			if i < n && p[i] == '"' {
				_, i, ok = fastString(p, i)
			} else {
				_, i, ok = fastUint(p, i)
			}
		default:
			return false
		}
		if !ok || i >= n {
			return false
		}
		switch p[i] {
		case ',':
			i++
		case '}':
			return i == n-1
		default:
			return false
		}
	}
}

// fastString reads a string at p[i] of printable ASCII without escapes; it
// returns the bytes (aliasing p), the index after the closing quote and ok.
func fastString(p []byte, i int) ([]byte, int, bool) {
	if i >= len(p) || p[i] != '"' {
		return nil, i, false
	}
	for j := i + 1; j < len(p); j++ {
		switch c := p[j]; {
		case c == '"':
			return p[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, j, false
		}
	}
	return nil, len(p), false
}

func fastStringValue(p []byte, i int) (string, int, bool) {
	b, j, ok := fastString(p, i)
	if !ok {
		return "", j, false
	}
	return string(b), j, true
}

// fastUint reads a JSON integer that fits a uint64: no sign, no leading zero,
// no fraction or exponent.
func fastUint(p []byte, i int) (uint64, int, bool) {
	j := i
	var v uint64
	for j < len(p) && p[j] >= '0' && p[j] <= '9' {
		d := uint64(p[j] - '0')
		if v > (1<<64-1-d)/10 {
			return 0, j, false
		}
		v = v*10 + d
		j++
	}
	if j == i || p[i] == '0' && j > i+1 {
		return 0, j, false
	}
	if j < len(p) && (p[j] == '.' || p[j] == 'e' || p[j] == 'E') {
		return 0, j, false
	}
	return v, j, true
}

func fastBool(p []byte, i int) (bool, int, bool) {
	switch {
	case len(p)-i >= 4 && string(p[i:i+4]) == "true":
		return true, i + 4, true
	case len(p)-i >= 5 && string(p[i:i+5]) == "false":
		return false, i + 5, true
	}
	return false, i, false
}
