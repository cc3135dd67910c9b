package core

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash"
	"maps"
	"slices"
	"strconv"
)

// Authenticated elections.
//
// With Config.Auth on, every message a group publishes is signed and every
// message it receives must carry a valid, fresh signature from its sender, or
// it is refused (EventRejected, counted in Status.Rejected and by reason in
// Status.Unsigned/Forged/Replayed) before it can change anything.
//
// # Envelope
//
// A signed message is the ordinary JSON message with three more fields,
// appended after the others, so seed agents and auth-off agents still read it:
//
//	{"type":"heartbeat","group":"g","from":"b","leader":"b","priority":7,"term":9,"seq":4,
//	 "epoch":3,"ctr":118,"sig":"<base64url, no padding>"}
//
// epoch is the sender's boot counter for the group (persisted in
// GroupState.Epoch, raised by one at every join) and ctr counts the messages
// the sender published in the group since that boot (1, 2, ...). sig is an
// ed25519 signature (86 characters) or an HMAC-SHA256 (43 characters).
//
// # Canonical encoding (what is signed)
//
// The signature does not cover the JSON bytes (whose key order, spacing and
// escapes a relay may change) but this byte string, built from the decoded
// message; be16/be32/be64 are big-endian integers and lp(s) = be16(len(s))‖s
// (names are at most MaxIDLen bytes):
//
//	"electcore-auth-v1" 0x00
//	lp(group)            the receiving group's name (not the optional JSON field)
//	lp(type)             "election", "leader", "heartbeat", "vote", "ack", "resign"
//	lp(sender)           "from" (or, for seed-format messages, candidate/leader)
//	be64(term)
//	be64(epoch) be64(ctr)
//	lp(candidate) lp(leader) lp(to)
//	flags                one byte: 1 priority present, 2 pre, 4 granted
//	be32(priority)       0 when absent
//	be64(seq)            the heartbeat/ack sequence, 0 when absent
//
// Every field the protocol reads is covered, with a fixed order and width, so
// two different messages never share an encoding. Only the seed format's
// informational "elected_at" and "timestamp" are not covered: the core never
// reads them.
//
// # Replay protection
//
// A receiver remembers, per sender, the highest epoch seen and, in that
// epoch, the highest ctr and a 64-message window below it. It refuses a
// message from an older epoch, a ctr at or below the window, or a ctr it has
// already seen; a newer epoch resets the window. The window tolerates the
// reordering of a pub/sub bus; a message delayed past 64 later ones from the
// same sender is refused like a lost one, which the protocol tolerates.
// A message in the receiver's own name is checked against its own epoch: one
// from an earlier epoch was sent by an earlier run of this agent and is a
// replay (the bus's echoes of this run's publishes are dropped before any
// check, by their incarnation); only one from this epoch or a later one, from
// another incarnation and correctly signed, is another process with its id.
//
// The epoch makes a restarted sender's counter, which starts again at 1,
// fresh: the sender raises its persisted epoch when it joins and the host
// persists it before anything of that batch (and so anything signed with the
// new epoch) is sent. If the epoch lived only in memory, a restarted sender's
// first 64 messages would look like replays (or, worse, an attacker could
// replay the previous boot's messages with counters above the new ones).
// Deriving it from the term alone would not do either: a restart need not
// change the term. A sender whose persisted state is lost restarts at epoch 1
// and stays refused by members that remember a later epoch until they restart:
// the persisted state is mandatory with auth on, as it is for quorum safety.
//
// The window is not persisted: a receiver that restarts accepts, once each,
// messages captured before its restart. Such a replay is no more than a very
// late or duplicated delivery, which quorum mode tolerates by design (votes
// and acks are bound to the term, and a late heartbeat only makes a follower
// defer longer); see RATIONALE.md.

// Key sizes and bounds.
const (
	MinHMACKey    = 16   // bytes of a shared HMAC key, at least
	MaxHMACKey    = 1024 // and at most
	replayWindow  = 64   // messages per sender tolerated out of order
	authDomain    = "electcore-auth-v1\x00"
	ed25519SigB64 = 86 // base64url length of a 64-byte signature
	hmacSigB64    = 43 // base64url length of a 32-byte MAC
)

// sigEncoding is unpadded base64url that refuses non-zero trailing bits, so
// that one signature has exactly one spelling.
var sigEncoding = base64.RawURLEncoding.Strict()

// Rejection reasons, the prefixes of EventRejected.Reason.
const (
	reasonUnsigned = "auth: unsigned"
	reasonForged   = "auth: bad signature"
	reasonReplayed = "auth: replayed"
)

// normalizeAuth validates the authentication fields of c (whose Members are
// already normalised) and fills in the derived ones.
func (c *Config) normalizeAuth() error {
	switch c.Auth {
	case "", AuthOff:
		c.Auth = AuthOff
		if len(c.Key) > 0 || len(c.MemberKeys) > 0 {
			return configErr("auth", "auth-off-with-keys", string(AuthOff), 0, 0, "auth off but key material given: set auth to "+strconv.Quote(string(AuthHMAC))+" or "+strconv.Quote(string(AuthEd25519)))
		}
		return nil
	case AuthHMAC:
		if len(c.Key) < MinHMACKey || len(c.Key) > MaxHMACKey {
			return configErr("key", "hmac-key-length", strconv.Itoa(len(c.Key)), MinHMACKey, MaxHMACKey, "auth hmac: key of "+strconv.Itoa(len(c.Key))+" bytes, want "+strconv.Itoa(MinHMACKey)+".."+strconv.Itoa(MaxHMACKey))
		}
		if len(c.MemberKeys) > 0 {
			return configErr("member_keys", "hmac-member-keys", "", 0, 0, "auth hmac: member keys given (they are for "+strconv.Quote(string(AuthEd25519))+")")
		}
		c.Key = slices.Clone(c.Key)
		return nil
	case AuthEd25519:
	default:
		return configErr("auth", "auth-unknown", string(c.Auth), 0, 0, "auth "+strconv.Quote(string(c.Auth))+": want "+strconv.Quote(string(AuthOff))+", "+strconv.Quote(string(AuthHMAC))+" or "+strconv.Quote(string(AuthEd25519)))
	}
	var priv ed25519.PrivateKey
	switch len(c.Key) {
	case ed25519.SeedSize:
		priv = ed25519.NewKeyFromSeed(c.Key)
	case ed25519.PrivateKeySize:
		priv = ed25519.NewKeyFromSeed(c.Key[:ed25519.SeedSize])
		if !bytes.Equal(priv, c.Key) {
			return configErr("key", "ed25519-key-corrupt", "", 0, 0, "auth ed25519: private key corrupt (its public half does not match its seed)")
		}
	default:
		return configErr("key", "ed25519-key-length", strconv.Itoa(len(c.Key)), ed25519.SeedSize, ed25519.PrivateKeySize, "auth ed25519: private key of "+strconv.Itoa(len(c.Key))+" bytes, want "+strconv.Itoa(ed25519.PrivateKeySize)+" (or the "+strconv.Itoa(ed25519.SeedSize)+"-byte seed)")
	}
	if len(c.MemberKeys) > MaxMembers {
		return configErr("member_keys", "member-keys-count", strconv.Itoa(len(c.MemberKeys)), 0, MaxMembers, "member_keys: "+strconv.Itoa(len(c.MemberKeys))+" listed, at most "+strconv.Itoa(MaxMembers))
	}
	keys := make(map[string][]byte, len(c.MemberKeys)+1)
	for _, id := range slices.Sorted(maps.Keys(c.MemberKeys)) {
		if err := checkName("member_keys id", id); err != nil {
			return err
		}
		k := c.MemberKeys[id]
		if len(k) != ed25519.PublicKeySize {
			return configErr("member_keys", "member-key-length", id, ed25519.PublicKeySize, ed25519.PublicKeySize, "member_keys "+strconv.Quote(id)+": public key of "+strconv.Itoa(len(k))+" bytes, want "+strconv.Itoa(ed25519.PublicKeySize))
		}
		keys[id] = slices.Clone(k)
	}
	pub := priv.Public().(ed25519.PublicKey)
	if k, ok := keys[c.ID]; !ok {
		keys[c.ID] = pub
	} else if !bytes.Equal(k, pub) {
		return configErr("member_keys", "member-key-not-own", c.ID, 0, 0, "member_keys "+strconv.Quote(c.ID)+": does not match this agent's private key")
	}
	for _, m := range c.Members {
		if _, ok := keys[m]; !ok {
			return configErr("member_keys", "member-key-missing", m, 0, 0, "member_keys: no public key for member "+strconv.Quote(m))
		}
	}
	c.Key, c.MemberKeys = []byte(priv), keys
	return nil
}

// groupAuth is a group's signing key, verifying keys and replay windows.
type groupAuth struct {
	mode AuthMode
	self string // this agent's id
	priv ed25519.PrivateKey
	pubs map[string]ed25519.PublicKey
	mac  hash.Hash // HMAC-SHA256 keyed with the group secret

	epoch uint64 // this agent's epoch: GroupState.Epoch
	ctr   uint64 // the last ctr it sent in this epoch

	peers map[string]*replayState // by sender; only authenticated senders

	buf     []byte // canonical encoding scratch
	sig     [ed25519.SignatureSize]byte
	sum     []byte
	sealMsg wireMsg

	unsigned, forged, replayed uint64
}

type replayState struct {
	epoch, top uint64
	seen       uint64 // bit i: ctr top-i was accepted
}

// initAuth sets up authentication for a group that joined with persisted
// state st: the epoch is raised (and g marked dirty, so that it is persisted
// before anything signed with it is sent). With auth off the persisted epoch
// is only carried along.
func (g *group) initAuth() {
	c := &g.cfg
	if c.Auth == AuthOff || c.Auth == "" {
		return
	}
	a := &groupAuth{mode: c.Auth, self: c.ID, peers: make(map[string]*replayState)}
	if c.Auth == AuthHMAC {
		a.mac = hmac.New(sha256.New, c.Key)
	} else {
		a.priv = ed25519.PrivateKey(c.Key)
		a.setKeys(c.ID, a.priv.Public().(ed25519.PublicKey), g.conf.keys)
	}
	a.epoch = g.epoch // raised by newGroup, persisted before anything is signed
	g.auth = a
}

// setKeys makes keys (the configuration's) and this agent's own public key
// the keys messages are verified with: a member removed from the
// configuration is no longer heard.
func (a *groupAuth) setKeys(self string, own ed25519.PublicKey, keys map[string][]byte) {
	a.pubs = make(map[string]ed25519.PublicKey, len(keys)+1)
	for id, k := range keys {
		a.pubs[id] = k
	}
	a.pubs[self] = own
}

// appendCanonical appends the canonical encoding of m, received in group,
// to b (see the package comment above).
func appendCanonical(b []byte, group string, m *wireMsg) []byte {
	b = append(b, authDomain...)
	b = appendLP(b, group)
	b = appendLP(b, m.Type)
	b = appendLP(b, m.From)
	b = binary.BigEndian.AppendUint64(b, m.Term)
	b = binary.BigEndian.AppendUint64(b, m.Epoch)
	b = binary.BigEndian.AppendUint64(b, m.Ctr)
	b = appendLP(b, m.Candidate)
	b = appendLP(b, m.Leader)
	b = appendLP(b, m.To)
	var flags byte
	var prio uint32
	if m.Priority != nil {
		flags, prio = 1, *m.Priority
	}
	if m.Pre {
		flags |= 2
	}
	if m.Granted {
		flags |= 4
	}
	if m.Handoff {
		flags |= 8
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint32(b, prio)
	b = binary.BigEndian.AppendUint64(b, m.Seq)
	b = binary.BigEndian.AppendUint64(b, m.Inc)
	b = binary.BigEndian.AppendUint64(b, m.LeaderInc)
	b = binary.BigEndian.AppendUint64(b, m.Hold)
	// Membership fields (membership.go).
	flags = 0
	if m.Committed {
		flags |= 1
	}
	if m.Remove {
		flags |= 2
	}
	if m.Pin {
		flags |= 4
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, m.ConfTerm)
	b = binary.BigEndian.AppendUint64(b, m.ConfIndex)
	b = appendLP(b, m.Op)
	b = appendLP(b, m.Member)
	b = appendLP(b, m.Key)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Members)))
	for _, id := range m.Members {
		b = appendLP(b, id)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Keys)))
	for _, k := range m.Keys {
		b = appendLP(b, k)
	}
	// A leader's value, only when present: every field before it has a
	// fixed size or a length prefix, so no message without one encodes as
	// a prefix of one with one, and the signatures of messages without a
	// value are what agents without values make and check.
	if m.ValueVer != 0 || m.Value != "" {
		b = binary.BigEndian.AppendUint64(b, m.ValueVer)
		b = appendLP(b, m.Value)
	}
	return b
}

func appendLP(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// seal signs a payload the group produced: it appends epoch, ctr and sig. The
// payload is the core's own canonical JSON, so it always decodes.
func (a *groupAuth) seal(group string, payload []byte) []byte {
	m := &a.sealMsg
	if err := decodeWire(payload, m); err != nil || len(payload) < 2 {
		return payload // cannot happen; an unsigned message is refused by every receiver
	}
	a.ctr++
	m.Epoch, m.Ctr = a.epoch, a.ctr
	a.buf = appendCanonical(a.buf[:0], group, m)
	var mac []byte
	if a.mode == AuthHMAC {
		a.mac.Reset()
		a.mac.Write(a.buf)
		a.sum = a.mac.Sum(a.sum[:0])
		mac = a.sum
	} else {
		mac = ed25519.Sign(a.priv, a.buf)
	}
	out := make([]byte, 0, len(payload)+40+base64.RawURLEncoding.EncodedLen(len(mac)))
	out = append(out, payload[:len(payload)-1]...)
	out = append(out, `,"epoch":`...)
	out = strconv.AppendUint(out, a.epoch, 10)
	out = append(out, `,"ctr":`...)
	out = strconv.AppendUint(out, a.ctr, 10)
	out = append(out, `,"sig":"`...)
	out = sigEncoding.AppendEncode(out, mac)
	return append(out, `"}`...)
}

// verify checks the signature and freshness of m, received in group. It
// returns "" and records m as seen, or the reason m is refused, counted, with
// nothing changed. Replays are refused before any cryptography, so a flood of
// them costs little.
func (a *groupAuth) verify(group string, m *wireMsg) string {
	if m.Sig == "" {
		a.unsigned++
		return reasonUnsigned
	}
	if m.Epoch == 0 || m.Ctr == 0 {
		a.forged++
		return reasonForged + " (no epoch or counter)"
	}
	// Our own id with an epoch before this run's: a message of an earlier
	// run of this agent (its echoes never reach here), so a replay, however
	// well signed — not another process with our id.
	if m.From == a.self && m.Epoch < a.epoch {
		a.replayed++
		return reasonReplayed + " (epoch " + uitoa(m.Epoch) + " of this agent is over)"
	}
	p := a.peers[m.From]
	if p != nil {
		switch {
		case m.Epoch < p.epoch:
			a.replayed++
			return reasonReplayed + " (epoch " + uitoa(m.Epoch) + " of " + m.From + " is over)"
		case m.Epoch == p.epoch && m.Ctr+replayWindow <= p.top:
			a.replayed++
			return reasonReplayed + " (counter " + uitoa(m.Ctr) + " of " + m.From + " below the window)"
		case m.Epoch == p.epoch && m.Ctr <= p.top && p.seen&(1<<(p.top-m.Ctr)) != 0:
			a.replayed++
			return reasonReplayed + " (counter " + uitoa(m.Ctr) + " of " + m.From + " already seen)"
		}
	}
	if reason := a.check(group, m); reason != "" {
		a.forged++
		return reason
	}
	if p == nil {
		if len(a.peers) >= MaxMembers {
			a.forged++
			return reasonForged + " (too many senders)"
		}
		p = &replayState{}
		a.peers[m.From] = p
	}
	switch {
	case m.Epoch > p.epoch:
		p.epoch, p.top, p.seen = m.Epoch, m.Ctr, 1
	case m.Ctr > p.top:
		shift := m.Ctr - p.top
		if shift >= replayWindow {
			p.seen = 0
		} else {
			p.seen <<= shift
		}
		p.top = m.Ctr
		p.seen |= 1
	default:
		p.seen |= 1 << (p.top - m.Ctr)
	}
	return ""
}

// check verifies m's signature.
func (a *groupAuth) check(group string, m *wireMsg) string {
	want := ed25519SigB64
	if a.mode == AuthHMAC {
		want = hmacSigB64
	}
	if len(m.Sig) != want {
		return reasonForged + " (length)"
	}
	sig, err := sigEncoding.AppendDecode(a.sig[:0], []byte(m.Sig))
	if err != nil {
		return reasonForged + " (encoding)"
	}
	a.buf = appendCanonical(a.buf[:0], group, m)
	if a.mode == AuthHMAC {
		a.mac.Reset()
		a.mac.Write(a.buf)
		a.sum = a.mac.Sum(a.sum[:0])
		if !hmac.Equal(a.sum, sig) {
			return reasonForged
		}
		return ""
	}
	pub, ok := a.pubs[m.From]
	if !ok {
		return reasonForged + " (no key for " + m.From + ")"
	}
	if !ed25519.Verify(pub, a.buf, sig) {
		return reasonForged
	}
	return ""
}

// authStatus adds the authentication counters to s.
func (g *group) authStatus(s *Status) {
	s.Epoch = g.epoch
	if a := g.auth; a != nil {
		s.Auth = a.mode
		s.Unsigned, s.Forged, s.Replayed = a.unsigned, a.forged, a.replayed
	} else {
		s.Auth = AuthOff
	}
}

// Seal signs payload, one JSON wire message, as a member of group would sign
// it: it returns the payload with epoch, ctr and sig appended. mode is
// AuthHMAC (key: the group secret) or AuthEd25519 (key: the sender's private
// key or its seed). Engines sign their own publishes; Seal is for tools,
// tests and simulated adversaries.
func Seal(mode AuthMode, key []byte, group string, payload []byte, epoch, ctr uint64) ([]byte, error) {
	a := &groupAuth{mode: mode, epoch: epoch}
	switch mode {
	case AuthHMAC:
		a.mac = hmac.New(sha256.New, key)
	case AuthEd25519:
		switch len(key) {
		case ed25519.SeedSize:
			a.priv = ed25519.NewKeyFromSeed(key)
		case ed25519.PrivateKeySize:
			a.priv = ed25519.PrivateKey(key)
		default:
			return nil, errors.New("seal: ed25519 key of " + strconv.Itoa(len(key)) + " bytes")
		}
	default:
		return nil, errors.New("seal: auth mode " + strconv.Quote(string(mode)))
	}
	if err := decodeWire(payload, &a.sealMsg); err != nil {
		return nil, errors.New("seal: " + err.Error())
	}
	if ctr == 0 || epoch == 0 {
		return nil, errors.New("seal: epoch and ctr start at 1")
	}
	a.ctr = ctr - 1
	return a.seal(group, payload), nil
}
