package core

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// sameAsJSON checks decodeFast against encoding/json on one payload: when
// the fast path accepts a payload, json.Unmarshal must accept it too and
// yield the same message.
func sameAsJSON(t *testing.T, payload []byte) bool {
	t.Helper()
	var fast wireMsg
	if !decodeFast(payload, &fast) {
		return false
	}
	var slow wireMsg
	if err := json.Unmarshal(payload, &slow); err != nil {
		t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", payload, err)
	}
	if (fast.Priority == nil) != (slow.Priority == nil) || fast.Priority != nil && *fast.Priority != *slow.Priority {
		t.Fatalf("%q: priority %v (fast) vs %v (json)", payload, fast.Priority, slow.Priority)
	}
	fast.Priority, slow.Priority, fast.prio = nil, nil, 0
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q:\nfast %+v\njson %+v", payload, fast, slow)
	}
	return true
}

func FuzzDecodeFast(f *testing.F) {
	for _, s := range seedPayloads {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) { sameAsJSON(t, payload) })
}

// TestDecodeFastMatchesJSON mutates canonical messages (whitespace, escapes,
// case, numbers out of range, nulls, duplicates, junk) and checks every one
// the fast path accepts against encoding/json; the canonical ones must take
// the fast path.
func TestDecodeFastMatchesJSON(t *testing.T) {
	var canon []string
	e := &encoder{}
	e.begin(typeHeartbeat, "g", "a")
	e.str("leader", "a")
	e.num("priority", 4294967295)
	e.num("term", 18446744073709551615)
	e.num("seq", 0)
	e.wall(typeHeartbeat, 1796040000123)
	canon = append(canon, string(e.end()))
	e.begin(typeVote, "g", "b")
	e.str("candidate", "a")
	e.num("term", 7)
	e.flag("pre")
	e.flag("granted")
	canon = append(canon, string(e.end()))
	e.begin(typeLeader, "g", "c")
	e.str("leader", "c")
	e.num("term", 1)
	e.wall(typeLeader, 1796040000123)
	canon = append(canon, string(e.end()))
	canon = append(canon, seedPayloads...)
	canon = append(canon, `{"type":"resign","leader":"b","term":2,"to":"c","pre":false}`, `{}`,
		`{"type":"heartbeat","leader":"b","term":3,"timestamp":1796040000}`)
	for _, c := range canon[:3] {
		if !sameAsJSON(t, []byte(c)) {
			t.Fatalf("canonical %q missed the fast path", c)
		}
	}
	junk := []string{" ", "\\", `\u0041`, "\"", "0", "00", "-1", "1.5", "1e3", "null", "true", "TYPE", "Term",
		"18446744073709551616", "4294967296", "é", "\x00", "}", "{", ",", ":", `"x":1`, `,"term":9`, `"`}
	r := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for range 50_000 {
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
		if sameAsJSON(t, p) {
			accepted++
		}
		// Upper-case keys and duplicated fields go to encoding/json, which
		// folds case: the result must not depend on the path taken.
		var m1, m2 wireMsg
		err1 := decodeWire(p, &m1)
		err2 := json.Unmarshal(p, &m2)
		if err1 == nil && err2 != nil && !strings.Contains(err2.Error(), "timestamp") {
			t.Fatalf("%q: decodeWire accepted what encoding/json refuses: %v", p, err2)
		}
	}
	if accepted == 0 {
		t.Fatal("no mutation took the fast path")
	}
}
