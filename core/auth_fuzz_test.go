package core

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fuzzGenuine is a recorded authenticated run: the messages members b and c
// published (all signed), which a fresh member a then receives.
var fuzzGenuine = map[AuthMode][][]byte{}

func genuineMessages(t testing.TB, am AuthMode) [][]byte {
	if g, ok := fuzzGenuine[am]; ok {
		return g
	}
	n := newAuthNet(t, ModeQuorum, am, "a", "b", "c")
	var msgs [][]byte
	n.sent = func(from string, m Message) {
		if from != "a" && len(msgs) < 64 {
			msgs = append(msgs, m.Payload)
		}
	}
	n.quiet = true
	n.down["a"] = true
	n.advance(3000, 10)
	fuzzGenuine[am] = msgs
	return msgs
}

// FuzzVerify delivers an arbitrary payload to a member that has already
// accepted the first few genuine messages of an authenticated group. Nothing
// panics; a refused payload changes nothing but the counters; and a payload
// is accepted only if it says exactly what a genuine, not yet delivered
// message says (same canonical encoding: only JSON spelling may differ).
func FuzzVerify(f *testing.F) {
	for _, am := range []AuthMode{AuthEd25519, AuthHMAC} {
		g := genuineMessages(f, am)
		for i, p := range g {
			if i < 12 {
				f.Add(p, am == AuthHMAC)
			}
		}
		f.Add([]byte(strings.Replace(string(g[5]), `"term":`, `"term":1`, 1)), am == AuthHMAC)
		f.Add([]byte(`{"type":"leader","leader":"b","term":9}`), am == AuthHMAC)
		f.Add([]byte(`{"type":"heartbeat","group":"g","from":"b","leader":"b","term":1,"epoch":1,"ctr":1,"sig":"`+strings.Repeat("A", 43)+`"}`), am == AuthHMAC)
	}
	const delivered = 4
	f.Fuzz(func(t *testing.T, payload []byte, hmacMode bool) {
		am := AuthEd25519
		if hmacMode {
			am = AuthHMAC
		}
		g := genuineMessages(t, am)
		c := Config{ID: "a", Group: "g", Members: []string{"a", "b", "c"}}
		authConfig(&c, am, c.Members)
		e := NewEngine()
		var out Output
		e.Step(&Input{Now: 1, Join: []GroupSpec{{Config: c, State: GroupState{Group: "g", Term: 0}}}}, &out)
		for _, p := range g[:delivered] {
			e.Step(&Input{Now: 2, Inbound: []Message{{Topic: Topic("g"), Payload: p}}}, &out)
		}
		before, _ := e.Status("g")
		out.Reset()
		e.Step(&Input{Now: 2, Inbound: []Message{{Topic: Topic("g"), Payload: payload}}}, &out)
		after, _ := e.Status("g")
		rejected := len(out.Events) > 0 && out.Events[0].Kind == EventRejected
		var m wireMsg
		if decodeWire(payload, &m) != nil || m.From == "a" {
			return
		}
		if !rejected {
			canon := string(appendCanonical(nil, "g", &m))
			ok := false
			for _, p := range g[delivered:] {
				var gm wireMsg
				if decodeWire(p, &gm) == nil && string(appendCanonical(nil, "g", &gm)) == canon {
					ok = true
				}
			}
			if !ok {
				t.Fatalf("accepted a message no member signed: %s", payload)
			}
			return
		}
		// The one thing a refused message may cause: with ed25519, a sender
		// we hold no key for that claims a newer configuration makes us ask
		// a member we list for its configuration (askUnverified), at most
		// once per heartbeat interval.
		if len(out.Persist) > 0 || len(out.Publishes) > 1 ||
			len(out.Publishes) == 1 && !(am == AuthEd25519 && isConfAsk(out.Publishes[0].Payload)) {
			t.Fatalf("a refused message published or persisted: %+v", out)
		}
		before.Rejected, before.Unsigned, before.Forged, before.Replayed = 0, 0, 0, 0
		after.Rejected, after.Unsigned, after.Forged, after.Replayed = 0, 0, 0, 0
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("a refused message changed the state:\n%+v\n%+v", before, after)
		}
	})
}

// isConfAsk reports whether payload is a's request for a member's
// configuration: a pre-vote it does not grant (askConf).
func isConfAsk(payload []byte) bool {
	var m wireMsg
	return decodeWire(payload, &m) == nil && m.Type == typeVote && m.From == "a" && m.Pre && !m.Granted
}

// TestWriteVerifyCorpus writes the committed corpus of FuzzVerify
// (testdata/fuzz/FuzzVerify) when ELECTCORE_WRITE_CORPUS=1.
func TestWriteVerifyCorpus(t *testing.T) {
	if os.Getenv("ELECTCORE_WRITE_CORPUS") != "1" {
		t.Skip("set ELECTCORE_WRITE_CORPUS=1 to rewrite testdata/fuzz/FuzzVerify")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzVerify")
	os.MkdirAll(dir, 0o755)
	n := 0
	add := func(p []byte, h bool) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\nbool(%v)\n", p, h)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%03d", n)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		n++
	}
	for _, am := range []AuthMode{AuthEd25519, AuthHMAC} {
		h := am == AuthHMAC
		g := genuineMessages(t, am)
		for i, p := range g {
			if i%3 == 0 || i < 8 {
				add(p, h) // genuine: replays (i < 4) and fresh ones
			}
		}
		s := string(g[6])
		for _, mut := range []func(string) string{
			func(s string) string { return strings.Replace(s, `"term":`, `"term":9`, 1) },
			func(s string) string { return strings.Replace(s, `"ctr":`, `"ctr":7`, 1) },
			func(s string) string { return strings.Replace(s, `"epoch":`, `"epoch":2`, 1) },
			func(s string) string { return strings.Replace(s, `"from":"`, `"from":"c`, 1) },
			func(s string) string { return strings.Replace(s, `"group":"g"`, `"group":"h"`, 1) },
			func(s string) string { return strings.Replace(s, `"sig":"`, `"sig":"A`, 1) },
			func(s string) string { return s[:strings.Index(s, `,"epoch"`)] + "}" },
			func(s string) string { return strings.Replace(s, `{"type"`, `{ "type"`, 1) }, // same message, other spelling
			func(s string) string { return strings.Replace(s, `"sig"`, `"x":[[[[[[[[[[1]]]]]]]]]],"sig"`, 1) },
		} {
			add([]byte(mut(s)), h)
		}
		add([]byte(`{"type":"leader","leader":"b","term":9}`), h)
		add([]byte(`{"type":"vote","group":"g","from":"b","priority":1,"candidate":"a","term":2,"granted":true,"epoch":1,"ctr":99,"sig":"`+strings.Repeat("_", 86)+`"}`), h)
	}
	t.Logf("wrote %d corpus entries to %s", n, dir)
}
