package sim

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/electcore/electcore/core"
)

// The adversary (Options.Adversary) is one more party on the bus, "mallory":
// not a member, holding no member's key, but able to read every message and
// to publish anything, at any time, to anyone, as anyone. Every half to one
// and a half heartbeat intervals, for the whole run, it does one of:
//
//   - forge leader and heartbeat claims of a higher term in a member's name
//     (or its own);
//   - forge a vote storm: granted votes and pre-votes from every member for
//     two different candidates in the same new term (quorum), or the leader's
//     resignation in favour of two different members (bully). Without
//     authentication this alone elects two leaders in one term;
//   - forge acks for the leader, vote requests and resignations;
//   - replay messages it captured, to one node or to all;
//   - flood: dozens of replays and forgeries at once.
//
// With authentication on, forgeries come unsigned, with a random signature,
// signed with mallory's own key (ed25519) or a wrong group key (hmac), or
// with a genuine message's epoch, counter and signature spliced onto a
// changed body. They must all be refused: every invariant, and the liveness
// bound, must hold as without the adversary. One replay gets through: to a
// node that restarted after the original was sent (the core's replay window
// is not persisted, see core/auth.go), once per message. That is a delivery
// delayed without bound; the checker counts it as a late delivery (as it
// does any message delayed past the normal bound), and the adversary sends
// such replays only in the fault phase, since no election protocol can
// promise liveness against them: safety is what is checked there.
type adversary struct {
	w      *world
	r      *rand.Rand
	caps   []capture // ring of captured payloads
	next   int
	term   uint64 // highest term seen on the bus
	leader string // the last member that claimed leadership
	seq    uint64 // the last heartbeat seq it claimed
	ids    []string
	key    []byte // mallory's own ed25519 key, or a wrong group key

	confIndex uint64 // the leader's configuration index, from its last heartbeat
}

type capture struct {
	payload []byte
	sentAt  int64
	lives   []int // every node's life counter when it was sent
}

const adversaryID = "mallory"

// authKeys fills cfg's key material for the node cfg.ID, derived from the
// seed, when the simulated swarm authenticates. With an adversary and no
// Config.Auth, authentication defaults to HMAC (cheap enough for thousands
// of seeds; ed25519 is exercised with Config.Auth = core.AuthEd25519).
func (s *setup) authKeys(cfg *core.Config) {
	if cfg.Auth == "" && s.Adversary {
		cfg.Auth = core.AuthHMAC
	}
	switch cfg.Auth {
	case core.AuthHMAC:
		cfg.Key = simKey(s.Seed, "group")
		cfg.MemberKeys = nil
	case core.AuthEd25519:
		cfg.Key = ed25519.NewKeyFromSeed(simKey(s.Seed, "node "+cfg.ID))
		cfg.MemberKeys = make(map[string][]byte, len(s.ids))
		for _, id := range s.ids {
			cfg.MemberKeys[id] = ed25519.NewKeyFromSeed(simKey(s.Seed, "node "+id)).Public().(ed25519.PublicKey)
		}
	}
}

func simKey(seed uint64, what string) []byte {
	h := sha256.New()
	h.Write([]byte("electcore sim key\x00"))
	h.Write(binary.BigEndian.AppendUint64(nil, seed))
	h.Write([]byte(what))
	return h.Sum(nil)
}

func newAdversary(w *world) *adversary {
	a := &adversary{w: w, r: rand.New(rand.NewPCG(w.Seed, 0xadd5a7)), ids: w.ids}
	if w.Outsider {
		a.r = rand.New(rand.NewPCG(w.Seed, 0x6f7574))
		w.at(w.cfg.HeartbeatMs, a.outsiderAct)
		return a
	}
	if w.cfg.Auth == core.AuthEd25519 {
		a.key = ed25519.NewKeyFromSeed(simKey(w.Seed, "mallory"))
	} else {
		a.key = simKey(w.Seed, "not the group key")
	}
	w.at(w.cfg.HeartbeatMs, a.act)
	return a
}

// outsiderAct: with authentication off anyone may speak as a member, and
// so depose a leader, but no one message may take a member or the group
// down past the faults. Every half to one and a half heartbeat intervals of
// the fault phase the outsider sends one of
//
//   - one to four acks in members' names, each 2^31 to 2^32 terms ahead:
//     before terms were bounded per message, one moved a member's term that
//     far, and a flood brought every member to the last term (InvTermBound
//     judges it; honest terms are never that far ahead here, so the core
//     refuses them all and they disturb nothing);
//   - a newer configuration under a non-member's name, listing only a
//     made-up member: adopted, it left every member a non-voter, with no
//     leader ever again (liveness judges it).
//
// Not here: resigns forged in the leader's name. They carry the leader's
// vote for its successor, so with authentication off they can elect two
// leaders of one term and overlap leases (the threat model says so).
func (a *adversary) outsiderAct() {
	w := a.w
	if !w.inFaultPhase() {
		return
	}
	hb := w.cfg.HeartbeatMs
	w.at(w.now+hb/2+a.r.Int64N(hb+1), a.outsiderAct)
	if a.r.IntN(2) == 0 {
		for range 1 + a.r.IntN(4) {
			a.toAll(fmt.Sprintf(`{"type":"ack","group":"g","from":"%s","leader":"%s","term":%d}`,
				a.member(), a.member(), a.term+1<<31+a.r.Uint64N(1<<31)))
		}
		return
	}
	a.toAll(fmt.Sprintf(`{"type":"config","group":"g","from":"%s","conf_term":%d,"conf_index":%d,"members":["zz"]}`,
		adversaryID, a.term, a.confIndex+1+a.r.Uint64N(1000)))
}

func (a *adversary) authOn() bool {
	return a.w.cfg.Auth == core.AuthHMAC || a.w.cfg.Auth == core.AuthEd25519
}

// observe captures an honest publish.
func (a *adversary) observe(from *node, payload []byte, p *pubSent) {
	c := capture{payload: payload, sentAt: a.w.now, lives: make([]int, len(a.w.nodes))}
	for i, n := range a.w.nodes {
		c.lives[i] = n.life
	}
	if len(a.caps) < 256 {
		a.caps = append(a.caps, c)
	} else {
		a.caps[a.next] = c
		a.next = (a.next + 1) % len(a.caps)
	}
	if !p.ok {
		return
	}
	m := &p.m
	a.term = max(a.term, m.Term)
	if m.Type == "leader" || m.Type == "heartbeat" {
		a.leader, a.confIndex = from.id, m.ConfIndex
		if i := strings.Index(string(payload), `"seq":`); i >= 0 {
			var s uint64
			fmt.Sscan(string(payload[i+len(`"seq":`):]), &s)
			a.seq = s
		}
	}
}

// act does one thing and schedules the next.
func (a *adversary) act() {
	w := a.w
	hb := w.cfg.HeartbeatMs
	w.at(w.now+hb/2+a.r.Int64N(hb+1), a.act)
	switch a.r.IntN(7) {
	case 0:
		a.forgeClaims()
	case 1, 2:
		a.voteStorm()
	case 3:
		a.forgeOther()
	case 4, 5:
		for range 1 + a.r.IntN(8) {
			a.replay()
		}
	case 6:
		for range 20 + a.r.IntN(41) {
			switch a.r.IntN(3) {
			case 0:
				a.replay()
			case 1:
				a.forgeClaims()
			default:
				a.forgeOther()
			}
		}
	}
}

func (a *adversary) member() string { return a.ids[a.r.IntN(len(a.ids))] }

func (a *adversary) forgeClaims() {
	for range 1 + a.r.IntN(3) {
		from := a.member()
		if a.r.IntN(4) == 0 {
			from = adversaryID
			if !a.authOn() && len(a.w.cfg.Members) > 0 {
				from = a.member() // an outsider's own claim would only be refused as a non-member
			}
		}
		typ := "leader"
		if a.r.IntN(2) == 0 {
			typ = "heartbeat"
		}
		p := fmt.Sprintf(`{"type":"%s","group":"g","from":"%s","leader":"%s","priority":%d,"term":%d,"seq":%d}`,
			typ, from, from, 1+a.r.Uint32N(1<<31), a.term+uint64(a.r.IntN(4)), 1+a.r.IntN(1000))
		a.toAll(p)
	}
}

// voteStorm tries to elect two leaders in one term.
func (a *adversary) voteStorm() {
	x, y := a.member(), a.member()
	if len(a.ids) > 1 {
		for y == x {
			y = a.member()
		}
	}
	if a.w.Mode == core.ModeBully {
		l := a.leader
		if l == "" {
			l = a.member()
		}
		for _, to := range []string{x, y} {
			if to != l {
				a.toAll(fmt.Sprintf(`{"type":"resign","group":"g","from":"%s","leader":"%s","term":%d,"to":"%s"}`, l, l, a.term, to))
			}
		}
		return
	}
	t := a.term + 1
	for _, c := range []string{x, y} {
		for _, v := range a.ids {
			if v == c {
				continue
			}
			a.toAll(fmt.Sprintf(`{"type":"vote","group":"g","from":"%s","priority":1,"candidate":"%s","term":%d,"pre":true,"granted":true}`, v, c, t))
			a.toAll(fmt.Sprintf(`{"type":"vote","group":"g","from":"%s","priority":1,"candidate":"%s","term":%d,"granted":true,"handoff":true}`, v, c, t))
		}
	}
}

// forgeOther forges acks for the leader, a vote request or a resignation.
func (a *adversary) forgeOther() {
	switch a.r.IntN(3) {
	case 0:
		if a.w.Mode == core.ModeBully || a.leader == "" {
			return
		}
		for _, v := range a.ids {
			if v != a.leader {
				a.toAll(fmt.Sprintf(`{"type":"ack","group":"g","from":"%s","priority":1,"leader":"%s","term":%d,"seq":%d}`, v, a.leader, a.term, a.seq))
			}
		}
	case 1:
		c := a.member()
		a.toAll(fmt.Sprintf(`{"type":"election","group":"g","from":"%s","candidate":"%s","priority":%d,"term":%d%s}`,
			c, c, a.r.Uint32(), a.term+1, []string{"", `,"pre":true`}[a.r.IntN(2)]))
	default:
		l := a.member()
		a.toAll(fmt.Sprintf(`{"type":"resign","group":"g","from":"%s","leader":"%s","term":%d,"to":"%s"}`, l, l, a.term, a.member()))
	}
}

// toAll sends a forgery, dressed for the swarm's auth mode, to every node.
func (a *adversary) toAll(plain string) {
	p := a.dress([]byte(plain))
	for i := range a.w.nodes {
		a.send(i, p)
	}
}

// dress turns a plain forgery into what mallory can make of a signed one.
func (a *adversary) dress(p []byte) []byte {
	if !a.authOn() {
		return p
	}
	epoch, ctr := 1+a.r.Uint64N(8), 1+a.r.Uint64N(1<<20)
	body := p[:len(p)-1]
	switch a.r.IntN(4) {
	case 0:
		return p // unsigned
	case 1: // a random signature of the right length
		n := 86
		if a.w.cfg.Auth == core.AuthHMAC {
			n = 43
		}
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		sig := make([]byte, n)
		for i := range sig {
			sig[i] = alphabet[a.r.IntN(64)]
		}
		return fmt.Appendf(nil, `%s,"epoch":%d,"ctr":%d,"sig":"%s"}`, body, epoch, ctr, sig)
	case 2: // signed with mallory's own key or a wrong group key
		if s, err := core.Seal(a.w.cfg.Auth, a.key, "g", p, epoch, ctr); err == nil {
			return s
		}
		return p
	default: // a genuine epoch, counter and signature spliced on
		if len(a.caps) == 0 {
			return p
		}
		g := a.caps[a.r.IntN(len(a.caps))].payload
		i := strings.Index(string(g), `,"epoch":`)
		if i < 0 {
			return p
		}
		return append(append([]byte(nil), body...), g[i:]...)
	}
}

// replay sends a captured message again, to one node or to all.
func (a *adversary) replay() {
	if len(a.caps) == 0 {
		return
	}
	c := a.caps[a.r.IntN(len(a.caps))]
	if a.r.IntN(2) == 0 {
		a.sendReplay(a.r.IntN(len(a.w.nodes)), c)
		return
	}
	for i := range a.w.nodes {
		a.sendReplay(i, c)
	}
}

func (a *adversary) sendReplay(to int, c capture) {
	w := a.w
	restarted := w.nodes[to].life != c.lives[to]
	if restarted && a.authOn() && !w.inFaultPhase() {
		// A node that restarted since the original was sent has a new
		// replay window and accepts it once: a delivery delayed without
		// bound, against which no election protocol can promise liveness
		// (a dead leader's captured heartbeats, replayed one by one, keep
		// a restarted follower waiting). Safety must hold, and is checked
		// in the fault phase; liveness is checked against the rest.
		return
	}
	// Accepted, a replay is a late duplicate: without authentication always,
	// with it only by a node that restarted since (its window is new).
	if !a.authOn() || restarted {
		w.markDirty(c.sentAt, w.now+w.dmax)
	}
	a.send(to, c.payload)
}

// send delivers p to node to after a normal delay, unless the node is down
// or the broker is out when it arrives.
func (a *adversary) send(to int, p []byte) {
	w := a.w
	w.res.Injected++
	d := 1 + a.r.Int64N(max(w.dmax, 1))
	w.seq++
	w.q.push(event{at: w.now + d, seq: w.seq, kind: evDeliver, node: int32(to), from: -1, sentAt: w.now, payload: p})
}

// deliverForged hands an adversary's message to its recipient.
func (w *world) deliverForged(ev *event) {
	n := w.nodes[ev.node]
	if !n.up || w.outage > 0 {
		return
	}
	n.in = append(n.in, core.Message{Topic: "election:g", Payload: ev.payload})
	w.touch(n)
}
