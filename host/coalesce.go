package host

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/electcore/electcore/core"
)

// Coalesced traffic (docs/wire.md, "Coalesced heartbeats"). Agents that
// share many groups send each step's heartbeats, acks and election traffic
// of those groups as one envelope per peer set, on that set's own topic,
// instead of one message per group: the envelope carries the cores' own
// payloads, byte for byte, and the receiver hands each to its group as if
// it had come on the group's topic. The cores never see an envelope.
// Hand-offs, configurations and change requests stay on the group's topic,
// and so does every message of a group whose member set is not the one it
// joined with, or towards a member that has not shown recently that it
// reads envelopes on that topic (an older agent never does).

const (
	// PeersTopicPrefix starts the topic of a peer set's envelopes.
	PeersTopicPrefix = "election-peers:"
	envelopeMagic    = "ECENV1"
	// maxEnvelope bounds one envelope's bytes (NATS refuses more than its
	// max_payload, 1 MiB by default); a step's payloads beyond it go in
	// further envelopes.
	maxEnvelope = 256 << 10
	// maxEnvelopeEntries bounds the payloads an envelope may carry.
	maxEnvelopeEntries = maxEnvelope / 16
	// helloMs: an agent sends an empty envelope on each peer topic it
	// takes part in when it sent none there for this long, so its peers
	// know it reads them; capableMs: how long that knowledge lasts.
	helloMs   = 1000
	capableMs = 3 * helloMs
	// maxHeard bounds the peers remembered (senders are not authenticated:
	// a flood of envelopes under made-up names must not grow it forever).
	maxHeard = 4096
)

// PeersTopic is the topic of the envelopes of the groups whose member set
// is members (in any order): "election-peers:" and 16 hex digits of a hash
// of the sorted, de-duplicated ids.
func PeersTopic(members []string) string {
	ids := slices.Clone(members)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	sum := sha256.Sum256([]byte(strings.Join(ids, "\n")))
	return PeersTopicPrefix + hex.EncodeToString(sum[:8])
}

// envEntry is one payload of an envelope and the group it is for.
type envEntry struct {
	Group   string
	Payload []byte
}

// envelope is a decoded envelope: who sent it and what it carries.
type envelope struct {
	From    string
	Entries []envEntry
}

// appendEnvelope encodes an envelope as text (transports such as pilot
// carry only UTF-8 text without NUL): the line "ECENV1 <from> <count>",
// then per entry the line "<group> <length>" and the payload followed by a
// newline; numbers in decimal.
func appendEnvelope(b []byte, from string, entries []envEntry) []byte {
	b = append(b, envelopeMagic...)
	b = append(b, ' ')
	b = append(b, from...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(len(entries)), 10)
	b = append(b, '\n')
	for _, e := range entries {
		b = append(b, e.Group...)
		b = append(b, ' ')
		b = strconv.AppendUint(b, uint64(len(e.Payload)), 10)
		b = append(b, '\n')
		b = append(b, e.Payload...)
		b = append(b, '\n')
	}
	return b
}

var errEnvelope = errors.New("host: malformed envelope")

// decodeEnvelope reads an envelope strictly (scanEnvelope), copying the
// names; the entries' payloads point into p.
func decodeEnvelope(p []byte) (envelope, error) {
	from, spans, err := scanEnvelope(p, nil)
	if err != nil {
		return envelope{}, err
	}
	env := envelope{From: string(from), Entries: make([]envEntry, len(spans))}
	for i, sp := range spans {
		env.Entries[i] = envEntry{Group: string(sp.group), Payload: sp.payload}
	}
	return env, nil
}

// envSpan is one entry of an envelope, within the envelope's bytes.
type envSpan struct{ group, payload []byte }

// scanEnvelope reads an envelope strictly, appending its entries to spans
// without copying anything: a wrong magic, a name that is empty, longer
// than core.MaxIDLen or holding a space or newline, a number with a sign
// or a leading zero, a payload longer than core.MaxPayload, more than
// maxEnvelopeEntries entries, a missing separator or anything after the
// last entry make it malformed, and nothing of it is used (spans is
// returned as it was given).
func scanEnvelope(p []byte, spans []envSpan) (from []byte, _ []envSpan, err error) {
	given := len(spans)
	bad := func() ([]byte, []envSpan, error) { return nil, spans[:given], errEnvelope }
	if len(p) > maxEnvelope || !bytes.HasPrefix(p, []byte(envelopeMagic+" ")) {
		return bad()
	}
	p = p[len(envelopeMagic)+1:]
	// token reads up to sep: a name of 1..core.MaxIDLen bytes.
	token := func(sep byte) ([]byte, bool) {
		i := bytes.IndexByte(p[:min(len(p), core.MaxIDLen+1)], sep)
		if i <= 0 || bytes.ContainsAny(p[:i], " \n") {
			return nil, false
		}
		t := p[:i]
		p = p[i+1:]
		return t, true
	}
	// number reads a decimal up to '\n', at most limit.
	number := func(limit int) (int, bool) {
		i := bytes.IndexByte(p[:min(len(p), 8)], '\n')
		if i <= 0 || (i > 1 && p[0] == '0') {
			return 0, false
		}
		n := 0
		for _, c := range p[:i] {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		if n > limit {
			return 0, false
		}
		p = p[i+1:]
		return n, true
	}
	from, ok := token(' ')
	if !ok {
		return bad()
	}
	n, ok := number(maxEnvelopeEntries)
	if !ok {
		return bad()
	}
	for range n {
		g, ok := token(' ')
		if !ok {
			return bad()
		}
		size, ok := number(core.MaxPayload)
		if !ok || len(p) < size+1 || p[size] != '\n' {
			return bad()
		}
		spans = append(spans, envSpan{group: g, payload: p[:size]})
		p = p[size+1:]
	}
	if len(p) != 0 {
		return bad()
	}
	return from, spans, nil
}

// coalescible reports whether a payload of the core for group g (nil: a
// group not joined) is one that may travel in an envelope: a heartbeat or
// an ack; election traffic (a pre-vote or vote request, an answer, a
// leader's announcement), which an agent joining many groups sends for all
// of them within one election timeout; or a configuration listing exactly
// the members g joined with, the peer set that reads the envelope (a new
// leader sends one until it commits). The core writes "type" first.
// Hand-offs, change requests and configurations of any other member set
// stay on the group's topic: those may be for someone outside the peer set.
func coalescible(g *cgroup, p []byte) bool {
	for _, t := range coalescibleTypes {
		if bytes.HasPrefix(p, t) {
			return true
		}
	}
	return g != nil && bytes.HasPrefix(p, configPrefix) && bytes.Contains(p, g.confMembers)
}

var (
	coalescibleTypes = [][]byte{
		[]byte(`{"type":"heartbeat",`), []byte(`{"type":"ack",`),
		[]byte(`{"type":"election",`), []byte(`{"type":"vote",`), []byte(`{"type":"leader",`),
	}
	configPrefix = []byte(`{"type":"config",`)
)

// swarmKey is one peer topic as one of this agent's ids speaks on it, or
// (heard) as a peer's id was heard on it.
type swarmKey struct{ topic, id string }

// peerSet is a peer topic this agent reads and speaks on as one of its ids.
type peerSet struct {
	key  swarmKey
	sent int64 // when this agent last sent an envelope there
	// plan's memory of the step it is planning: the step's number when it
	// last decided whether the set's groups coalesce, and the decision;
	// the payloads it carries this step.
	planned uint64
	capable bool
	entries []envEntry
}

// cgroup is what the coalescer knows of one joined group.
type cgroup struct {
	id      string
	own     string   // the group's own topic, core.Topic(group)
	topic   string   // PeersTopic of the members it joined with
	members []string // those members, sorted
	same    bool     // its current member set is still that one
	// confMembers is how a configuration of exactly those members lists
	// them on the wire (the core writes them sorted, last but for keys).
	confMembers []byte
	sw          *peerSet // its peer set once this agent reads the topic (ready)
	// lanes are the inbox's lanes of its members (inbox.lanes), so that an
	// envelope's payload is queued without looking its topic up again.
	lanes map[string]*lane
}

// inMsg is a payload an envelope carries for a joined group, as the
// message it stands for on the group's topic, and that group's member
// lanes (cgroup.lanes).
type inMsg struct {
	core.Message
	lanes map[string]*lane
}

// coalescer decides which publishes travel in envelopes and reads the
// envelopes received. It is plain data; the agent holds it under its
// mutex.
type coalescer struct {
	groups map[string]*cgroup
	// swarms: the peer topics this agent reads (subscription live) and
	// speaks on, as each of its ids.
	swarms map[swarmKey]*peerSet
	// heard: when a peer's envelope was last received on a topic.
	heard map[swarmKey]int64
	// spans is receive's scratch (cleared after use: it points into the
	// last envelope).
	spans []envSpan
	// plan's scratch: its steps counted, each publish's group, the swarms
	// the step speaks on, and what it returns (valid until the next plan).
	plans   uint64
	pubGs   []*cgroup
	speak   []*peerSet
	planned []core.Message
	// minGroups: with fewer groups joined, this agent sends no payload in
	// an envelope and no hello (it still reads envelopes), so an agent in a
	// few groups puts on the bus exactly what it did before coalescing.
	minGroups int
}

// coalesceGroups is an agent's minGroups: an agent in a few groups gains
// little, and a listener on one group's topic (electhost status) hears its
// heartbeats as before.
const coalesceGroups = 16

func newCoalescer(minGroups int) *coalescer {
	return &coalescer{groups: map[string]*cgroup{}, swarms: map[swarmKey]*peerSet{}, heard: map[swarmKey]int64{}, minGroups: minGroups}
}

// join registers a group with the members it joined with.
func (c *coalescer) join(group, id string, members []string) *cgroup {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	g := &cgroup{id: id, own: core.Topic(group), topic: PeersTopic(ms), members: ms, same: true,
		confMembers: []byte(`,"members":["` + strings.Join(ms, `","`) + `"]`)}
	g.sw = c.swarms[swarmKey{g.topic, id}]
	c.groups[group] = g
	return g
}

func (c *coalescer) leave(group string) { delete(c.groups, group) }

// config records a group's current member set: its messages travel in
// envelopes only while it is the set it joined with.
func (c *coalescer) config(group string, members []string) {
	g := c.groups[group]
	if g == nil {
		return
	}
	ms := slices.Clone(members)
	slices.Sort(ms)
	g.same = slices.Equal(slices.Compact(ms), g.members)
}

// ready marks topic as read by this agent (its subscription is live): it
// may speak there as id from now on.
func (c *coalescer) ready(topic, id string, now int64) {
	k := swarmKey{topic, id}
	sw := c.swarms[k]
	if sw == nil {
		sw = &peerSet{key: k, sent: now - helloMs} // says hello at once
		c.swarms[k] = sw
	}
}

// coalescing reports whether g's messages may go in envelopes now: this
// agent reads g's peer topic, and every other member was heard there
// within capableMs.
func (c *coalescer) coalescing(g *cgroup, now int64) bool {
	if !g.same || len(g.members) < 2 || len(c.groups) < c.minGroups {
		return false
	}
	if g.sw == nil { // not known ready when it joined
		if g.sw = c.swarms[swarmKey{g.topic, g.id}]; g.sw == nil {
			return false
		}
	}
	return c.capable(g.sw, g.members, now)
}

// capable reports whether every member but sw's own id was heard on sw's
// topic within capableMs. Within one plan it decides once per peer set:
// every group of a set has the same members (those the topic names) and the
// step has one now.
func (c *coalescer) capable(sw *peerSet, members []string, now int64) bool {
	if sw.planned == c.plans {
		return sw.capable
	}
	ok := true
	for _, m := range members {
		if m == sw.key.id {
			continue
		}
		at, heard := c.heard[swarmKey{sw.key.topic, m}]
		if !heard || now-at > capableMs {
			ok = false
			break
		}
	}
	sw.planned, sw.capable = c.plans, ok
	return ok
}

// plan turns one step's publishes, in the core's order, into what goes on
// the bus: the messages that stay on their group's topic, in order, then
// one envelope per peer topic and sender id (more if it would exceed
// maxEnvelope) with every other payload, and an empty envelope (a hello) on
// each topic this agent spoke on no more than helloMs ago. A group's
// payloads go in an envelope only if all of its payloads of the step can,
// so none is reordered against another of its group. What it returns is
// valid until the next plan, and holds no byte of pubs: the payloads are
// copied (into envelopes, or one by one).
func (c *coalescer) plan(now int64, pubs []core.Message) (out []core.Message, coalesced int) {
	c.plans++
	var bare map[string]bool // groups with a payload that must stay on the group's topic
	gs := c.pubGs[:0]
	for _, m := range pubs {
		var g *cgroup
		if group, ok := strings.CutPrefix(m.Topic, "election:"); ok {
			g = c.groups[group]
		}
		gs = append(gs, g)
		if !coalescible(g, m.Payload) {
			if bare == nil {
				bare = map[string]bool{}
			}
			bare[m.Topic] = true
		}
	}
	out = c.planned[:0]
	speak := c.speak[:0]
	for i, m := range pubs {
		g := gs[i]
		if g == nil || bare[m.Topic] || !c.coalescing(g, now) {
			// A copy: the core writes its next step's payloads over this
			// one's (Engine.ReusePayloads), and the publisher may not have
			// sent it by then. An envelope is a copy already.
			out = append(out, core.Message{Topic: m.Topic, Payload: bytes.Clone(m.Payload)})
			continue
		}
		sw := g.sw
		if len(sw.entries) == 0 {
			speak = append(speak, sw)
		}
		sw.entries = append(sw.entries, envEntry{Group: m.Topic[len("election:"):], Payload: m.Payload})
		coalesced++
	}
	for _, sw := range speak {
		out = appendEnvelopes(out, sw.key, sw.entries)
		sw.sent = now
		clear(sw.entries) // it points into the step's payloads
		sw.entries = sw.entries[:0]
	}
	clear(gs)
	clear(speak)
	c.pubGs, c.speak = gs[:0], speak[:0]
	var hellos []*peerSet
	if len(c.groups) >= c.minGroups {
		for _, sw := range c.swarms {
			if now-sw.sent >= helloMs {
				hellos = append(hellos, sw)
			}
		}
	}
	if len(hellos) > 0 { // about once a second: forget the peers gone quiet
		for k, at := range c.heard {
			if now-at > capableMs {
				delete(c.heard, k)
			}
		}
	}
	slices.SortFunc(hellos, func(a, b *peerSet) int {
		return strings.Compare(a.key.topic+"\x00"+a.key.id, b.key.topic+"\x00"+b.key.id)
	})
	for _, sw := range hellos {
		out = append(out, core.Message{Topic: sw.key.topic, Payload: appendEnvelope(nil, sw.key.id, nil)})
		sw.sent = now
	}
	c.planned = out
	return out, coalesced
}

// appendEnvelopes appends the envelopes carrying entries on k's topic,
// each within maxEnvelope bytes and maxEnvelopeEntries entries.
func appendEnvelopes(out []core.Message, k swarmKey, entries []envEntry) []core.Message {
	head := len(envelopeMagic) + 16 + len(k.id)
	for len(entries) > 0 {
		size, n := head, 0
		for n < len(entries) && n < maxEnvelopeEntries {
			s := 16 + len(entries[n].Group) + len(entries[n].Payload)
			if n > 0 && size+s > maxEnvelope {
				break
			}
			size += s
			n++
		}
		out = append(out, core.Message{Topic: k.topic, Payload: appendEnvelope(make([]byte, 0, size), k.id, entries[:n])})
		entries = entries[n:]
	}
	return out
}

// nextHello is when plan next sends a hello (0: none, with no peer topic
// or fewer than minGroups groups).
func (c *coalescer) nextHello() int64 {
	if len(c.groups) < c.minGroups {
		return 0
	}
	var next int64
	for _, sw := range c.swarms {
		if t := sw.sent + helloMs; next == 0 || t < next {
			next = t
		}
	}
	return next
}

// receive reads an envelope that came on topic: it records that its
// sender reads that topic, and appends to msgs each payload for a group
// joined as the message it stands for on the group's topic, in the
// envelope's order; from is the envelope's sender, and every payload
// appended names it (the inbox needs not look). A payload whose sender
// (its "from") is not the envelope's is refused and counted in refused:
// an envelope only carries what its sender could have published on the
// group's topic itself, and the core still checks and authenticates every
// payload.
func (c *coalescer) receive(now int64, topic string, payload []byte, msgs []inMsg) (_ []inMsg, from string, refused int, err error) {
	fromB, spans, err := scanEnvelope(payload, c.spans[:0])
	defer func() { clear(spans); c.spans = spans[:0] }()
	if err != nil {
		return msgs, "", 0, err
	}
	from = string(fromB)
	k := swarmKey{topic, from}
	if _, ok := c.heard[k]; ok || len(c.heard) < maxHeard {
		c.heard[k] = now
	}
	for _, e := range spans {
		g := c.groups[string(e.group)]
		if g == nil {
			continue
		}
		if !bytes.Equal(senderBytes(e.payload), fromB) {
			refused++
			continue
		}
		msgs = append(msgs, inMsg{core.Message{Topic: g.own, Payload: e.payload}, g.lanes})
	}
	return msgs, from, refused, nil
}

// EnvelopeFor returns what an envelope received on a peer topic
// (PeersTopic) carries for group, in order: the payloads a listener on the
// group's own topic would have heard, had they not been coalesced (electhost
// status reads them so). Entries for other groups, and those whose payload
// names another sender than the envelope's, are left out, as agents leave
// them; a malformed envelope is an error and yields nothing.
func EnvelopeFor(p []byte, group string) ([][]byte, error) {
	from, spans, err := scanEnvelope(p, nil)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for _, sp := range spans {
		if string(sp.group) == group && bytes.Equal(senderBytes(sp.payload), from) {
			out = append(out, sp.payload)
		}
	}
	return out, nil
}
