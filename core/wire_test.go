package core

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAppendUTC checks the leader message's elected_at against what time
// writes, at the calendar's edges (leap days, centuries, 400-year eras,
// years past 9999, the largest ms) and at random instants.
func TestAppendUTC(t *testing.T) {
	ms := []int64{1, 999, 1000, 86_399_999, 86_400_000, math.MaxInt64, math.MaxInt64 - 999}
	for _, d := range []string{"1970-12-31T23:59:59Z", "1972-02-29T12:00:00Z", "2000-02-29T00:00:00Z",
		"2000-03-01T00:00:00Z", "2038-01-19T03:14:08Z", "2100-02-28T23:59:59Z", "2100-03-01T00:00:00Z",
		"2400-02-29T00:00:00Z", "9999-12-31T23:59:59Z"} {
		at, err := time.Parse(time.RFC3339, d)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, at.UnixMilli()-1, at.UnixMilli(), at.UnixMilli()+1, at.UnixMilli()+1000)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		ms = append(ms, 1+r.Int64N(1<<uint(1+r.IntN(62))))
	}
	for _, v := range ms {
		want := time.UnixMilli(v).UTC().Format("2006-01-02T15:04:05Z")
		if got := string(appendUTC(nil, v)); got != want {
			t.Fatalf("appendUTC(%d) = %s, want %s", v, got, want)
		}
	}
}

func TestAppendUint(t *testing.T) {
	vs := []uint64{0, 1, 9, 10, 99, 100, 999_999_999, 1e9, 1e9 + 1, 4294967295, 4294967296,
		1e18 - 1, 1e18, 1e19, 14337955999216099397, math.MaxUint64}
	for v := uint64(1); v < math.MaxUint64/7; v *= 7 {
		vs = append(vs, v, v-1, v+1)
	}
	for v := range uint64(1000) { // every length of the last chunk, both ends of a nine-digit one
		vs = append(vs, v, 1e9-1-v, 1e9+v, 1e18+v)
	}
	for _, v := range vs {
		if got, want := string(appendUint([]byte("x"), v)), "x"+strconv.FormatUint(v, 10); got != want {
			t.Errorf("appendUint(%d) = %s, want %s", v, got, want)
		}
	}
}

// A follower's acks are written into shared chunks of payload memory: every
// payload must stay as it was published while later steps publish more, and
// a heartbeat step must not allocate (the chunks amortize to under one
// allocation per step).
func TestPublishedPayloadsStay(t *testing.T) {
	n := newTestNet(t, ModeQuorum, "a", "b", "c", "d", "e")
	n.quiet = true
	n.advance(3000, 10)
	leader := n.status("a").Leader
	follower := "a"
	if leader == "a" {
		follower = "b"
	}
	e := n.nodes[follower]
	payloads := heartbeats(leader, 1024)
	in := Input{Now: n.now, Inbound: make([]Message, 1)}
	var out Output
	var kept [][]byte
	var copies [][]byte
	for i := range 300 { // several chunks' worth
		in.Inbound[0] = Message{Topic: "election:g", Payload: payloads[i]}
		in.Now++
		out.Reset()
		e.Step(&in, &out)
		if len(out.Publishes) != 1 {
			t.Fatalf("step %d: want one ack, got %+v", i, out)
		}
		p := out.Publishes[0].Payload
		if want := `,"seq":` + strconv.Itoa(i+2) + `,`; !bytes.Contains(p, []byte(want)) {
			t.Fatalf("step %d: ack %s lacks %s", i, p, want)
		}
		kept, copies = append(kept, p), append(copies, bytes.Clone(p))
	}
	for _, p := range kept {
		_ = append(p, "junk"...) // a host appending to a payload
	}
	for i := range kept {
		if !bytes.Equal(kept[i], copies[i]) {
			t.Fatalf("ack %d changed after it was published: %s, was %s", i, kept[i], copies[i])
		}
	}
	k := 300
	allocs := testing.AllocsPerRun(200, func() {
		in.Inbound[0] = Message{Topic: "election:g", Payload: payloads[k%len(payloads)]}
		in.Now++
		k++
		out.Reset()
		e.Step(&in, &out)
	})
	if allocs != 0 {
		t.Errorf("a heartbeat step allocates %.0f times on average, want under one", allocs)
	}
}

// With ReusePayloads every step writes its payloads over the last step's
// memory: each Output must still be whole (no message over another, however
// many a step publishes) and the steady state must not allocate at all.
func TestReusePayloads(t *testing.T) {
	e := NewEngine()
	e.ReusePayloads()
	var out Output
	const groups = 60 // ~9 KB of election messages per step: several chunks' worth
	in := Input{Now: 1}
	for i := range groups {
		in.Join = append(in.Join, GroupSpec{Config: Config{ID: "a", Group: "g" + strconv.Itoa(i), Mode: ModeQuorum, Members: []string{"a", "b", "c"}}})
	}
	e.Step(&in, &out)
	for round := range 4 {
		in = Input{Now: int64(2 + round)}
		for i := range groups {
			in.Commands = append(in.Commands, Command{Kind: CmdCampaign, Group: "g" + strconv.Itoa(i)})
		}
		out.Reset()
		e.Step(&in, &out)
		if len(out.Publishes) != groups {
			t.Fatalf("round %d: %d publishes, want %d", round, len(out.Publishes), groups)
		}
		for i, p := range out.Publishes {
			var m wireMsg
			if err := decodeWire(p.Payload, &m); err != nil || m.Group != "g"+strconv.Itoa(i) || m.Type != typeElection {
				t.Fatalf("round %d: publish %d is %s (%v)", round, i, p.Payload, err)
			}
		}
	}

	n := newTestNet(t, ModeQuorum, "a", "b", "c", "d", "e")
	n.quiet = true
	n.advance(3000, 10)
	leader := n.status("a").Leader
	follower := "a"
	if leader == "a" {
		follower = "b"
	}
	f := n.nodes[follower]
	f.ReusePayloads()
	payloads := heartbeats(leader, 1024)
	hb := Input{Now: n.now, Inbound: make([]Message, 1)}
	k := 0
	allocs := testing.AllocsPerRun(1, func() {
		for range 1000 {
			hb.Inbound[0] = Message{Topic: "election:g", Payload: payloads[k%len(payloads)]}
			hb.Now++
			k++
			out.Reset()
			f.Step(&hb, &out)
		}
	})
	if allocs != 0 || len(out.Publishes) != 1 || !bytes.Contains(out.Publishes[0].Payload, []byte(`"type":"ack"`)) {
		t.Errorf("1,000 heartbeat steps with ReusePayloads allocated %v times (want none); last output %+v", allocs, out)
	}
}

// Every count on the wire is bounded as terms are (2^53−1), a hold to
// 2^32−1 ms: a message beyond a bound is refused by the decoder, with the
// field named, and changes nothing. A configuration index of 2^64−1 was
// taken, and the next leader's re-stamp wrapped it to 0.
func TestWireNumbersAreBounded(t *testing.T) {
	n := newTestNet(t, ModeQuorum, "a", "b", "c")
	electLeader(t, n)
	n.quiet = false
	before := n.status("a")
	cases := []struct{ field, value, reason string }{
		{"term", "9007199254740992", "term 9007199254740992 exceeds 9007199254740991"},
		{"conf_term", "9007199254740992", "conf_term 9007199254740992 exceeds"},
		{"conf_index", "18446744073709551615", "conf_index 18446744073709551615 exceeds"},
		{"conf_index", "9007199254740992", "conf_index 9007199254740992 exceeds"},
		{"seq", "9007199254740992", "seq 9007199254740992 exceeds"},
		{"epoch", "9007199254740992", "epoch 9007199254740992 exceeds"},
		{"ctr", "9007199254740992", "ctr 9007199254740992 exceeds"},
		{"hold", "4294967296", "hold 4294967296 exceeds 4294967295"},
		{"priority", "4294967296", "priority"},
	}
	for _, tc := range cases {
		p := fmt.Sprintf(`{"type":"heartbeat","group":"g","from":"b","leader":"b","term":1,"%s":%s}`, tc.field, tc.value)
		if tc.field == "term" {
			p = fmt.Sprintf(`{"type":"heartbeat","group":"g","from":"b","leader":"b","term":%s}`, tc.value)
		}
		n.take()
		n.step("a", &Input{Now: n.now, Inbound: []Message{{Topic: Topic("g"), Payload: []byte(p)}}})
		if got := n.take(); !strings.Contains(got, "rejected (malformed: "+tc.reason) {
			t.Errorf("%s %s: want a refusal naming %q, got:\n%s", tc.field, tc.value, tc.reason, got)
		}
	}
	// At the bound, each is a count like any other.
	var m wireMsg
	for _, f := range []string{"conf_term", "conf_index", "seq", "epoch", "ctr"} {
		p := `{"type":"heartbeat","group":"g","from":"b","leader":"b","term":9007199254740991,"` + f + `":9007199254740991,"hold":4294967295}`
		if err := decodeWire([]byte(p), &m); err != nil {
			t.Errorf("%s at the bound: %v", f, err)
		}
	}
	after := n.status("a")
	if after.Term != before.Term || after.Leader != before.Leader || after.ConfIndex != before.ConfIndex || after.Rejected != before.Rejected+uint64(len(cases)) {
		t.Fatalf("state moved: %+v → %+v", before, after)
	}
	// A state file holding a version beyond the bound (written by an older
	// agent) is refused at join, saying what to do.
	cfg := n.config("a")
	var out Output
	err := NewEngine().Join(GroupSpec{Config: cfg, State: GroupState{Group: "g", Term: 3, ConfTerm: 2, ConfIndex: 1<<64 - 1, Members: []string{"a", "b", "c"}}}, 0, &out)
	if err == nil || !strings.Contains(err.Error(), "delete the group's state file") {
		t.Fatalf("join with a configuration index beyond the bound: %v", err)
	}
}
