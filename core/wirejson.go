package core

import (
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
func parseWire(p []byte, m *wireMsg) error {
	d := jsonScanner{p: p, reuse: [...]string{m.Type, m.Group, m.From, m.Candidate, m.Leader, m.To, m.groupHint}}
	*m = wireMsg{}
	d.ws()
	if !d.eat('{') {
		return d.fail("want a JSON object")
	}
	d.ws()
	if !d.eat('}') {
		for {
			key, ok := d.str()
			if !ok {
				return d.fail("want a key")
			}
			d.ws()
			if !d.eat(':') {
				return d.fail("want ':'")
			}
			d.ws()
			if !d.field(m, key) {
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

// field reads the value of key into m.
func (d *jsonScanner) field(m *wireMsg, key []byte) bool {
	switch string(key) {
	case "type":
		return d.strField(&m.Type, true)
	case "group":
		return d.strField(&m.Group, true)
	case "from":
		return d.strField(&m.From, true)
	case "candidate":
		return d.strField(&m.Candidate, true)
	case "leader":
		return d.strField(&m.Leader, true)
	case "to":
		return d.strField(&m.To, true)
	case "elected_at":
		return d.strField(&m.ElectedAt, false)
	case "sig":
		return d.strField(&m.Sig, false)
	case "value":
		return d.strField(&m.Value, false)
	case "value_ver":
		return d.uintField(&m.ValueVer, 1<<64-1)
	case "op":
		return d.strField(&m.Op, false)
	case "member":
		return d.strField(&m.Member, false)
	case "key":
		return d.strField(&m.Key, false)
	case "members":
		return d.strsField(&m.Members)
	case "keys":
		return d.strsField(&m.Keys)
	case "conf_term":
		return d.uintField(&m.ConfTerm, 1<<64-1)
	case "conf_index":
		return d.uintField(&m.ConfIndex, 1<<64-1)
	case "committed":
		return d.boolField(&m.Committed)
	case "remove":
		return d.boolField(&m.Remove)
	case "pin":
		return d.boolField(&m.Pin)
	case "term":
		return d.uintField(&m.Term, 1<<64-1)
	case "seq":
		return d.uintField(&m.Seq, 1<<64-1)
	case "inc":
		return d.uintField(&m.Inc, 1<<64-1)
	case "leader_inc":
		return d.uintField(&m.LeaderInc, 1<<64-1)
	case "epoch":
		return d.uintField(&m.Epoch, 1<<64-1)
	case "ctr":
		return d.uintField(&m.Ctr, 1<<64-1)
	case "priority":
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
	case "pre":
		return d.boolField(&m.Pre)
	case "granted":
		return d.boolField(&m.Granted)
	case "handoff":
		return d.boolField(&m.Handoff)
	case "hold":
		m.holdSet = d.peek() != 'n'
		return d.uintField(&m.Hold, 1<<64-1) // bounded by checkWire
	case "timestamp": // informational: a string, a number or null
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
			for _, s := range d.reuse {
				if string(b) == s {
					*dst = s
					return true
				}
			}
			switch string(b) {
			case typeHeartbeat:
				*dst = typeHeartbeat
				return true
			case typeAck:
				*dst = typeAck
				return true
			case typeVote:
				*dst = typeVote
				return true
			}
		}
		*dst = string(b)
		return true
	}
	if d.value() {
		d.err = "want a string"
	}
	return false
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
	switch c := d.peek(); {
	case c == 'n':
		return d.lit("null")
	case '0' <= c && c <= '9':
		start := d.i
		var v uint64
		over := false
		for d.i < len(d.p) && '0' <= d.p[d.i] && d.p[d.i] <= '9' {
			dg := uint64(d.p[d.i] - '0')
			if v > (max-dg)/10 {
				over = true
			}
			v = v*10 + dg
			d.i++
		}
		if d.p[start] == '0' && d.i > start+1 {
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
		if over {
			d.i = start
			d.err = "integer out of range"
			return false
		}
		*dst = v
		return true
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
	if !d.eat('"') {
		d.err = "want a string"
		return nil, false
	}
	start := d.i
	for d.i < len(d.p) {
		c := d.p[d.i]
		switch {
		case c == '"':
			d.i++
			return d.p[start : d.i-1], true
		case c == '\\' || c >= utf8.RuneSelf:
			return d.strSlow(start)
		case c < 0x20:
			d.err = "control character in string"
			return nil, false
		}
		d.i++
	}
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
