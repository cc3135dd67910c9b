package sim

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/electcore/electcore/core"
)

// Invariant names, as reported in Violation.Invariant.
const (
	InvElectionSafety = "election-safety"   // two leaders in one term
	InvLease          = "lease-exclusivity" // two valid leases at one real instant
	InvTermDecrease   = "term-decreased"    // a node's persisted term went down
	InvDoubleVote     = "double-vote"       // two different votes in one term
	InvPersist        = "persist-before-send"
	InvLiveness       = "liveness"   // no agreed leader within the bound after the faults
	InvWire           = "wire"       // the core rejected a payload the core produced
	InvStepError      = "step-error" // the Stepper failed
	// InvLeadership: a node acted as a follower or candidate (acked,
	// granted a vote, campaigned) while its application, told by the events,
	// still believed it led; or acted as a leader (any event, a heartbeat,
	// a resign) in a step it began with its lease already over.
	InvLeadership = "leadership-events"
	// InvConfig: a configuration invariant broke (membership.go): two
	// member sets under one version, a persisted version gone back, two
	// configurations committed at one index or consecutive ones differing
	// by more than one member, a committed configuration lost by a later
	// leader, a leader or candidate outside its configuration, a
	// configuration reported committed that no majority of it holds.
	InvConfig = "configuration"
	// InvDrained: a drained node (Options.Drain) led at the end of a step
	// or asked for (pre-)votes.
	InvDrained = "drained"
	// InvTermBound: a node's term moved further than messages can move it:
	// more than MaxTermStep+1 per message or step it took, plus a thousand
	// terms a millisecond (core.MaxTermStep). Before that bound one forged
	// message moved a term by 2^32, and a flood spent the term space.
	InvTermBound = "term-bound"
	// InvDuplicateID: with authentication on, a node reported another
	// process with a member's id (core.EventDuplicateID). The simulator
	// never runs two processes with one id and the adversary cannot sign,
	// so the report came from a replay: a member's own message of an
	// earlier run once made it report itself, and exit.
	InvDuplicateID = "duplicate-id"
)

// pubSent is a published payload as parsePub read it.
type pubSent struct {
	m  pubMsg
	ok bool
}

// pubMsg is the part of a wire message the checker reads.
type pubMsg struct {
	Type, Candidate, To string
	Term                uint64
	Pre, Granted        bool
	ConfTerm, ConfIndex uint64
	Members             []string // config messages
}

// parsePub reads a payload the core published. The core writes one flat
// JSON object of checked names, numbers and flags, which one pass reads
// (parsePubFast); anything else (an escape, a nested value, a repeated
// key) is read by parsePubSlow, which searches for each key.
func parsePub(p []byte) (m pubMsg, ok bool) {
	if m, ok, done := parsePubFast(p); done {
		return m, ok
	}
	return parsePubSlow(p)
}

// Known types, so that the common ones cost no allocation.
var pubTypes = [...]string{"heartbeat", "ack", "vote", "election", "leader", "resign", "config", "change"}

// parsePubFast reads p in one pass when it is a flat object whose strings
// have no escapes: what parsePubSlow would read from it. done is false if p
// is anything else.
func parsePubFast(p []byte) (m pubMsg, ok, done bool) {
	n := len(p)
	if n < 2 || p[0] != '{' || p[n-1] != '}' {
		return m, false, false
	}
	// str reads the escape-free string that starts at p[i] (a quote) and
	// returns its end (after the closing quote).
	str := func(i int) (int, bool) {
		for j := i + 1; j < n; j++ {
			switch c := p[j]; {
			case c == '"':
				return j + 1, true
			case c == '\\' || c < 0x20:
				return 0, false
			}
		}
		return 0, false
	}
	var seen uint8
	once := func(bit uint8) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	}
	i := 1
	if p[i] == '}' {
		return m, false, false
	}
	for {
		if p[i] != '"' {
			return m, false, false
		}
		ke, ok := str(i)
		if !ok || ke >= n || p[ke] != ':' {
			return m, false, false
		}
		key := p[i+1 : ke-1]
		i = ke + 1
		if i >= n {
			return m, false, false
		}
		switch c := p[i]; {
		case c == '"':
			ve, ok := str(i)
			if !ok {
				return m, false, false
			}
			v := p[i+1 : ve-1]
			i = ve
			var dst *string
			var bit uint8
			switch string(key) {
			case "type":
				dst, bit = &m.Type, 1
			case "candidate":
				dst, bit = &m.Candidate, 2
			case "to":
				dst, bit = &m.To, 4
			case "term", "conf_term", "conf_index", "members", "pre", "granted":
				return m, false, false
			}
			if dst != nil {
				if !once(bit) {
					return m, false, false
				}
				*dst = ""
				for _, t := range pubTypes {
					if string(v) == t {
						*dst = t
						break
					}
				}
				if *dst == "" {
					*dst = string(v)
				}
			}
		case '0' <= c && c <= '9':
			j := i
			var x uint64
			for j < n && '0' <= p[j] && p[j] <= '9' {
				d := uint64(p[j] - '0')
				if x > (1<<64-1-d)/10 {
					return m, false, false // out of range: the slow path says
				}
				x = x*10 + d
				j++
			}
			i = j
			switch string(key) {
			case "term":
				if !once(8) {
					return m, false, false
				}
				m.Term = x
			case "conf_term":
				if !once(16) {
					return m, false, false
				}
				m.ConfTerm = x
			case "conf_index":
				if !once(32) {
					return m, false, false
				}
				m.ConfIndex = x
			case "type", "candidate", "to", "members", "pre", "granted":
				return m, false, false
			}
		case c == 't' || c == 'f':
			lit := "false"
			if c == 't' {
				lit = "true"
			}
			if n-i < len(lit) || string(p[i:i+len(lit)]) != lit {
				return m, false, false
			}
			i += len(lit)
			switch string(key) {
			case "pre":
				if !once(64) {
					return m, false, false
				}
				m.Pre = c == 't'
			case "granted":
				if !once(128) {
					return m, false, false
				}
				m.Granted = c == 't'
			case "type", "candidate", "to", "term", "conf_term", "conf_index", "members":
				return m, false, false
			}
		case c == '[' && string(key) == "members" && m.Members == nil:
			i++
			for {
				if i >= n || p[i] != '"' {
					return m, false, false
				}
				ve, ok := str(i)
				if !ok || bytes.ContainsAny(p[i+1:ve-1], ",]") { // the slow path splits there
					return m, false, false
				}
				m.Members = append(m.Members, string(p[i+1:ve-1]))
				i = ve
				if i < n && p[i] == ',' {
					i++
					continue
				}
				if i < n && p[i] == ']' {
					i++
					break
				}
				return m, false, false
			}
		default:
			return m, false, false
		}
		switch {
		case i == n-1:
			return m, m.Type != "", true
		case i < n-1 && p[i] == ',':
			i++
		default:
			return m, false, false
		}
	}
}

// parsePubSlow reads any payload by searching for each key; its strings are
// checked names (never a quote), so `"key":` can only match a key.
func parsePubSlow(p []byte) (m pubMsg, ok bool) {
	str := func(key string) string {
		k := `"` + key + `":"`
		i := bytes.Index(p, []byte(k))
		if i < 0 {
			return ""
		}
		v := p[i+len(k):]
		j := bytes.IndexByte(v, '"')
		if j < 0 {
			return ""
		}
		return string(v[:j])
	}
	m.Type, m.Candidate, m.To = str("type"), str("candidate"), str("to")
	num := func(key string, dst *uint64) bool {
		k := `"` + key + `":`
		i := bytes.Index(p, []byte(k))
		if i < 0 {
			return true
		}
		v := p[i+len(k):]
		j := 0
		for j < len(v) && v[j] >= '0' && v[j] <= '9' {
			j++
		}
		t, err := strconv.ParseUint(string(v[:j]), 10, 64)
		*dst = t
		return err == nil
	}
	if !num("term", &m.Term) || !num("conf_term", &m.ConfTerm) || !num("conf_index", &m.ConfIndex) {
		return m, false
	}
	if i := bytes.Index(p, []byte(`"members":[`)); i >= 0 {
		v := p[i+len(`"members":[`):]
		j := bytes.IndexByte(v, ']')
		if j < 0 {
			return m, false
		}
		for _, q := range bytes.Split(v[:j], []byte{','}) {
			if len(q) < 2 || q[0] != '"' || q[len(q)-1] != '"' {
				return m, false
			}
			m.Members = append(m.Members, string(q[1:len(q)-1]))
		}
	}
	m.Pre = bytes.Contains(p, []byte(`"pre":true`))
	m.Granted = bytes.Contains(p, []byte(`"granted":true`))
	return m, m.Type != "" && len(p) > 0 && p[0] == '{' && p[len(p)-1] == '}'
}

func (w *world) violation(inv, detail string, nodes ...int) {
	v := Violation{Invariant: inv, Seed: w.Seed, AtMs: w.now, Detail: detail}
	for _, i := range nodes {
		v.Nodes = append(v.Nodes, w.nodes[i].id)
	}
	w.res.Violations = append(w.res.Violations, v)
}

// checkPersist: terms never decrease on a node, across restarts; a vote is
// never changed within a term.
func (w *world) checkPersist(n *node, p core.GroupState) {
	if p.Term < n.maxTerm {
		w.violation(InvTermDecrease, fmt.Sprintf("%s persisted term %d after term %d", n.id, p.Term, n.maxTerm), n.idx)
	}
	n.maxTerm = max(n.maxTerm, p.Term)
	// Local clocks run within the drift bound of real time: twice real
	// time is a generous allowance.
	if bound := 1 + (core.MaxTermStep+1)*n.moves + 2*1000*uint64(max(w.now, 0)); p.Term > bound {
		w.violation(InvTermBound, fmt.Sprintf("%s persisted term %d after %d messages and steps in %d ms (at most %d)",
			n.id, p.Term, n.moves, w.now, bound), n.idx)
	}
	if p.Vote != "" {
		w.recordVote(n, p.Term, p.Vote, "persisted")
	}
}

func (w *world) recordVote(n *node, term uint64, cand, how string) {
	if prev, ok := n.votes[term]; ok && prev != cand {
		w.violation(InvDoubleVote, fmt.Sprintf("%s voted for %s and %s (%s) in term %d", n.id, prev, cand, how, term), n.idx)
		return
	}
	n.votes[term] = cand
}

// checkPublish: every vote a node sends (a granted vote, its own candidacy,
// the vote a resign implies) is recorded against double votes, and must be
// covered by the state it persisted before sending (persist-before-send);
// so must the term of every message that speaks in the sender's own term
// (all but pre-votes and pre-vote requests, which name a term not entered).
func (w *world) checkPublish(n *node, payload []byte, p *pubSent) {
	if w.Mode != core.ModeQuorum {
		return // no votes; the receivers report a payload they cannot decode
	}
	m := &p.m
	if !p.ok {
		w.violation(InvWire, fmt.Sprintf("%s published an undecodable payload %q", n.id, payload), n.idx)
		return
	}
	if !m.Pre && m.Term > n.persisted.Term {
		w.violation(InvPersist, fmt.Sprintf("%s sent %s of term %d with persisted term %d", n.id, m.Type, m.Term, n.persisted.Term), n.idx)
	}
	w.publishedConf(n, m)
	if m.Type == "resign" && m.To != "" {
		w.resigned(n, m.Term, m.To)
	}
	var term uint64
	var cand string
	switch {
	case m.Type == "vote" && m.Granted && !m.Pre:
		term, cand = m.Term, m.Candidate
	case m.Type == "election" && !m.Pre:
		term, cand = m.Term, n.id
	case m.Type == "resign" && m.To != "":
		term, cand = m.Term+1, m.To
	default:
		return
	}
	w.recordVote(n, term, cand, m.Type+" sent")
	if p := n.persisted; p.Term < term || p.Term == term && p.Vote != cand {
		w.violation(InvPersist, fmt.Sprintf("%s sent %s for %s in term %d with persisted term %d vote %q", n.id, m.Type, cand, term, p.Term, p.Vote), n.idx)
	}
}

// checkLeadership runs after a step's events were applied: a node its
// application believes to lead term T must not have acked anyone, granted a
// vote or campaigned in a later term in that step (quorum mode). (A leader
// does answer a stale leader's heartbeat, with an ack of its own term.)
func (w *world) checkLeadership(n *node, pubs []pubSent) {
	if w.Mode != core.ModeQuorum || !n.leader {
		return
	}
	for i := range pubs {
		m, ok := &pubs[i].m, pubs[i].ok
		if ok && m.Term > n.leaderTerm && (m.Type == "ack" || m.Type == "vote" && m.Granted && !m.Pre || m.Type == "election" && !m.Pre) {
			w.violation(InvLeadership, fmt.Sprintf("%s sent %s of term %d while its application was told it leads term %d (no stepped-down)", n.id, m.Type, m.Term, n.leaderTerm), n.idx)
			w.setLeader(n, false, 0) // reported once; the model follows the engine from here
			return
		}
	}
}

// checkLeaseFirst holds a leader whose lease ended before a step to
// stepping down before it acts on anything of that step: a leader stalled
// past its lease once resumed as leader for one batch, counted seconds-old
// acks, reported a configuration committed, proposed the next change and
// sent a heartbeat of its old term before it stepped down (electhost sim
// --adversary --membership, seed 13666). Its lease runs out only at the
// start of a step (a lease is extended, or begun, only into the future), so
// that step-down comes first.
func (w *world) checkLeaseFirst(n *node, evs []core.Event, pubs []core.Message) {
	if w.Mode != core.ModeQuorum {
		return
	}
	for k := range evs {
		ev := &evs[k]
		if ev.Kind != core.EventSteppedDown || !strings.HasPrefix(ev.Reason, "lease expired") {
			continue
		}
		var first *core.Event // the first event before it, a leader's own if any
		for i := range evs[:k] {
			b := &evs[i]
			if b.Kind == core.EventJoined {
				continue
			}
			if first == nil || first.Kind == core.EventRejected && b.Kind != core.EventRejected {
				first = b
			}
		}
		if first != nil {
			w.violation(InvLeadership, fmt.Sprintf("%s stepped down from term %d, its lease over, only after a %s event of the same step (%s)",
				n.id, ev.Term, first.Kind, first.Reason), n.idx)
			return
		}
		for i := range pubs {
			m, ok := parsePub(pubs[i].Payload)
			if ok && m.Term == ev.Term && (m.Type == "heartbeat" || m.Type == "leader" || m.Type == "resign") {
				w.violation(InvLeadership, fmt.Sprintf("%s sent a %s of term %d in the step it stepped down from that term, its lease over",
					n.id, m.Type, m.Term), n.idx)
				return
			}
		}
	}
}

// checkDrained holds a drained node to never leading: a drain applied in
// this step ends a leadership within it (the drained leader hands over at
// once), and from the next step on it asks for no vote.
func (w *world) checkDrained(n *node, wasDrained bool, pubs []pubSent) {
	if n.drained && n.leader {
		w.violation(InvDrained, fmt.Sprintf("%s leads term %d while drained", n.id, n.leaderTerm), n.idx)
	}
	for i := range pubs {
		if m, ok := &pubs[i].m, pubs[i].ok; wasDrained && ok && m.Type == "election" {
			w.violation(InvDrained, fmt.Sprintf("%s asked for votes for term %d while drained", n.id, m.Term), n.idx)
			return
		}
	}
}

func (w *world) onEvent(n *node, ev *core.Event) {
	switch ev.Kind {
	case core.EventBecameLeader:
		if ev.Term > n.maxTerm {
			w.violation(InvPersist, fmt.Sprintf("%s leads term %d but persisted only term %d", n.id, ev.Term, n.maxTerm), n.idx)
		}
		w.setLeader(n, true, ev.Term)
		w.setKnown(n, n.idx)
		n.leaseEnd, n.leaseUntil = 0, 0
		if ev.LeaseUntil > 0 {
			w.lease(n, ev.LeaseUntil)
		}
		w.sc.elected(n, ev.Term)
	case core.EventLease:
		if !n.leader || ev.Term != n.leaderTerm {
			w.violation(InvLease, fmt.Sprintf("%s got a lease for term %d while not leading it", n.id, ev.Term), n.idx)
			return
		}
		w.lease(n, ev.LeaseUntil)
	case core.EventSteppedDown:
		if n.leader && ev.Reason == "resigned" && n.cfg.HandoffHoldMs > 0 && n.leaseEnd > w.now {
			// Told to stop now, its work may take HandoffHoldMs of its
			// clock to exit, but never outlives the lease it holds.
			n.graceEnd = min(n.realAt(n.local(w.now)+n.cfg.HandoffHoldMs), n.leaseEnd)
		}
		w.setLeader(n, false, 0)
	case core.EventLeaderChanged:
		k := -1
		if ev.Leader != "" {
			var ok bool
			if k, ok = w.byID[ev.Leader]; !ok {
				w.violation(InvWire, fmt.Sprintf("%s follows unknown leader %q", n.id, ev.Leader), n.idx)
				k = -1
			}
		}
		w.setKnown(n, k)
	case core.EventRejected:
		w.res.Rejected++
		r := ev.Reason
		if strings.HasPrefix(r, "malformed") || strings.HasPrefix(r, "unknown type") ||
			strings.HasPrefix(r, "oversized") || strings.HasPrefix(r, "join") || strings.HasPrefix(r, "wrong group") ||
			strings.HasPrefix(r, "sender") && !w.outsider(n, r) || strings.Contains(r, " sent by ") {
			w.violation(InvWire, n.id+" rejected a payload the core produced: "+r, n.idx)
		}
	case core.EventDuplicateID:
		if w.cfg.Auth == core.AuthHMAC || w.cfg.Auth == core.AuthEd25519 {
			w.violation(InvDuplicateID, n.id+" reports a second process with a member's id: "+ev.Reason, n.idx)
		}
	case core.EventConfig:
		if w.conf != nil && ev.Reason == "committed" {
			w.reportedCommitted(n, ev)
		}
	}
}

// checkElection: at most one leader per term. Always in quorum mode; in bully
// mode only when the network was connected (see Violation and doc.go) from
// CollectMs plus one maximum delay before the first of the two elections to
// the second.
func (w *world) checkElection(n *node, term uint64) {
	prev, ok := w.terms[term]
	if !ok {
		w.terms[term] = leaderAt{n.idx, w.now}
		return
	}
	if prev.node == n.idx {
		return
	}
	if w.Mode == core.ModeBully {
		window := w.cfg.CollectMs + w.cfg.CollectMs*w.cfg.MaxDriftPPM/1_000_000 + 1 + w.dmax
		if !w.connected(prev.at-window, w.now) {
			w.res.SplitBrains++
			return
		}
	}
	w.violation(InvElectionSafety, fmt.Sprintf("%s and %s both lead term %d (elected at %d and %d)",
		w.nodes[prev.node].id, n.id, term, prev.at, w.now), prev.node, n.idx)
}

// lease records that n now believes it holds a lease until its local time
// until, and checks that no other node believes the same at this instant.
func (w *world) lease(n *node, until int64) {
	end := n.realAt(until) // valid while local < until: real times before end
	if end <= w.now {
		return
	}
	for _, m := range w.nodes {
		if m != n && m.up && m.leader && m.leaseEnd > w.now {
			w.violation(InvLease, fmt.Sprintf("%s (term %d) took a lease until real %d while %s (term %d) holds one until real %d",
				n.id, n.leaderTerm, end, m.id, m.leaderTerm, m.leaseEnd), m.idx, n.idx)
		}
		if m != n && m.up && m.graceEnd > w.now {
			w.violation(InvLease, fmt.Sprintf("%s (term %d) took a lease until real %d while %s, which handed over, may act until real %d (hold %d ms)",
				n.id, n.leaderTerm, end, m.id, m.graceEnd, m.cfg.HandoffHoldMs), m.idx, n.idx)
		}
	}
	n.leaseEnd = max(n.leaseEnd, end)
	n.leaseUntil = until
}
