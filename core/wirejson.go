package core

import (
	"bytes"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// maxWireDepth bounds the nesting of a JSON wire payload, which parseWire
// enforces as it scans. Every protocol message is one flat object (depth 1);
// a little room is left for extensions that other agents may add.
const maxWireDepth = 8

// parseWire parses one wire payload — a single JSON object — into m, which
// the caller has zeroed. It is the core's only JSON decoder, strict and small
// (encoding/json would add ~230 KB and reflection to the wasm module):
//
//   - exactly one object, optionally surrounded by JSON whitespace;
//   - keys are matched exactly (encoding/json folds case; a signed message
//     must mean one thing), after unescaping; any other key is an unknown
//     key whose value — any JSON value, objects and arrays nested at most
//     maxWireDepth levels deep counting the message itself — is checked and
//     skipped;
//   - strings are unescaped as encoding/json does (\uXXXX with surrogate
//     pairs; a lone surrogate or an invalid UTF-8 byte becomes U+FFFD);
//   - term, seq, epoch, ctr, hold, …: a JSON integer that fits a uint64
//     (checkWire bounds them further, as encoding/json does not), priority
//     one that fits a uint32 (no sign, fraction or exponent); pre, granted:
//     true or false; timestamp (informational): a string or any number;
//   - null for a field leaves it unset (priority: absent);
//   - a duplicated key: the last one wins, as in encoding/json.
//
// For every payload encoding/json accepts with exact-case keys it yields the
// message encoding/json would (tested over the fuzz corpora and transcripts,
// and by FuzzParseWire against the reference kept in wirejson_test.go).
//
// m is zeroed first; the strings it held (the last message's type and names,
// when the caller reuses m) and m.groupHint are reused for equal values,
// which saves most allocations of the steady state (heartbeats from the same
// leader, each message naming the group whose topic it came on).
//
// A payload written as the core writes them is read by canonical, in one
// pass; anything else by the general scanner (scan).
func parseWire(p []byte, m *wireMsg) error {
	d := jsonScanner{p: p, reuse: [...]string{m.groupHint, m.Type, m.Group, m.From, m.Candidate, m.Leader, m.To}}
	*m = wireMsg{}
	if d.canonical(m) {
		return nil
	}
	*m = wireMsg{}
	return d.scan(m)
}

// scan parses d.p into m, which is zeroed.
func (d *jsonScanner) scan(m *wireMsg) error {
	p := d.p
	d.ws()
	if !d.eat('{') {
		return d.fail("want a JSON object")
	}
	d.ws()
	if !d.eat('}') {
		for {
			k, key, ok := d.key()
			if !ok {
				return d.fail("want a key")
			}
			d.ws()
			if !d.eat(':') {
				return d.fail("want ':'")
			}
			d.ws()
			if !d.field(m, k) {
				return d.failKey(key)
			}
			d.ws()
			if d.eat(',') {
				d.ws()
				continue
			}
			if d.eat('}') {
				break
			}
			return d.fail("want ',' or '}'")
		}
	}
	d.ws()
	if d.i != len(p) {
		return d.fail("data after the object")
	}
	return nil
}

// canonical parses p if it is written the way the core writes messages — no
// whitespace, only wireMsg's keys, each with a string of printable ASCII
// without escapes (a name, for the names), an integer or a boolean, no
// arrays — and reports whether it did. It yields what the rest of parseWire
// would, in one pass and without a call per byte, value or key (calls and
// loops cost several times more in wasm than natively). On anything else it
// returns false, having written only fields that parseWire zeroes, and the
// general scanner reads p from the start: the same message or the same
// refusal.
func (d *jsonScanner) canonical(m *wireMsg) bool {
	p := d.p
	n := len(p)
	if n < 2 || p[0] != '{' || p[n-1] != '}' {
		return false
	}
	for i := 1; ; {
		if p[i] != '"' {
			return false
		}
		// A key of wireMsg's has no escapes: the bytes up to the next
		// quote are the key if they are one of them.
		var k wireKey
		var j int
		if s := i + 1; s+16 <= n {
			// Read as two words: the key is found by comparing them
			// with constants, without a loop or call.
			w0 := le64(p[s:])
			if j = quoteAt(w0); j < 8 {
				k = packedKey(j, w0&(1<<(8*j)-1), 0)
			} else {
				w1 := le64(p[s+8:])
				q := quoteAt(w1)
				j = 8 + q
				k = packedKey(j, w0, w1&(1<<(8*q)-1))
			}
		} else if j = bytes.IndexByte(p[s:], '"'); j >= 0 {
			k = lookupKey(p[s : s+j])
		}
		i += j + 2
		if k == keyUnknown || i >= n-1 || p[i] != ':' {
			return false
		}
		i++
		switch c := p[i]; {
		case c == '"':
			s, j := i+1, 8
			if s+8 <= n {
				j = quoteAt(le64(p[s:])) // names are often short
			}
			if j == 8 {
				if j = bytes.IndexByte(p[s:], '"'); j < 0 {
					return false
				}
			}
			v := p[s : s+j]
			i += j + 2
			if !d.canonicalStr(m, k, v) {
				return false
			}
		case '0' <= c && c <= '9':
			start := i
			var v uint64
			for i+8 <= n { // eight digits at a time
				w := le64(p[i:])
				dn := digitsAt(w)
				if dn == 0 {
					break
				}
				if dn < 8 { // the digits to the top, zeros before them
					w = w<<(64-8*dn) | 0x3030303030303030>>(8*dn)
				}
				switch x, nd := digits8(w), i-start+dn; {
				case nd <= 19: // nineteen digits always fit a uint64
					v = v*pow10[dn] + x
				case nd == 20 && dn == 4 && (v < (1<<64-1)/10000 || v == (1<<64-1)/10000 && x <= (1<<64-1)%10000):
					v = v*1e4 + x
				default:
					return false // out of range: the general scanner says so
				}
				i += dn
				if dn < 8 {
					break
				}
			}
			for ; i < n; i++ { // the last few bytes of p
				c := p[i]
				if c < '0' || c > '9' {
					break
				}
				if i-start >= 19 && (v > (1<<64-1)/10 || v*10 > 1<<64-1-uint64(c-'0')) {
					return false
				}
				v = v*10 + uint64(c-'0')
			}
			if p[start] == '0' && i > start+1 {
				return false
			}
			switch k {
			case keyTerm:
				m.Term = v
			case keySeq:
				m.Seq = v
			case keyInc:
				m.Inc = v
			case keyLeaderInc:
				m.LeaderInc = v
			case keyConfTerm:
				m.ConfTerm = v
			case keyConfIndex:
				m.ConfIndex = v
			case keyPriority:
				if v > 1<<32-1 {
					return false
				}
				m.prio = uint32(v)
				m.Priority = &m.prio
			case keyHold:
				m.Hold, m.holdSet = v, true
			case keyValueVer:
				m.ValueVer = v
			case keyEpoch:
				m.Epoch = v
			case keyCtr:
				m.Ctr = v
			case keyTimestamp: // informational
			default:
				return false
			}
		case c == 't' || c == 'f':
			v := c == 't'
			if v && (n-i < 4 || p[i+1] != 'r' || p[i+2] != 'u' || p[i+3] != 'e') ||
				!v && (n-i < 5 || p[i+1] != 'a' || p[i+2] != 'l' || p[i+3] != 's' || p[i+4] != 'e') {
				return false
			}
			i += 4
			if !v {
				i++
			}
			switch k {
			case keyPre:
				m.Pre = v
			case keyGranted:
				m.Granted = v
			case keyHandoff:
				m.Handoff = v
			case keyCommitted:
				m.Committed = v
			case keyRemove:
				m.Remove = v
			case keyPin:
				m.Pin = v
			default:
				return false
			}
		default:
			return false
		}
		if i >= n {
			return false
		}
		if p[i] == '}' {
			return i == n-1
		}
		if p[i] != ',' || i+1 >= n {
			return false
		}
		i++
	}
}

// le64 reads the first 8 bytes of b as a little-endian word.
func le64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// quoteAt returns the index of the first '"' among the 8 bytes of w (le64),
// or 8.
func quoteAt(w uint64) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	x := w ^ ('"' * ones) // a quote becomes a zero byte
	// The lowest high bit set marks the first zero byte (a borrow can
	// only mark bytes above it too).
	return bits.TrailingZeros64((x-ones)&^x&highs) / 8
}

// packedKey names the key of n bytes whose first 16 bytes, little-endian
// and zero-padded, are w0 and w1 (TestKeyLookups checks every constant
// against wireMsg's tags).
func packedKey(n int, w0, w1 uint64) wireKey {
	switch n {
	case 2:
		switch w0 {
		case 0x706f: // op
			return keyOp
		case 0x6f74: // to
			return keyTo
		}
	case 3:
		switch w0 {
		case 0x727463: // ctr
			return keyCtr
		case 0x636e69: // inc
			return keyInc
		case 0x79656b: // key
			return keyKey
		case 0x6e6970: // pin
			return keyPin
		case 0x657270: // pre
			return keyPre
		case 0x716573: // seq
			return keySeq
		case 0x676973: // sig
			return keySig
		}
	case 4:
		switch w0 {
		case 0x6d6f7266: // from
			return keyFrom
		case 0x646c6f68: // hold
			return keyHold
		case 0x7379656b: // keys
			return keyKeys
		case 0x6d726574: // term
			return keyTerm
		case 0x65707974: // type
			return keyType
		}
	case 5:
		switch w0 {
		case 0x68636f7065: // epoch
			return keyEpoch
		case 0x70756f7267: // group
			return keyGroup
		case 0x65756c6176: // value
			return keyValue
		}
	case 6:
		switch w0 {
		case 0x72656461656c: // leader
			return keyLeader
		case 0x7265626d656d: // member
			return keyMember
		case 0x65766f6d6572: // remove
			return keyRemove
		}
	case 7:
		switch w0 {
		case 0x6465746e617267: // granted
			return keyGranted
		case 0x66666f646e6168: // handoff
			return keyHandoff
		case 0x737265626d656d: // members
			return keyMembers
		}
	case 8:
		switch w0 {
		case 0x797469726f697270: // priority
			return keyPriority
		}
	case 9:
		switch w0 {
		case 0x74616469646e6163: // candidate
			if w1 == 0x65 {
				return keyCandidate
			}
		case 0x657474696d6d6f63: // committed
			if w1 == 0x64 {
				return keyCommitted
			}
		case 0x7265745f666e6f63: // conf_term
			if w1 == 0x6d {
				return keyConfTerm
			}
		case 0x6d617473656d6974: // timestamp
			if w1 == 0x70 {
				return keyTimestamp
			}
		case 0x65765f65756c6176: // value_ver
			if w1 == 0x72 {
				return keyValueVer
			}
		}
	case 10:
		switch w0 {
		case 0x646e695f666e6f63: // conf_index
			if w1 == 0x7865 {
				return keyConfIndex
			}
		case 0x5f64657463656c65: // elected_at
			if w1 == 0x7461 {
				return keyElectedAt
			}
		case 0x695f72656461656c: // leader_inc
			if w1 == 0x636e {
				return keyLeaderInc
			}
		}
	}
	return keyUnknown
}

// digitsAt returns how many of the 8 bytes of w (le64) are ASCII digits
// before the first that is not.
func digitsAt(w uint64) int {
	// Per byte: its high nibble, and that of the byte plus 6 (a carry can
	// only spoil bytes after a non-digit): 0x33 for a digit.
	t := w&0xF0F0F0F0F0F0F0F0 | (w+0x0606060606060606)&0xF0F0F0F0F0F0F0F0>>4
	return bits.TrailingZeros64(t^0x3333333333333333) / 8
}

// digits8 returns the value of the 8 ASCII digits of w (le64), in three
// multiplications instead of eight.
func digits8(w uint64) uint64 {
	w -= 0x3030303030303030
	w = w*10 + w>>8 // pairs of digits
	return ((w&0x000000FF000000FF)*(100+1000000<<32) + (w>>16&0x000000FF000000FF)*(1+10000<<32)) >> 32
}

// pow10[n] is 10^n.
var pow10 = [9]uint64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8}

// canonicalStr sets the string field k to v for canonical: a name field to
// a name (checked here, once: checkWire skips it), any other to printable
// ASCII without escapes. It reports false for anything else.
func (d *jsonScanner) canonicalStr(m *wireMsg, k wireKey, v []byte) bool {
	var name *string
	var bit uint8
	switch k {
	case keyGroup:
		name, bit = &m.Group, namedGroup
	case keyFrom:
		name, bit = &m.From, namedFrom
	case keyLeader:
		name, bit = &m.Leader, namedLeader
	case keyCandidate:
		name, bit = &m.Candidate, namedCandidate
	case keyTo:
		name, bit = &m.To, namedTo
	}
	if name != nil {
		switch {
		case len(v) == 0 || len(v) > MaxIDLen:
			return false
		case string(v) == d.reuse[0]: // the group's name, checked when it joined
			*name = d.reuse[0]
		default:
			for _, c := range v {
				if !nameByte(c) {
					return false
				}
			}
			*name = d.intern(v)
		}
		m.named |= bit
		return true
	}
	if k == keyType {
		if t := knownType(v); t != "" {
			m.Type = t
			return true
		}
	}
	for _, c := range v {
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	switch k {
	case keyType:
		m.Type = d.intern(v)
	case keyElectedAt:
		m.ElectedAt = string(v)
	case keySig:
		m.Sig = string(v)
	case keyValue:
		m.Value = string(v)
	case keyOp:
		m.Op = string(v)
	case keyMember:
		m.Member = string(v)
	case keyKey:
		m.Key = string(v)
	case keyTimestamp: // informational
	default:
		return false
	}
	return true
}

// knownType returns the message type b names, or "".
func knownType(b []byte) string {
	switch string(b) {
	case typeHeartbeat:
		return typeHeartbeat
	case typeAck:
		return typeAck
	case typeVote:
		return typeVote
	case typeElection:
		return typeElection
	case typeLeader:
		return typeLeader
	case typeResign:
		return typeResign
	case typeConfig:
		return typeConfig
	case typeChange:
		return typeChange
	}
	return ""
}

// jsonScanner reads JSON from p at i. Its methods report false on any
// syntax or type error, leaving i where the error was found; err, if set,
// says what it was.
type jsonScanner struct {
	p     []byte
	i     int
	err   string
	depth int
	reuse [7]string
}

func (d *jsonScanner) fail(what string) error {
	if d.err != "" {
		what = d.err
	}
	if d.i >= len(d.p) {
		return &wireError{what + " (unexpected end of payload)"}
	}
	return &wireError{what + " at byte " + strconv.Itoa(d.i)}
}

func (d *jsonScanner) failKey(key []byte) error {
	if d.err == "" {
		d.err = "bad value"
	}
	d.err = truncate(string(key)) + ": " + d.err
	return d.fail("")
}

// wireError is a rejected payload's reason, without fmt's weight.
type wireError struct{ s string }

func (e *wireError) Error() string { return "malformed: " + e.s }

func (d *jsonScanner) ws() {
	for d.i < len(d.p) {
		switch d.p[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *jsonScanner) eat(c byte) bool {
	if d.i < len(d.p) && d.p[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *jsonScanner) peek() byte {
	if d.i < len(d.p) {
		return d.p[d.i]
	}
	return 0
}

// lit reads the literal s (true, false, null).
func (d *jsonScanner) lit(s string) bool {
	if len(d.p)-d.i >= len(s) && string(d.p[d.i:d.i+len(s)]) == s {
		d.i += len(s)
		return true
	}
	d.err = "bad literal"
	return false
}

// wireKey names a key of wireMsg (keyUnknown: any other key).
type wireKey uint8

const (
	keyUnknown wireKey = iota
	keyType
	keyGroup
	keyFrom
	keyCandidate
	keyLeader
	keyTo
	keyElectedAt
	keySig
	keyValue
	keyValueVer
	keyOp
	keyMember
	keyKey
	keyMembers
	keyKeys
	keyConfTerm
	keyConfIndex
	keyCommitted
	keyRemove
	keyPin
	keyTerm
	keySeq
	keyInc
	keyLeaderInc
	keyEpoch
	keyCtr
	keyPriority
	keyPre
	keyGranted
	keyHandoff
	keyHold
	keyTimestamp
)

// key reads an object key and returns which of wireMsg's it is, and its
// bytes (unescaped), for error messages. The closing quote is found with
// bytes.IndexByte (assembly in wasm, where a loop of Go over the bytes is
// slow): up to it, a key of wireMsg's is exactly that key, as it has no
// escapes. Any other key is read again by str.
func (d *jsonScanner) key() (wireKey, []byte, bool) {
	p, i := d.p, d.i
	if i >= len(p) || p[i] != '"' {
		d.err = "want a string"
		return keyUnknown, nil, false
	}
	if j := bytes.IndexByte(p[i+1:], '"'); j >= 0 {
		b := p[i+1 : i+1+j]
		if k := lookupKey(b); k != keyUnknown {
			d.i = i + 2 + j
			return k, b, true
		}
	}
	b, ok := d.str()
	if !ok {
		return keyUnknown, nil, false
	}
	return lookupKey(b), b, true
}

// lookupKey names the key b.
func lookupKey(b []byte) wireKey {
	if len(b) > 16 {
		return keyUnknown
	}
	var w0, w1 uint64
	for n, c := range b {
		if n < 8 {
			w0 |= uint64(c) << (8 * n)
		} else {
			w1 |= uint64(c) << (8 * (n - 8))
		}
	}
	return packedKey(len(b), w0, w1)
}

// field reads the value of key k into m.
func (d *jsonScanner) field(m *wireMsg, k wireKey) bool {
	switch k {
	case keyType:
		return d.strField(&m.Type, true)
	case keyGroup:
		return d.strField(&m.Group, true)
	case keyFrom:
		return d.strField(&m.From, true)
	case keyCandidate:
		return d.strField(&m.Candidate, true)
	case keyLeader:
		return d.strField(&m.Leader, true)
	case keyTo:
		return d.strField(&m.To, true)
	case keyElectedAt:
		return d.strField(&m.ElectedAt, false)
	case keySig:
		return d.strField(&m.Sig, false)
	case keyValue:
		return d.strField(&m.Value, false)
	case keyValueVer:
		return d.uintField(&m.ValueVer, 1<<64-1)
	case keyOp:
		return d.strField(&m.Op, false)
	case keyMember:
		return d.strField(&m.Member, false)
	case keyKey:
		return d.strField(&m.Key, false)
	case keyMembers:
		return d.strsField(&m.Members)
	case keyKeys:
		return d.strsField(&m.Keys)
	case keyConfTerm:
		return d.uintField(&m.ConfTerm, 1<<64-1)
	case keyConfIndex:
		return d.uintField(&m.ConfIndex, 1<<64-1)
	case keyCommitted:
		return d.boolField(&m.Committed)
	case keyRemove:
		return d.boolField(&m.Remove)
	case keyPin:
		return d.boolField(&m.Pin)
	case keyTerm:
		return d.uintField(&m.Term, 1<<64-1)
	case keySeq:
		return d.uintField(&m.Seq, 1<<64-1)
	case keyInc:
		return d.uintField(&m.Inc, 1<<64-1)
	case keyLeaderInc:
		return d.uintField(&m.LeaderInc, 1<<64-1)
	case keyEpoch:
		return d.uintField(&m.Epoch, 1<<64-1)
	case keyCtr:
		return d.uintField(&m.Ctr, 1<<64-1)
	case keyPriority:
		if d.peek() == 'n' {
			m.Priority = nil
			return d.lit("null")
		}
		var v uint64
		if !d.uintField(&v, 1<<32-1) {
			return false
		}
		m.prio = uint32(v)
		m.Priority = &m.prio
		return true
	case keyPre:
		return d.boolField(&m.Pre)
	case keyGranted:
		return d.boolField(&m.Granted)
	case keyHandoff:
		return d.boolField(&m.Handoff)
	case keyHold:
		m.holdSet = d.peek() != 'n'
		return d.uintField(&m.Hold, 1<<64-1) // bounded by checkWire
	case keyTimestamp: // informational: a string, a number or null
		switch c := d.peek(); {
		case c == '"', c == '-', '0' <= c && c <= '9', c == 'n':
			return d.value()
		}
		d.err = "want a string or a number"
		return false
	}
	return d.value() // an unknown key: check and skip its value
}

// strField reads a string (or null) into dst; with reuse, an equal string of
// the last message (or a message type) is reused instead of allocated.
func (d *jsonScanner) strField(dst *string, reuse bool) bool {
	switch d.peek() {
	case 'n':
		return d.lit("null")
	case '"':
		b, ok := d.str()
		if !ok {
			return false
		}
		if reuse {
			*dst = d.intern(b)
		} else {
			*dst = string(b)
		}
		return true
	}
	if d.value() {
		d.err = "want a string"
	}
	return false
}

// intern returns b as a string: an equal one of d.reuse or a message type
// if there is one, else a new one.
func (d *jsonScanner) intern(b []byte) string {
	for _, s := range d.reuse {
		if string(b) == s {
			return s
		}
	}
	switch string(b) {
	case typeHeartbeat:
		return typeHeartbeat
	case typeAck:
		return typeAck
	case typeVote:
		return typeVote
	}
	return string(b)
}

// strsField reads an array of strings (or null) into dst; a null element
// reads as "", as encoding/json does.
func (d *jsonScanner) strsField(dst *[]string) bool {
	switch d.peek() {
	case 'n':
		*dst = nil
		return d.lit("null")
	case '[':
	default:
		if d.value() {
			d.err = "want an array of strings"
		}
		return false
	}
	d.i++
	d.ws()
	vs := []string{}
	if !d.eat(']') {
		for {
			var v string
			if !d.strField(&v, false) {
				return false
			}
			vs = append(vs, v)
			d.ws()
			if d.eat(']') {
				break
			}
			if !d.eat(',') {
				d.err = "want ',' or ']'"
				return false
			}
			d.ws()
		}
	}
	*dst = vs
	return true
}

// uintField reads a JSON number that must be an integer in [0, max].
func (d *jsonScanner) uintField(dst *uint64, max uint64) bool {
	p, i := d.p, d.i
	if i < len(p) && '0' <= p[i] && p[i] <= '9' {
		start := i
		var v uint64
		over := false
		for ; i < len(p); i++ {
			c := p[i]
			if c < '0' || c > '9' {
				break
			}
			// Nineteen digits always fit a uint64; from the twentieth on,
			// test before it wraps (a division per digit is slow in wasm).
			if i-start >= 19 && (v > (1<<64-1)/10 || v*10 > 1<<64-1-uint64(c-'0')) {
				over = true
			}
			v = v*10 + uint64(c-'0')
		}
		d.i = i
		if p[start] == '0' && i > start+1 {
			d.i = start + 1
			d.err = "bad number"
			return false
		}
		if c := d.peek(); c == '.' || c == 'e' || c == 'E' {
			d.i = start
			if d.number() {
				d.err = "want an unsigned integer"
			}
			return false
		}
		if over || v > max {
			d.i = start
			d.err = "integer out of range"
			return false
		}
		*dst = v
		return true
	}
	if d.peek() == 'n' {
		return d.lit("null")
	}
	if d.value() {
		d.err = "want an unsigned integer"
	}
	return false
}

func (d *jsonScanner) boolField(dst *bool) bool {
	switch d.peek() {
	case 't':
		*dst = true
		return d.lit("true")
	case 'f':
		*dst = false
		return d.lit("false")
	case 'n':
		return d.lit("null")
	}
	if d.value() {
		d.err = "want true or false"
	}
	return false
}

// value checks and skips any JSON value.
func (d *jsonScanner) value() bool {
	switch c := d.peek(); {
	case c == '"':
		_, ok := d.str()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return d.number()
	case c == 't':
		return d.lit("true")
	case c == 'f':
		return d.lit("false")
	case c == 'n':
		return d.lit("null")
	case c == '{' || c == '[':
		// The message itself is level 1.
		if d.depth+2 > maxWireDepth {
			d.err = "nested deeper than " + strconv.Itoa(maxWireDepth)
			return false
		}
		d.depth++
		defer func() { d.depth-- }()
		d.i++
		d.ws()
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		if d.eat(end) {
			return true
		}
		for {
			if c == '{' {
				if _, ok := d.str(); !ok {
					return false
				}
				d.ws()
				if !d.eat(':') {
					d.err = "want ':'"
					return false
				}
				d.ws()
			}
			if !d.value() {
				return false
			}
			d.ws()
			if d.eat(end) {
				return true
			}
			if !d.eat(',') {
				d.err = "want ',' or '" + string(end) + "'"
				return false
			}
			d.ws()
		}
	}
	d.err = "want a value"
	return false
}

// number checks and skips a JSON number.
func (d *jsonScanner) number() bool {
	d.err = "bad number"
	d.eat('-')
	switch c := d.peek(); {
	case c == '0':
		d.i++
	case '1' <= c && c <= '9':
		d.digits()
	default:
		return false
	}
	if d.eat('.') && !d.digits() {
		return false
	}
	if c := d.peek(); c == 'e' || c == 'E' {
		d.i++
		if c := d.peek(); c == '+' || c == '-' {
			d.i++
		}
		if !d.digits() {
			return false
		}
	}
	d.err = ""
	return true
}

// digits skips one or more decimal digits.
func (d *jsonScanner) digits() bool {
	start := d.i
	for d.i < len(d.p) && '0' <= d.p[d.i] && d.p[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}

// str reads a string. Without escapes or non-ASCII bytes (every name, and
// every payload the core writes) the result aliases p; otherwise it is
// unescaped into a new slice.
func (d *jsonScanner) str() ([]byte, bool) {
	p, i := d.p, d.i
	if i >= len(p) || p[i] != '"' {
		d.err = "want a string"
		return nil, false
	}
	start := i + 1
	for i = start; i < len(p); i++ {
		c := p[i]
		if c == '"' {
			d.i = i + 1
			return p[start:i], true
		}
		if c == '\\' || c >= utf8.RuneSelf {
			d.i = i
			return d.strSlow(start)
		}
		if c < 0x20 {
			d.i = i
			d.err = "control character in string"
			return nil, false
		}
	}
	d.i = i
	d.err = "unterminated string"
	return nil, false
}

// strSlow finishes a string that has escapes or non-ASCII bytes, from start
// (just after the opening quote), the way encoding/json unquotes.
func (d *jsonScanner) strSlow(start int) ([]byte, bool) {
	b := make([]byte, 0, d.i-start+16)
	b = append(b, d.p[start:d.i]...)
	for d.i < len(d.p) {
		c := d.p[d.i]
		switch {
		case c == '"':
			d.i++
			return b, true
		case c < 0x20:
			d.err = "control character in string"
			return nil, false
		case c == '\\':
			if d.i+1 >= len(d.p) {
				d.i++
				d.err = "unterminated string"
				return nil, false
			}
			e := d.p[d.i+1]
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r := hex4(d.p[d.i+2:])
				if r < 0 {
					d.i += 2
					d.err = "bad \\u escape"
					return nil, false
				}
				d.i += 6
				if 0xd800 <= r && r < 0xe000 { // a surrogate: a pair, or U+FFFD
					if r < 0xdc00 && len(d.p)-d.i >= 6 && d.p[d.i] == '\\' && d.p[d.i+1] == 'u' {
						if r2 := hex4(d.p[d.i+2:]); 0xdc00 <= r2 && r2 < 0xe000 {
							d.i += 6
							b = utf8.AppendRune(b, (r-0xd800)<<10|(r2-0xdc00)+0x10000)
							continue
						}
					}
					r = utf8.RuneError
				}
				b = utf8.AppendRune(b, r)
				continue
			default:
				d.i++
				d.err = "bad escape"
				return nil, false
			}
			d.i += 2
		case c < utf8.RuneSelf:
			b = append(b, c)
			d.i++
		default:
			r, n := utf8.DecodeRune(d.p[d.i:])
			b = utf8.AppendRune(b, r) // an invalid byte becomes U+FFFD
			d.i += n
		}
	}
	d.err = "unterminated string"
	return nil, false
}

// hex4 decodes the 4 hex digits at the start of p, or returns -1.
func hex4(p []byte) rune {
	if len(p) < 4 {
		return -1
	}
	var r rune
	for _, c := range p[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}
