package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// The reference: the decoder the core used before parseWire, encoding/json
// behind an iterative nesting check. parseWire must agree with it on every
// payload whose keys are spelled exactly as wireMsg's tags (encoding/json
// also matches keys case-insensitively, which parseWire refuses to do).

// UnmarshalJSON is flexStamp's rule for encoding/json: a string, a number or
// null.
func (*flexStamp) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && (b[0] == '"' || b[0] == '-' || b[0] >= '0' && b[0] <= '9' || b[0] == 'n') {
		return nil
	}
	return errors.New("timestamp: want a string or a number")
}

// parseWireJSON is the reference for parseWire.
func parseWireJSON(p []byte, m *wireMsg) error {
	if err := checkNestingRef(p); err != nil {
		return err
	}
	if err := json.Unmarshal(p, m); err != nil {
		return fmt.Errorf("malformed: %v", err)
	}
	var keys map[string]json.RawMessage // a hold is present unless missing or null
	if json.Unmarshal(p, &keys) == nil {
		v, ok := keys["hold"]
		m.holdSet = ok && string(v) != "null"
	}
	return nil
}

// decodeWireJSON is the reference for decodeWire.
func decodeWireJSON(p []byte, m *wireMsg) error {
	if len(p) > MaxPayload {
		return fmt.Errorf("oversized: %d bytes, at most %d", len(p), MaxPayload)
	}
	*m = wireMsg{}
	if err := parseWireJSON(p, m); err != nil {
		return err
	}
	return checkWire(m)
}

// checkNestingRef refuses JSON nested deeper than maxWireDepth.
func checkNestingRef(p []byte) error {
	depth, inStr, esc := 0, false, false
	for _, c := range p {
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
			if depth > maxWireDepth {
				return fmt.Errorf("malformed: nested deeper than %d", maxWireDepth)
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return nil
}

var wireKeys = func() []string {
	var ks []string
	t := reflect.TypeFor[wireMsg]()
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("json"); tag != "" {
			ks = append(ks, strings.Split(tag, ",")[0])
		}
	}
	return ks
}()

// exactKeys reports whether p is an object whose every key (unescaped) that
// encoding/json would match to a field is spelled exactly like its tag.
func exactKeys(p []byte) bool {
	var obj map[string]json.RawMessage
	if json.Unmarshal(p, &obj) != nil || obj == nil {
		return false
	}
	for k := range obj {
		for _, w := range wireKeys {
			if k != w && strings.EqualFold(k, w) {
				return false
			}
		}
	}
	return true
}

// equalWire compares two messages, priorities by value.
func equalWire(a, b wireMsg) bool {
	if (a.Priority == nil) != (b.Priority == nil) || a.Priority != nil && *a.Priority != *b.Priority {
		return false
	}
	a.Priority, b.Priority, a.prio, b.prio = nil, nil, 0, 0
	a.named, b.named = 0, 0 // which names were checked while parsing, not a value
	return reflect.DeepEqual(a, b)
}

// sameAsReference checks parseWire and decodeWire against the references on
// one payload. It reports whether parseWire accepted it.
func sameAsReference(t testing.TB, p []byte) bool {
	t.Helper()
	sameAsScan(t, p)
	var got, want wireMsg
	errGot := parseWire(p, &got)
	errWant := parseWireJSON(p, &want)
	exact := exactKeys(p)
	switch {
	case errGot == nil && !exact:
		// Case-folded keys: encoding/json reads them as fields, parseWire as
		// unknown keys; nothing to compare.
	case errGot == nil && errWant != nil:
		t.Fatalf("parseWire accepts %q, encoding/json refuses it: %v", p, errWant)
	case errGot == nil && !equalWire(got, want):
		t.Fatalf("%q:\nparseWire    %+v\nencoding/json %+v", p, got, want)
	case errGot != nil && errWant == nil && exact:
		t.Fatalf("encoding/json accepts %q, parseWire refuses it: %v", p, errGot)
	}
	if exact || errGot != nil && errWant != nil {
		errGot, errWant = decodeWire(p, &got), decodeWireJSON(p, &want)
		if (errGot == nil) != (errWant == nil) || errGot == nil && !equalWire(got, want) {
			t.Fatalf("decodeWire %q: %v %+v\nreference: %v %+v", p, errGot, got, errWant, want)
		}
	}
	return errGot == nil
}

// sameAsScan checks that a payload canonical accepts is one the general
// scanner reads as the same message, and that the names canonical marks as
// checked are names. It reports whether canonical accepted it.
func sameAsScan(t testing.TB, p []byte) bool {
	t.Helper()
	hint := "g"
	fast := jsonScanner{p: p, reuse: [7]string{hint}}
	var got, want wireMsg
	if !fast.canonical(&got) {
		return false
	}
	slow := jsonScanner{p: p, reuse: [7]string{hint}}
	if err := slow.scan(&want); err != nil {
		t.Fatalf("canonical accepts %q, scan refuses it: %v", p, err)
	}
	if !equalWire(got, want) {
		t.Fatalf("%q:\ncanonical %+v\nscan      %+v", p, got, want)
	}
	for _, f := range []struct {
		bit uint8
		s   string
	}{{namedGroup, got.Group}, {namedFrom, got.From}, {namedLeader, got.Leader}, {namedCandidate, got.Candidate}, {namedTo, got.To}} {
		if got.named&f.bit != 0 && checkName("name", f.s) != nil {
			t.Fatalf("%q: canonical marks %q a name", p, f.s)
		}
	}
	return true
}

// TestCanonicalReadsWhatTheCoreWrites: every message the core writes takes
// canonical's one pass (else the steady state pays for the general scanner).
func TestCanonicalReadsWhatTheCoreWrites(t *testing.T) {
	kinds := map[string]int{}
	check := func(from string, msg Message) {
		var m wireMsg
		if err := parseWire(msg.Payload, &m); err != nil {
			t.Fatalf("%q: %v", msg.Payload, err)
		}
		if !sameAsScan(t, msg.Payload) && m.Type != typeConfig { // (members: a list)
			t.Errorf("canonical refuses the core's %q", msg.Payload)
		}
		kinds[m.Type]++
	}
	// An election, heartbeats and acks with a configuration version and
	// a value, a hand-off, and a membership change.
	n := newTestNet(t, ModeQuorum, "a", "b", "c")
	n.values = map[string]string{"a": "10.0.0.1:8080", "b": "b", "c": "c"}
	for _, id := range n.ids {
		n.start(id)
	}
	n.sent = check
	leader := func() string {
		n.advance(6000, 10)
		if l := n.leaders(); len(l) == 1 {
			return strings.Split(l[0], "@")[0]
		}
		t.Fatalf("leaders %v", n.leaders())
		return ""
	}
	l := leader()
	n.step(l, &Input{Now: n.now, Commands: []Command{{Kind: CmdTransfer, Group: "g", Target: n.others(l)[0]}}})
	l = leader()
	n.step(l, &Input{Now: n.now, Commands: []Command{{Kind: CmdRemoveMember, Group: "g", Target: n.others(l)[0]}}})
	leader()
	// The seed format's wall-clock fields.
	e := &encoder{}
	e.begin(typeHeartbeat, &group{cfg: Config{Group: "g", ID: "a"}})
	e.str("leader", "a")
	e.num("term", 1)
	e.wall(typeHeartbeat, 1796040000123)
	check("a", Message{Payload: e.end()})
	e.begin(typeLeader, &group{cfg: Config{Group: "g", ID: "a"}})
	e.str("leader", "a")
	e.num("term", 1)
	e.wall(typeLeader, 1796040000123)
	check("a", Message{Payload: e.end()})
	for _, typ := range []string{typeElection, typeLeader, typeHeartbeat, typeVote, typeAck, typeResign} {
		if kinds[typ] == 0 {
			t.Errorf("no %s message seen (%v)", typ, kinds)
		}
	}
	t.Log(kinds)
}

// corpusPayloads returns every []byte and string value of the committed fuzz
// corpora and every line (and every line from its first '{') of the golden
// transcripts.
func corpusPayloads(t *testing.T) [][]byte {
	var ps [][]byte
	files, _ := filepath.Glob("testdata/fuzz/*/*")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			for _, pre := range []string{"[]byte(", "string("} {
				if lit, ok := strings.CutPrefix(line, pre); ok {
					s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
					if err != nil {
						t.Fatalf("%s: %q: %v", f, line, err)
					}
					ps = append(ps, []byte(s))
				}
			}
		}
	}
	if len(ps) < 100 {
		t.Fatalf("only %d corpus entries", len(ps))
	}
	files, _ = filepath.Glob("testdata/transcripts/*.txt")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			ps = append(ps, line)
			if i := bytes.IndexByte(line, '{'); i > 0 {
				ps = append(ps, line[i:])
			}
		}
	}
	for _, s := range seedPayloads {
		ps = append(ps, []byte(s))
	}
	return ps
}

// TestParseWireMatchesReference runs every committed payload through both
// decoders.
func TestParseWireMatchesReference(t *testing.T) {
	accepted := 0
	ps := corpusPayloads(t)
	for _, p := range ps {
		if sameAsReference(t, p) {
			accepted++
		}
	}
	t.Logf("%d payloads, %d parsed", len(ps), accepted)
	if accepted < 50 {
		t.Fatalf("only %d payloads parsed", accepted)
	}
}

// wireVariants are payloads that exercise every rule of parseWire.
var wireVariants = []string{
	` { "type" : "vote" ,	"group":"g","from":"b","candidate":"a","term":2,"granted":true }` + "\n\r\t ",
	`{"term":7,"candidate":"a","from":"b","type":"vote","pre":false,"granted":true}`,
	`{"type":"v\u006fte","from":"b","candidate":"a","term":2}`,
	`{"typ\u0065":"vote","from":"b","candidate":"a","term":2}`,
	`{"type":"vote","from":"b","candidate":"a\u00e9","term":2}`,
	`{"type":"vote","from":"b","candidate":"a","term":2,"elected_at":"\ud83d\ude00 \ud83d x \ude00 \ud83d\u0041 \/\\\"\b\f\n\r\t"}`,
	"{\"type\":\"vote\",\"from\":\"b\",\"candidate\":\"a\",\"term\":2,\"elected_at\":\"\xff\xc3(\xe2\x82\"}",
	"{\"type\":\"vote\",\"from\":\"b\",\"candidate\":\"a\",\"term\":2,\"\xff\":1}",
	`{"type":"vote","from":"b","candidate":"a","term":2,"term":3,"type":"ack","leader":"a"}`,
	`{"type":"vote","from":"b","candidate":"a","term":2,"term":null,"priority":4,"priority":null,"pre":true,"pre":null}`,
	`{"type":"vote","from":"b","candidate":"a","term":18446744073709551615,"priority":4294967295}`,
	`{"type":"vote","from":"b","candidate":"a","term":18446744073709551616}`,
	`{"type":"vote","from":"b","candidate":"a","term":2,"priority":4294967296}`,
	`{"type":"vote","from":"b","candidate":"a","term":-0}`,
	`{"type":"vote","from":"b","candidate":"a","term":2.0}`,
	`{"type":"vote","from":"b","candidate":"a","term":2e0}`,
	`{"type":"vote","from":"b","candidate":"a","term":02}`,
	`{"type":"vote","from":"b","candidate":"a","term":"2"}`,
	`{"type":"vote","from":"b","candidate":"a","term":true}`,
	`{"type":"vote","from":"b","candidate":"a","term":2,"pre":1}`,
	`{"type":"vote","from":"b","candidate":"a","term":2,"pre":"true"}`,
	`{"type":"vote","from":"b","candidate":"a","term":2,"from":7}`,
	`{"type":"vote","from":"b","candidate":"a","term":2,"from":{}}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"timestamp":"1796040000"}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"timestamp":-1.5e-3}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"timestamp":null}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"timestamp":true}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"timestamp":[1]}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":{"a":[1,2.5e+3,-0.0,"s\u0000",true,false,null,{}],"b":[[[[[]]]]]}}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":[[[[[[[]]]]]]]}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":[[[[[[[[]]]]]]]]}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":[1,]}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":{"a":1,}}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":{"a"}}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":01}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":1.}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":.5}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":1e}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":+1}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":tru}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":"\x"}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"x":"\u12"}`,
	"{\"type\":\"heartbeat\",\"from\":\"b\",\"leader\":\"b\",\"term\":2,\"x\":\"\x01\"}",
	`{"type":"heartbeat","from":"b","leader":"b","term":2}{}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2},`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2`,
	`{"Type":"heartbeat","from":"b","leader":"b","term":2}`,
	`{"type":"heartbeat","from":"b","leader":"b","TERM":2,"term":1}`,
	`{"type":"heartbeat","from":"b","leader":"b","term":2,"ſig":"x"}`,
	`{}`, ` {} `, `{,}`, `{"a"}`, `{"a":}`, `{"a":1 "b":2}`, `null`, ` null `, `[]`, `"x"`, `1`, `true`, ``, ` `, `{`, `}`,
}

// TestParseWireVariants: each variant decodes as encoding/json decodes it.
func TestParseWireVariants(t *testing.T) {
	for _, v := range wireVariants {
		sameAsReference(t, []byte(v))
	}
	var m wireMsg
	if err := parseWire([]byte(`{"type":"heartbeat","Term":5,"term":1}`), &m); err != nil || m.Term != 1 {
		t.Fatalf("case-folded key: %v %+v (want it ignored)", err, m)
	}
	for _, v := range []string{`{"x":[[[[[[[]]]]]]]}`, `{"x":{"y":[{"z":[[[[]]]]}]}}`} {
		if err := parseWire([]byte(v), &m); err != nil {
			t.Fatalf("%s (depth %d): %v", v, maxWireDepth, err)
		}
		if err := parseWire([]byte(strings.Replace(v, "[]", "[[]]", 1)), &m); err == nil || !strings.Contains(err.Error(), "nested deeper") {
			t.Fatalf("%s one level deeper: %v", v, err)
		}
	}
	deep := `{"x":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `}`
	if err := parseWire([]byte(deep), &m); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("deep: %v", err)
	}
}

// TestParseWireMutations mutates canonical and variant messages
// (whitespace, escapes, case, numbers out of range, nulls, duplicates, junk)
// and checks every mutant against the reference.
func TestParseWireMutations(t *testing.T) {
	canon := []string{}
	e := &encoder{}
	e.begin(typeHeartbeat, &group{cfg: Config{Group: "g", ID: "a"}})
	e.str("leader", "a")
	e.num("priority", 4294967295)
	e.num("term", 18446744073709551615)
	e.num("seq", 0)
	e.wall(typeHeartbeat, 1796040000123)
	canon = append(canon, string(e.end()))
	e.begin(typeVote, &group{cfg: Config{Group: "g", ID: "b"}})
	e.str("candidate", "a")
	e.num("term", 7)
	e.flag("pre")
	e.flag("granted")
	canon = append(canon, string(e.end()))
	e.begin(typeLeader, &group{cfg: Config{Group: "g", ID: "c"}})
	e.str("leader", "c")
	e.num("term", 1)
	e.wall(typeLeader, 1796040000123)
	canon = append(canon, string(e.end()))
	canon = append(canon, seedPayloads...)
	canon = append(canon, wireVariants...)
	junk := []string{" ", "\\", `\u0041`, `\ud83d`, `\ude00`, "\"", "0", "00", "-1", "1.5", "1e3", "null", "true", "TYPE", "Term",
		"18446744073709551616", "4294967296", "é", "\xff", "\x00", "}", "{", "[", "]", ",", ":", `"x":1`, `,"term":9`, `"`, `"priority":null`}
	r := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for range 100_000 {
		p := []byte(canon[r.IntN(len(canon))])
		for range 1 + r.IntN(3) {
			i := r.IntN(len(p) + 1)
			switch r.IntN(3) {
			case 0: // insert
				p = []byte(string(p[:i]) + junk[r.IntN(len(junk))] + string(p[i:]))
			case 1: // delete
				if i < len(p) {
					p = append(p[:i:i], p[i+1:]...)
				}
			case 2: // replace a run with junk
				j := min(len(p), i+1+r.IntN(4))
				p = []byte(string(p[:i]) + junk[r.IntN(len(junk))] + string(p[j:]))
			}
		}
		if sameAsReference(t, p) {
			accepted++
		}
	}
	if accepted < 1000 {
		t.Fatalf("only %d mutants parsed", accepted)
	}
}

func FuzzParseWire(f *testing.F) {
	for _, s := range seedPayloads {
		f.Add([]byte(s))
	}
	for _, s := range wireVariants {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) { sameAsReference(t, payload) })
}

// BenchmarkDecodeWire: the canonical heartbeat, parseWire against the
// reference.
func BenchmarkDecodeWire(b *testing.B) {
	p := heartbeats("a", 1)[0]
	var m wireMsg
	b.Run("parseWire", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if decodeWire(p, &m) != nil {
				b.Fatal("refused")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if decodeWireJSON(p, &m) != nil {
				b.Fatal("refused")
			}
		}
	})
}

// TestKeyLookups: both ways of naming a key agree, for every key of
// wireMsg's and some that are not (a prefix, a longer key, a zero byte).
func TestKeyLookups(t *testing.T) {
	pack := func(k string) (w0, w1 uint64) {
		for n := range min(len(k), 16) {
			if n < 8 {
				w0 |= uint64(k[n]) << (8 * n)
			} else {
				w1 |= uint64(k[n]) << (8 * (n - 8))
			}
		}
		return
	}
	seen := map[wireKey]string{}
	for _, k := range wireKeys {
		id := lookupKey([]byte(k))
		if id == keyUnknown {
			t.Errorf("%q unknown", k)
		}
		if other, ok := seen[id]; ok {
			t.Errorf("%q and %q are both key %d", k, other, id)
		}
		seen[id] = k
		if w0, w1 := pack(k); packedKey(len(k), w0, w1) != id {
			t.Errorf("%q: packedKey %d, lookupKey %d", k, packedKey(len(k), w0, w1), id)
		}
	}
	for _, k := range []string{"", "t", "typ", "types", "type\x00", "leader_in", "leader_incs", "conf_", "Type", "value_ver_and_more_than_16"} {
		w0, w1 := pack(k)
		if lookupKey([]byte(k)) != keyUnknown || packedKey(len(k), w0, w1) != keyUnknown {
			t.Errorf("%q is taken for a key", k)
		}
	}
	for w := range 8 {
		b := []byte("abcdefgh")
		b[w] = '"'
		if got := quoteAt(le64(b)); got != w {
			t.Errorf("quoteAt(%q) = %d", b, got)
		}
	}
	if got := quoteAt(le64([]byte("abc\"\"fgh"))); got != 3 {
		t.Errorf("two quotes: %d", got)
	}
	if got := quoteAt(le64([]byte("a#!bcdeh"))); got != 8 {
		t.Errorf("no quote: %d", got)
	}
}

// TestDigitWords: digitsAt and digits8 against a byte loop and strconv.
func TestDigitWords(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte("0123456789\"},.e-x/:\x00\xff\xfa")
	for range 100_000 {
		b := make([]byte, 8)
		for i := range b {
			if r.IntN(3) > 0 {
				b[i] = '0' + byte(r.IntN(10))
			} else {
				b[i] = alphabet[r.IntN(len(alphabet))]
			}
		}
		want := 0
		for want < 8 && '0' <= b[want] && b[want] <= '9' {
			want++
		}
		if got := digitsAt(le64(b)); got != want {
			t.Fatalf("digitsAt(%q) = %d, want %d", b, got, want)
		}
		if want == 8 {
			v, _ := strconv.ParseUint(string(b), 10, 64)
			if got := digits8(le64(b)); got != v {
				t.Fatalf("digits8(%q) = %d", b, got)
			}
		}
	}
}

// TestCanonicalNumbers: numbers of every length and at the bounds, in the
// middle of a payload (read eight digits at a time) and at its end (byte by
// byte), read as the general scanner and the reference read them.
func TestCanonicalNumbers(t *testing.T) {
	nums := []string{"0", "7", "00", "01", "10", "12345678", "123456789", "1234567890123456", "12345678901234567",
		"9999999999999999999", "10000000000000000000", "18446744073709551615", "18446744073709551616",
		"18446744073709550000", "18446744073709549999", "18446744073709551999", "19999999999999999999",
		"99999999999999999999", "100000000000000000000", "4294967295", "4294967296", "1.5", "1e3", "12345678.5", "-1"}
	accepted := 0
	for _, x := range nums {
		for _, p := range []string{
			`{"type":"ack","group":"g","from":"b","inc":` + x + `,"priority":1,"leader":"a","term":1,"seq":2,"leader_inc":3}`,
			`{"type":"ack","group":"g","from":"b","inc":1,"priority":` + x + `,"leader":"a","term":1,"seq":2,"leader_inc":3}`,
			`{"type":"ack","group":"g","from":"b","inc":1,"priority":1,"leader":"a","term":1,"seq":2,"leader_inc":` + x + `}`,
			`{"type":"ack","group":"g","from":"b","leader":"a","term":1,"seq":` + x + `}`,
		} {
			if sameAsScan(t, []byte(p)) {
				accepted++
			}
			sameAsReference(t, []byte(p))
		}
	}
	if accepted < 40 {
		t.Fatalf("canonical accepted only %d", accepted)
	}
}
