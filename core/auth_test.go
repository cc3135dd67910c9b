package core

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// Deterministic test keys: golden transcripts need stable signatures
// (ed25519 signatures are deterministic).
func testPriv(id string) ed25519.PrivateKey {
	s := sha256.Sum256([]byte("electcore test key " + id))
	return ed25519.NewKeyFromSeed(s[:])
}

func testGroupKey() []byte {
	s := sha256.Sum256([]byte("electcore test group key"))
	return s[:]
}

// authConfig adds mode's key material for id (and the public keys of ids).
func authConfig(c *Config, mode AuthMode, ids []string) {
	c.Auth = mode
	switch mode {
	case AuthHMAC:
		c.Key = testGroupKey()
	case AuthEd25519:
		c.Key = testPriv(c.ID)
		c.MemberKeys = map[string][]byte{}
		for _, id := range ids {
			c.MemberKeys[id] = testPriv(id).Public().(ed25519.PublicKey)
		}
	}
}

// newAuthNet is a testNet whose nodes authenticate with mode.
func newAuthNet(t testing.TB, m Mode, mode AuthMode, ids ...string) *testNet {
	n := newTestNet(t, m, ids...)
	return withTranscriptAuth(n, mode)
}

// captures[n][from+" "+type] is the last message of that type from that node.
var captures = map[*testNet]map[string]Message{}

// withTranscriptAuth restarts every node of n with authentication on and
// records the last publish of each (sender, type).
func withTranscriptAuth(n *testNet, mode AuthMode) *testNet {
	ids := n.ids
	n.cfgHook = func(c *Config) { authConfig(c, mode, ids) }
	caps := map[string]Message{}
	captures[n] = caps
	n.sent = func(from string, m Message) {
		var w wireMsg
		if decodeWire(m.Payload, &w) == nil {
			caps[from+" "+w.Type] = m
		}
	}
	n = restartAll(n)
	n.take()
	return n
}

// signAs signs payload (a JSON message) as id would in group with the given
// epoch and counter.
func signAs(mode AuthMode, id, group string, payload []byte, epoch, ctr uint64) []byte {
	a := &groupAuth{mode: mode, epoch: epoch, ctr: ctr - 1}
	if mode == AuthHMAC {
		a.mac = hmac.New(sha256.New, testGroupKey())
	} else {
		a.priv = testPriv(id)
	}
	return a.seal(group, payload)
}

// authTranscriptCmd runs the transcript commands of authenticated scenarios:
//
//	replay from=X type=T to=Y      deliver again the last T that X published
//	sign as=X to=Y [group=G] [epoch=E] [ctr=N] [mode=M]
//	                               sign each input line as X (test key) for
//	                               group G (default g) and deliver it to Y
func authTranscriptCmd(t *testing.T, d *datadriven.TestData, n *testNet) bool {
	arg := func(key, def string) string {
		v := def
		if d.HasArg(key) {
			d.ScanArgs(t, key, &v)
		}
		return v
	}
	switch d.Cmd {
	case "replay":
		m, ok := captures[n][arg("from", "")+" "+arg("type", "")]
		if !ok {
			d.Fatalf(t, "nothing captured from %s of type %s", arg("from", ""), arg("type", ""))
		}
		fmt.Fprintf(&n.out, "replayed> %s\n", m.Payload)
		n.step(arg("to", ""), &Input{Now: n.now, Inbound: []Message{m}})
	case "sign":
		var epoch, ctr uint64 = 1, 1
		d.MaybeScanArgs(t, "epoch", &epoch)
		d.MaybeScanArgs(t, "ctr", &ctr)
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			p := signAs(AuthMode(arg("mode", string(AuthEd25519))), arg("as", ""), arg("group", "g"), []byte(line), epoch, ctr)
			fmt.Fprintf(&n.out, "signed> %s\n", p)
			n.step(arg("to", ""), &Input{Now: n.now, Inbound: []Message{{Topic: Topic("g"), Payload: p}}})
			ctr++
		}
	default:
		return false
	}
	return true
}

func TestAuthElectionsAndFailover(t *testing.T) {
	for _, mode := range []Mode{ModeQuorum, ModeBully} {
		for _, am := range []AuthMode{AuthEd25519, AuthHMAC} {
			t.Run(string(mode)+"/"+string(am), func(t *testing.T) {
				n := newAuthNet(t, mode, am, "a", "b", "c", "d", "e")
				var unsigned int
				n.sent = func(from string, m Message) {
					if !bytes.Contains(m.Payload, []byte(`"sig":"`)) {
						unsigned++
					}
				}
				n.quiet = true
				old := n.electThenCrashLeader(t)
				// The old leader restarts from its persisted state: a new epoch,
				// so its counter starting again at 1 is not a replay.
				before := n.store[old].Epoch
				n.start(old)
				n.advance(3000, 10)
				for _, id := range n.ids {
					s := n.status(id)
					if s.Rejected != 0 || s.Auth != am || s.Epoch == 0 {
						t.Errorf("%s: %+v", id, s)
					}
				}
				if st := n.store[old]; st.Epoch != before+1 {
					t.Errorf("%s persisted epoch %d after a restart, want %d", old, st.Epoch, before+1)
				}
				if unsigned > 0 {
					t.Errorf("%d unsigned publishes", unsigned)
				}
			})
		}
	}
}

// settledAuthNet returns a settled 3-node group (a, b, c) with auth mode,
// its leader and one follower.
func settledAuthNet(t testing.TB, mode Mode, am AuthMode) (n *testNet, leader, follower string) {
	n = newAuthNet(t, mode, am, "a", "b", "c")
	n.quiet = true
	n.advance(4000, 10)
	ls := n.leaders()
	if len(ls) != 1 {
		t.Fatalf("leaders %v\n%s", ls, n.take())
	}
	leader = strings.Split(ls[0], "@")[0]
	for _, id := range n.ids {
		if id != leader {
			return n, leader, id
		}
	}
	panic("unreachable")
}

// deliverRejected delivers payload to id and requires that it is refused
// with a reason starting with want and changes nothing but the counters.
func deliverRejected(t *testing.T, n *testNet, id string, payload []byte, want string) {
	t.Helper()
	e := n.nodes[id]
	before, _ := e.Status("g")
	var out Output
	e.Step(&Input{Now: n.now, Inbound: []Message{{Topic: Topic("g"), Payload: payload}}}, &out)
	after, _ := e.Status("g")
	if len(out.Events) != 1 || out.Events[0].Kind != EventRejected || !strings.HasPrefix(out.Events[0].Reason, want) {
		t.Fatalf("%s: events %+v, want one rejection %q\npayload %s", id, out.Events, want, payload)
	}
	// An authentication failure names the sender it claims (whose key an
	// operator checks).
	var claimed struct{ From string }
	if json.Unmarshal(payload, &claimed) == nil && claimed.From != "" && strings.HasPrefix(want, "auth:") && out.Events[0].Member != claimed.From {
		t.Fatalf("%s: rejection names sender %q, want %q", id, out.Events[0].Member, claimed.From)
	}
	if len(out.Publishes) > 0 || len(out.Persist) > 0 {
		t.Fatalf("%s: a refused message published %d and persisted %d", id, len(out.Publishes), len(out.Persist))
	}
	if after.Rejected != before.Rejected+1 {
		t.Fatalf("rejected %d → %d", before.Rejected, after.Rejected)
	}
	before.Rejected, before.Unsigned, before.Forged, before.Replayed = 0, 0, 0, 0
	after.Rejected, after.Unsigned, after.Forged, after.Replayed = 0, 0, 0, 0
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("%s: state changed by a refused message:\nbefore %+v\nafter  %+v", id, before, after)
	}
}

func TestAuthRefusesForgeriesAndReplays(t *testing.T) {
	for _, mode := range []Mode{ModeQuorum, ModeBully} {
		for _, am := range []AuthMode{AuthEd25519, AuthHMAC} {
			t.Run(string(mode)+"/"+string(am), func(t *testing.T) {
				n, leader, f := settledAuthNet(t, mode, am)
				var other string
				for _, id := range n.ids {
					if id != leader && id != f {
						other = id
					}
				}
				term := n.status(f).Term
				hb := captures[n][leader+" heartbeat"].Payload
				if hb == nil {
					t.Fatal("no heartbeat captured")
				}
				bogus := strings.Repeat("A", ed25519SigB64)
				if am == AuthHMAC {
					bogus = strings.Repeat("A", hmacSigB64)
				}
				// A forged leader claim of a higher term, in the name of a member.
				claim := fmt.Sprintf(`{"type":"leader","group":"g","from":"%s","leader":"%s","priority":9999,"term":%d,"seq":1,"epoch":9,"ctr":1,"sig":"%s"}`, other, other, term+5, bogus)
				deliverRejected(t, n, f, []byte(claim), reasonForged)
				// The same claim in the seed's unsigned format.
				deliverRejected(t, n, f, []byte(fmt.Sprintf(`{"type":"leader","leader":"%s","term":%d,"elected_at":"2026-01-01T00:00:00Z"}`, other, term+5)), reasonUnsigned)
				// A forged vote for the follower, and a forged vote request.
				vote := fmt.Sprintf(`{"type":"vote","group":"g","from":"%s","priority":1,"candidate":"%s","term":%d,"granted":true,"epoch":3,"ctr":7,"sig":"%s"}`, other, f, term+1, bogus)
				deliverRejected(t, n, f, []byte(vote), reasonForged)
				deliverRejected(t, n, leader, []byte(vote), reasonForged)
				// The leader's own heartbeat, replayed.
				deliverRejected(t, n, f, hb, reasonReplayed)
				// A message the leader signed for another group.
				var w wireMsg
				if err := decodeWire(hb, &w); err != nil {
					t.Fatal(err)
				}
				// A genuine heartbeat with its term raised (and its counter
				// moved on, or it is refused as a replay before any crypto).
				fresh := bytes.Replace(hb, []byte(fmt.Sprintf(`"ctr":%d`, w.Ctr)), []byte(fmt.Sprintf(`"ctr":%d`, w.Ctr+1000)), 1)
				deliverRejected(t, n, f, fresh, reasonForged)
				tampered := bytes.Replace(hb, []byte(fmt.Sprintf(`"term":%d`, term)), []byte(fmt.Sprintf(`"term":%d`, term+1)), 1)
				deliverRejected(t, n, f, tampered, reasonReplayed)
				plain := fmt.Sprintf(`{"type":"heartbeat","from":"%s","leader":"%s","priority":1,"term":%d,"seq":999}`, leader, leader, term+1)
				deliverRejected(t, n, f, signAs(am, leader, "other-group", []byte(plain), w.Epoch, w.Ctr+10), reasonForged)
				if am == AuthEd25519 {
					// An outsider with a key of her own.
					out := `{"type":"leader","group":"g","from":"mallory","leader":"mallory","priority":1,"term":99}`
					deliverRejected(t, n, f, signAs(am, "mallory", "g", []byte(out), 1, 1), reasonForged+" (no key")
					// A member's message signed with another member's key.
					deliverRejected(t, n, f, signAs(am, other, "g", []byte(plain), w.Epoch+1, 1), reasonForged)
				} else {
					// Signed with another group key.
					a := &groupAuth{mode: AuthHMAC, mac: hmac.New(sha256.New, []byte("another sixteen+ byte key")), epoch: w.Epoch + 1}
					deliverRejected(t, n, f, a.seal("g", []byte(plain)), reasonForged)
				}
				// Padding and encoding games with a genuine signature.
				deliverRejected(t, n, f, bytes.Replace(fresh, []byte(`"sig":"`), []byte(`"sig":"=`), 1), reasonForged)
				s := n.status(f)
				if s.Leader != leader || s.Term != term || s.Forged == 0 || s.Replayed == 0 || s.Unsigned != 1 {
					t.Fatalf("follower %+v", s)
				}
				// The swarm carries on with the same leader and term.
				n.advance(3000, 10)
				if ls := n.leaders(); len(ls) != 1 || ls[0] != fmt.Sprintf("%s@%d", leader, term) {
					t.Fatalf("leaders %v after the attack, want %s@%d", ls, leader, term)
				}
			})
		}
	}
}

// A member that lost its persisted state restarts at epoch 1, which members
// that remember a later epoch refuse: the state is mandatory with auth on.
func TestAuthLostStateIsRefused(t *testing.T) {
	n, leader, f := settledAuthNet(t, ModeQuorum, AuthEd25519)
	n.start(f) // epoch 2
	n.advance(1000, 10)
	if s := n.status(leader); s.Replayed != 0 {
		t.Fatalf("a restart with state was refused: %+v", s)
	}
	delete(n.store, f)
	n.start(f) // epoch 1 again
	n.advance(3000, 10)
	if s := n.status(leader); s.Replayed == 0 {
		t.Fatalf("a sender that lost its epoch was heard: %+v", s)
	}
}

// Out-of-order delivery within the window is accepted once.
func TestAuthReplayWindow(t *testing.T) {
	a := &groupAuth{mode: AuthHMAC, mac: hmac.New(sha256.New, testGroupKey()), peers: map[string]*replayState{}}
	msg := func(epoch, ctr uint64) *wireMsg {
		p := signAs(AuthHMAC, "b", "g", []byte(`{"type":"heartbeat","group":"g","from":"b","leader":"b","term":1}`), epoch, ctr)
		var m wireMsg
		if err := decodeWire(p, &m); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	for _, c := range []struct {
		epoch, ctr uint64
		want       string
	}{
		{1, 10, ""}, {1, 10, reasonReplayed}, {1, 5, ""}, {1, 5, reasonReplayed}, {1, 11, ""},
		{1, 100, ""}, {1, 37, ""}, {1, 36, reasonReplayed}, {1, 37, reasonReplayed}, {1, 99, ""},
		{2, 1, ""}, {1, 101, reasonReplayed}, {2, 1, reasonReplayed}, {2, 2, ""}, {2, 65, ""}, {2, 1, reasonReplayed},
	} {
		got := a.verify("g", msg(c.epoch, c.ctr))
		if !strings.HasPrefix(got, c.want) || (c.want == "") != (got == "") {
			t.Fatalf("epoch %d ctr %d: %q, want %q", c.epoch, c.ctr, got, c.want)
		}
	}
}

func TestAuthConfigValidation(t *testing.T) {
	ids := []string{"a", "b", "c"}
	good := func(am AuthMode) Config {
		c := Config{ID: "a", Group: "g", Members: ids}
		authConfig(&c, am, ids)
		return c
	}
	for _, am := range []AuthMode{AuthEd25519, AuthHMAC} {
		if err := good(am).Validate(); err != nil {
			t.Fatalf("%s: %v", am, err)
		}
	}
	seedOnly := good(AuthEd25519)
	seedOnly.Key = seedOnly.Key[:32]
	delete(seedOnly.MemberKeys, "a") // derived from the key
	if err := seedOnly.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{
		"key with auth off": func() Config { c := good(AuthHMAC); c.Auth = ""; return c }(),
		"unknown mode":      func() Config { c := good(AuthHMAC); c.Auth = "rsa"; return c }(),
		"short hmac key":    func() Config { c := good(AuthHMAC); c.Key = c.Key[:8]; return c }(),
		"hmac member keys":  func() Config { c := good(AuthHMAC); c.MemberKeys = good(AuthEd25519).MemberKeys; return c }(),
		"bad private key":   func() Config { c := good(AuthEd25519); c.Key = c.Key[:40]; return c }(),
		"corrupt private key": func() Config {
			c := good(AuthEd25519)
			c.Key = slices.Clone(c.Key)
			c.Key[63] ^= 1
			return c
		}(),
		"missing member key": func() Config { c := good(AuthEd25519); delete(c.MemberKeys, "c"); return c }(),
		"short public key":   func() Config { c := good(AuthEd25519); c.MemberKeys["b"] = c.MemberKeys["b"][:31]; return c }(),
		"own key mismatch":   func() Config { c := good(AuthEd25519); c.MemberKeys["a"] = c.MemberKeys["b"]; return c }(),
		"bad key id":         func() Config { c := good(AuthEd25519); c.MemberKeys["x y"] = c.MemberKeys["b"]; return c }(),
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// Every field of wireMsg the protocol reads must be in the canonical
// encoding: a new field added to the wire format without it would be
// unauthenticated.
func TestCanonicalCoversWireFields(t *testing.T) {
	covered := map[string]bool{
		"Type": true, "Group": true, "From": true, "Candidate": true, "Leader": true, "To": true,
		"Priority": true, "Term": true, "Seq": true, "Inc": true, "LeaderInc": true, "Hold": true, "Pre": true, "Granted": true, "Handoff": true,
		"Epoch": true, "Ctr": true,
		"ConfTerm": true, "ConfIndex": true, "Committed": true, "Remove": true, "Pin": true, "Members": true, "Keys": true,
		"Op": true, "Member": true, "Key": true, "ValueVer": true, "Value": true,
	}
	notCovered := map[string]string{
		"ElectedAt": "informational, never read", "Timestamp": "informational, never read",
		"Sig": "the signature itself", "prio": "storage for Priority",
		// Stripping a signed "hold":0 only makes its receiver wait the
		// longest hold; signing the presence would make older receivers
		// refuse every resign (they sign no such bit).
		"holdSet":   "whether Hold was present",
		"groupHint": "set by the receiver, not from the wire",
		"named":     "which names parseWire checked, not from the wire",
	}
	typ := reflect.TypeFor[wireMsg]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		if !covered[name] && notCovered[name] == "" {
			t.Errorf("wireMsg.%s is neither signed (appendCanonical) nor listed as unsigned here", name)
		}
	}
	// Each covered field changes the encoding.
	base := wireMsg{Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1}
	enc := func(m wireMsg) string { return string(appendCanonical(nil, "g", &m)) }
	seen := map[string]string{enc(base): "base"}
	p := uint32(0)
	for name, m := range map[string]wireMsg{
		"type": {Type: "ack", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1},
		"from": {Type: "vote", From: "c", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1},
		// Length prefixes: moving a byte between adjacent strings changes it.
		"shift":      {Type: "vote", From: "b", Candidate: "", Leader: "a", Term: 2, Epoch: 1, Ctr: 1},
		"to":         {Type: "vote", From: "b", Candidate: "a", To: "a", Term: 2, Epoch: 1, Ctr: 1},
		"term":       {Type: "vote", From: "b", Candidate: "a", Term: 3, Epoch: 1, Ctr: 1},
		"epoch":      {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 2, Ctr: 1},
		"ctr":        {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 2},
		"priority":   {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Priority: &p},
		"pre":        {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Pre: true},
		"granted":    {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Granted: true},
		"seq":        {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Seq: 1},
		"inc":        {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Inc: 1},
		"handoff":    {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Handoff: true},
		"leader_inc": {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, LeaderInc: 1},
		"hold":       {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Hold: 1},
		"conf_term":  {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, ConfTerm: 1},
		"conf_index": {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, ConfIndex: 1},
		"committed":  {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Committed: true},
		"remove":     {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Remove: true},
		"pin":        {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Pin: true},
		"members":    {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Members: []string{"a"}},
		"members2":   {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Members: []string{"a", "b"}},
		"keys":       {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Keys: []string{"a"}},
		"op":         {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Op: "add"},
		"member":     {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Member: "add"},
		"key":        {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, Key: "add"},
		"value_ver":  {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, ValueVer: 1},
		"value":      {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, ValueVer: 1, Value: "x"},
		"value2":     {Type: "vote", From: "b", Candidate: "a", Term: 2, Epoch: 1, Ctr: 1, ValueVer: 2, Value: "x"},
	} {
		e := enc(m)
		if prev, dup := seen[e]; dup {
			t.Errorf("%s encodes like %s", name, prev)
		}
		seen[e] = name
	}
	if enc(base) == string(appendCanonical(nil, "h", &base)) {
		t.Error("the group is not covered")
	}
}

// With auth off, signed messages are read like any other (mixed swarms while
// keys are rolled out), and nothing is signed.
func TestAuthOffAcceptsSigned(t *testing.T) {
	n := newTestNet(t, ModeQuorum, "a", "b", "c")
	plain := `{"type":"heartbeat","group":"g","from":"b","leader":"b","priority":1,"term":3,"seq":1}`
	p := signAs(AuthEd25519, "b", "g", []byte(plain), 1, 1)
	var out Output
	n.nodes["a"].Step(&Input{Now: 0, Inbound: []Message{{Topic: Topic("g"), Payload: p}}}, &out)
	if s := n.status("a"); s.Leader != "b" || s.Term != 3 || s.Auth != AuthOff {
		t.Fatalf("%+v", s)
	}
	for _, m := range out.Publishes {
		if bytes.Contains(m.Payload, []byte(`"sig"`)) {
			t.Fatalf("signed with auth off: %s", m.Payload)
		}
	}
}

func TestNestingLimits(t *testing.T) {
	deep := `{"type":"heartbeat","from":"b","leader":"b","term":1,"x":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + "}"
	var m wireMsg
	if err := decodeWire([]byte(deep), &m); err == nil || !strings.Contains(err.Error(), "nested") {
		t.Fatalf("deep JSON: %v", err)
	}
	// Brackets inside strings do not count.
	ok := `{"type":"heartbeat","from":"b","leader":"b","term":1,"x":"` + strings.Repeat("[", 100) + `\"[["}`
	if err := decodeWire([]byte(ok), &m); err != nil {
		t.Fatalf("brackets in a string: %v", err)
	}
}
