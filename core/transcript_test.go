package core

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestTranscripts replays the protocol scenarios in testdata/transcripts/*.txt and
// compares what every node published and reported with the golden output.
// Rewrite after an intended change with: go test ./core -run Transcripts -rewrite
//
// Commands (arguments key=value; lists as key=(a,b)):
//
//	cluster mode=quorum|bully ids=(a,b,c) [prio=(a:10,b:20)] [values=(a:V,b:W)] [hb=MS et=MS lease=MS]
//	        [balanced=true]  (every node's Config.BalancedPriority)
//	elapse ms=N            advance time in 10 ms steps, delivering at once; prints events only
//	elapse ms=N delay=D [show=(election,vote)]
//	                       the same on a slow network: every message arrives D ms
//	                       after it was sent; show prints a line (@time) for each
//	                       publish of those types
//	tick ms=N              advance time in 1 ms steps, running timers; nothing is delivered
//	campaign|resign id=X   apply the command at node X; prints what it published
//	transfer id=X to=Y
//	drain|undrain id=X
//	proclaim id=X value=V  set X's leader value (CmdProclaim)
//	deliver [rounds=N]     deliver what is queued, round by round (default: until quiet)
//	deliver [from=X] [to=Y] [type=T] [pre=true|false] [value=V] [batch]
//	                       deliver only the queued messages that match, once, in
//	                       queue order (batch: each receiver gets them in one Step)
//	drop [from=X] [to=Y] [type=T] [pre=true|false] [value=V]
//	                       lose the queued messages that match (default: all)
//	crash id=X / restart id=X (restart rejoins with X's persisted state)
//	pause id=X             stop stepping X (a stalled process); what is sent to
//	                       it, or queued for it, waits
//	resume id=X [add=Y|remove=Y]
//	                       step X once with everything that waited, in order,
//	                       and the command, if any
//	stall id=X ms=N [backlog=true]
//	                       X is not stepped for N ms while the others run (as
//	                       elapse; what is sent to X stays queued), then X wakes
//	                       on its timer before the queue reaches it: one step
//	                       with no message (Input.Backlog if backlog=true);
//	                       prints what X published
//	join id=X              start a new node X on the bus, awaiting its configuration
//	                       (its Members: the cluster's ids)
//	add|remove id=X member=Y  ask node X to add or remove member Y
//	partition              each input line is one side, ids separated by spaces
//	heal
//	inject to=X            deliver the input (one raw payload per line) to X
//	status [id=X] [conf] [prio] [value]  role, term, vote, leader of X (default:
//	                       every node); conf: and its configuration; prio: and
//	                       the priorities it knows; value: and its leader's value
//
// transcriptDir can be pointed elsewhere (-transcripts DIR) to explore a
// scenario without touching the golden files.
var transcriptDir = "testdata/transcripts"

func init() {
	flag.StringVar(&transcriptDir, "transcripts", transcriptDir, "directory of transcripts to run")
}

func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, transcriptDir, func(t *testing.T, path string) {
		var n *testNet
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "cluster" && n == nil {
				d.Fatalf(t, "cluster first")
			}
			return runTranscriptCmd(t, d, &n)
		})
	})
}

func runTranscriptCmd(t *testing.T, d *datadriven.TestData, np **testNet) string {
	n := *np
	arg := func(key string) string {
		var v string
		d.ScanArgs(t, key, &v)
		return v
	}
	switch d.Cmd {
	case "cluster":
		var ids []string
		d.ScanArgs(t, "ids", &ids)
		n = newTestNet(t, Mode(arg("mode")), ids...)
		if d.HasArg("hb") {
			var hb, et, lease int64
			d.ScanArgs(t, "hb", &hb)
			d.ScanArgs(t, "et", &et)
			d.MaybeScanArgs(t, "lease", &lease)
			n.cfgHook = func(c *Config) { c.HeartbeatMs, c.ElectionTimeoutMs, c.LeaseMs = hb, et, lease }
			n = restartAll(n)
		}
		if d.HasArg("prio") {
			var ps []string
			d.ScanArgs(t, "prio", &ps)
			for _, p := range ps {
				id, v, _ := strings.Cut(p, ":")
				pv, err := strconv.ParseUint(v, 10, 32)
				if err != nil {
					d.Fatalf(t, "prio %q: %v", p, err)
				}
				n.prio[id] = uint32(pv)
			}
			n = restartAll(n)
		}
		if d.HasArg("balanced") {
			d.ScanArgs(t, "balanced", &n.balanced)
			n = restartAll(n)
		}
		if d.HasArg("values") {
			var vs []string
			d.ScanArgs(t, "values", &vs)
			n.values = map[string]string{}
			for _, v := range vs {
				id, val, _ := strings.Cut(v, ":")
				n.values[id] = val
			}
			n = restartAll(n)
		}
		if d.HasArg("auth") {
			n = withTranscriptAuth(n, AuthMode(arg("auth")))
		}
		*np = n
		n.take()
		return "ok"
	case "elapse":
		var ms, delay int64
		d.ScanArgs(t, "ms", &ms)
		d.MaybeScanArgs(t, "delay", &delay)
		var show []string
		d.MaybeScanArgs(t, "show", &show)
		n.quiet = true
		if show != nil {
			n.show = map[string]bool{}
			for _, typ := range show {
				n.show[typ] = true
			}
		}
		if delay > 0 {
			n.advanceDelayed(ms, delay)
		} else {
			n.advance(ms, 10)
		}
		n.quiet, n.show = false, nil
	case "join":
		id := arg("id")
		if n.members == nil {
			n.members = slices.Clone(n.ids)
		}
		n.ids = append(n.ids, id)
		n.awaiting[id] = true
		n.start(id)
	case "campaign", "resign", "transfer", "add", "remove", "drain", "undrain", "proclaim":
		c := Command{Group: "g"}
		switch d.Cmd {
		case "proclaim":
			c.Kind, c.Value = CmdProclaim, arg("value")
		case "add":
			c.Kind, c.Target = CmdAddMember, arg("member")
		case "remove":
			c.Kind, c.Target = CmdRemoveMember, arg("member")
		case "campaign":
			c.Kind = CmdCampaign
		case "resign":
			c.Kind = CmdResign
		case "transfer":
			c.Kind, c.Target = CmdTransfer, arg("to")
		case "drain":
			c.Kind = CmdDrain
		case "undrain":
			c.Kind = CmdUndrain
		}
		n.step(arg("id"), &Input{Now: n.now, Commands: []Command{c}})
	case "tick":
		var ms int64
		d.ScanArgs(t, "ms", &ms)
		for end := n.now + ms; n.now < end; {
			n.now++
			for _, id := range n.ids {
				if !n.down[id] && !n.paused[id] {
					n.step(id, &Input{Now: n.now})
				}
			}
		}
	case "deliver":
		if match, filtered := queueFilter(t, d); filtered {
			n.deliverMatching(match, d.HasArg("batch"))
			break
		}
		rounds := 1 << 30
		d.MaybeScanArgs(t, "rounds", &rounds)
		for i := 0; i < rounds && len(n.queue) > 0; i++ {
			n.deliverRound()
		}
	case "drop":
		match, _ := queueFilter(t, d)
		n.queue = slices.DeleteFunc(n.queue, match)
	case "stall":
		id := arg("id")
		var ms int64
		d.ScanArgs(t, "ms", &ms)
		backlog := false
		d.MaybeScanArgs(t, "backlog", &backlog)
		n.quiet = true
		for end := n.now + ms; n.now < end; {
			n.now = min(n.now+10, end)
			for _, other := range n.ids {
				if other != id && !n.down[other] {
					n.step(other, &Input{Now: n.now})
				}
			}
			for held := 0; len(n.queue) > held; {
				round := slices.Clone(n.queue)
				n.queue = nil
				held = 0
				for _, q := range round {
					if q.to == id {
						n.queue = append(n.queue, q)
						held++
					} else if !n.down[q.to] {
						n.step(q.to, &Input{Now: n.now, Inbound: []Message{q.msg}})
					}
				}
			}
		}
		n.quiet = false
		n.step(id, &Input{Now: n.now, Backlog: backlog})
	case "crash":
		n.crash(arg("id"))
	case "pause":
		id := arg("id")
		n.paused[id] = true
		n.queue = slices.DeleteFunc(n.queue, func(q queued) bool {
			if q.to == id {
				n.held[id] = append(n.held[id], q.msg)
			}
			return q.to == id
		})
	case "resume":
		id := arg("id")
		in := Input{Now: n.now, Inbound: n.held[id]}
		switch {
		case d.HasArg("add"):
			in.Commands = []Command{{Kind: CmdAddMember, Group: "g", Target: arg("add")}}
		case d.HasArg("remove"):
			in.Commands = []Command{{Kind: CmdRemoveMember, Group: "g", Target: arg("remove")}}
		}
		delete(n.paused, id)
		delete(n.held, id)
		n.step(id, &in)
	case "restart":
		n.start(arg("id"))
	case "partition":
		var sides [][]string
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			sides = append(sides, strings.Fields(line))
		}
		n.partition(sides...)
	case "heal":
		clear(n.cut)
	case "inject":
		to := arg("to")
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			n.step(to, &Input{Now: n.now, Inbound: []Message{{Topic: Topic("g"), Payload: []byte(line)}}})
		}
	case "status":
		ids := n.ids
		if d.HasArg("id") {
			ids = []string{arg("id")}
		}
		for _, id := range ids {
			if n.down[id] {
				fmt.Fprintf(&n.out, "%s: down\n", id)
				continue
			}
			s := n.status(id)
			fmt.Fprintf(&n.out, "%s: %s term=%d vote=%s leader=%s rejected=%d", id, s.Role, s.Term, s.Vote, s.Leader, s.Rejected)
			if d.HasArg("conf") {
				ids := make([]string, len(s.Members))
				for i, m := range s.Members {
					ids[i] = m.ID
				}
				fmt.Fprintf(&n.out, " conf=%d.%d committed=%t voter=%t members=(%s)", s.ConfTerm, s.ConfIndex, s.ConfCommitted, s.Voter, strings.Join(ids, ","))
			}
			if d.HasArg("value") {
				fmt.Fprintf(&n.out, " value=%q ver=%d", s.Value, s.ValueVersion)
			}
			if d.HasArg("prio") {
				ps := make([]string, len(s.Members))
				for i, m := range s.Members {
					ps[i] = m.ID + ":" + strconv.FormatUint(uint64(m.Priority), 10)
				}
				fmt.Fprintf(&n.out, " prio=(%s)", strings.Join(ps, ","))
			}
			n.out.WriteByte('\n')
		}
	default:
		if !authTranscriptCmd(t, d, n) {
			d.Fatalf(t, "unknown command %q", d.Cmd)
		}
	}
	out := n.take()
	return fmt.Sprintf("t=%d\n%s", n.now, out)
}

// queueFilter reads the from, to, type and pre arguments into a predicate on
// queued messages; filtered reports whether any was given.
func queueFilter(t *testing.T, d *datadriven.TestData) (match func(queued) bool, filtered bool) {
	var from, to, typ, pre, value string
	hasValue := d.HasArg("value")
	for key, dst := range map[string]*string{"from": &from, "to": &to, "type": &typ, "pre": &pre, "value": &value} {
		if d.HasArg(key) {
			d.ScanArgs(t, key, dst)
			filtered = true
		}
	}
	return func(q queued) bool {
		var m wireMsg
		if decodeWire(q.msg.Payload, &m) != nil {
			return typ == "" && pre == "" && !hasValue
		}
		return (from == "" || q.from == from) && (to == "" || q.to == to) &&
			(typ == "" || m.Type == typ) && (pre == "" || strconv.FormatBool(m.Pre) == pre) &&
			(!hasValue || m.Value == value)
	}, filtered
}

// deliverMatching delivers once the queued messages that match, in queue
// order; with batch, each receiver gets all of its messages in one Step.
func (n *testNet) deliverMatching(match func(queued) bool, batch bool) {
	var picked []queued
	n.queue = slices.DeleteFunc(n.queue, func(q queued) bool {
		if match(q) {
			picked = append(picked, q)
			return true
		}
		return false
	})
	if !batch {
		for _, q := range picked {
			if !n.down[q.to] {
				n.step(q.to, &Input{Now: n.now, Inbound: []Message{q.msg}})
			}
		}
		return
	}
	for _, id := range n.ids {
		var in Input
		for _, q := range picked {
			if q.to == id {
				in.Inbound = append(in.Inbound, q.msg)
			}
		}
		if len(in.Inbound) > 0 && !n.down[id] {
			in.Now = n.now
			n.step(id, &in)
		}
	}
}

// restartAll rebuilds every node, so configuration changes take effect.
func restartAll(n *testNet) *testNet {
	for _, id := range n.ids {
		n.start(id)
	}
	return n
}
