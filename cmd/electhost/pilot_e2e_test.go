package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/pilotstandin"
)

// End-to-end tests over the pilotctl stand-in with the faults of real Pilot
// networks switched on (docs/pilotctl.md). Most run at the defaults (500 ms
// / 2 s); the others at timings 2.5 times shorter (heartbeat 200 ms,
// election timeout 1.2 s) to keep them fast on a 2-core CI runner; shorter ones (100 ms / 600 ms, a 387 ms lease)
// lost leases to CPU starvation while the whole suite ran. The faults are
// harsher than measured: resets every ~5 s per subscription (real: 8 ends
// over ~3 idle minutes among all of them, one per ~20 s), 60 events/s per
// connection (real: ~25/s at 2.5× the message rate). Resets every ~1 s, 20
// times the real rate, left no leader within 20 s at load 25. The publish
// hang to a killed node and the blocked fan-out keep their real 29 s and
// 30 s: the transport must not wait for them. Waits give up after a minute:
// they wait for an event, and a loaded runner may be slow to bring it.

const (
	pilotHB      = 200 * time.Millisecond
	pilotET      = 1200 * time.Millisecond
	pilotLatency = 100 * time.Millisecond
)

// pilotFaults are the scaled faults every test below runs with.
func pilotFaults(hosts ...string) pilotstandin.Options {
	return pilotstandin.Options{Hosts: hosts, ResetEvery: 5 * time.Second, EventsPerSec: 60}
}

// The default heartbeat and election timeout, which docs/pilotctl.md
// ("Timing on Pilot") says absorb a reset.
var (
	pilotDefHB = time.Duration(core.DefaultHeartbeatMs) * time.Millisecond
	pilotDefET = time.Duration(core.DefaultElectionTimeoutMs) * time.Millisecond
)

// newPilotCluster starts a stand-in daemon and a 3-agent cluster over it.
// Agent aN runs on node aN; brokers are given by --broker.
func newPilotCluster(t *testing.T, opts pilotstandin.Options, brokers string) (*cluster, *pilotstandin.Daemon) {
	return newPilotClusterTimed(t, opts, brokers, pilotHB, pilotET)
}

// newPilotClusterTimed is newPilotCluster with the given heartbeat and
// election timeout.
func newPilotClusterTimed(t *testing.T, opts pilotstandin.Options, brokers string, hb, et time.Duration) (*cluster, *pilotstandin.Daemon) {
	pilotctl := pilotstandin.Build(t)
	d := pilotstandin.StartDaemon(t, opts)
	c := newCluster(t, 3, []string{"--transport", "pilot", "--broker", brokers, "--pilotctl", pilotctl}, d.Env(),
		hb, et, pilotLatency)
	c.envOf = func(id string) []string { return []string{pilotstandin.EnvNode + "=" + id} }
	t.Cleanup(func() {
		if n := d.SelfPublishes(); n != 0 {
			t.Errorf("%d publishes from a node to its own broker (Pilot floods on these)", n)
		}
	})
	return c, d
}

// The whole scenario (election, SIGKILL of the leader's agent, rejoin,
// SIGTERM hand-off) over the recommended layout — every member's node is
// a broker — with subscriptions reset at random and the per-connection
// ceiling on.
//
// At the defaults (500 ms / 2 s), as the tests below: at the scaled ones,
// under 4 busy loops at load ~20, the first election took 13-38 s (terms
// up to 19) and timed out in 2 of 2 runs.
func TestE2EPilot(t *testing.T) {
	c, _ := newPilotClusterTimed(t, pilotFaults("a1", "a2", "a3"), "a1,a2,a3", pilotDefHB, pilotDefET)
	c.scenario()
}

// Fault 1 and the 29 s publish hang: the leader's pilot daemon is killed
// hard. Brokers it subscribed to would block their fan-out behind it; in
// the members'-nodes layout it subscribed only to its own, which died with
// it. The others elect a new leader within 2×ET + 5×latency; the cut-off
// leader stops its command before the new one starts; publishes to the dead
// node are abandoned at their deadline and backed off.
func TestE2EPilotLeaderDaemonKilled(t *testing.T) {
	c, d := newPilotClusterTimed(t, pilotFaults("a1", "a2", "a3"), "a1,a2,a3", pilotDefHB, pilotDefET)
	c.startAll()
	// The best-priority member's leadership: another's hands over to it,
	// and a test killing the first leader's daemon raced that hand-off.
	// On a loaded runner a leader may lose its first lease to late acks
	// (clean-clone CI at load 15-20: every new leader within 0.5 s, terms
	// 1 to 6): wait for a command of that term or later, then for the
	// best-priority leader again.
	leader, term := c.waitBestLeader(time.Minute)
	c.waitCommandFrom("", term, time.Minute)
	leader, term = c.waitBestLeader(time.Minute)
	d.KillNode(leader)
	_, nextTerm := c.expectFailover(leader, term, "its daemon was killed")
	// The survivors gave up on the dead node's broker by the transport's
	// own publish deadline ("no answer in time"), none waiting out the
	// stand-in's 29 s hang (which ends in "dial …: timeout"): the cause,
	// read from their logs, not a time.
	for _, id := range c.ids {
		if id == leader {
			continue
		}
		waitFor(t, time.Minute, id+" logs a failed publish to the killed node "+leader, func() (bool, string) {
			n := 0
			for _, rec := range c.proc(id).logLines("pilot publish failed") {
				if rec["host"] != leader {
					continue
				}
				n++
				if e, _ := rec["err"].(string); !strings.Contains(e, "no answer in time") {
					t.Fatalf("%s: a publish to the killed node %s failed by %q, not by the transport's deadline", id, leader, e)
				}
			}
			return n > 0, "none yet"
		})
	}
	// The old leader's daemon returns: all three agree again (the best-
	// priority member may take over by a hand-off), at a term above the
	// old leader's.
	d.RestartNode(leader)
	c.waitAgreement("", nextTerm, time.Minute)
	c.stopAll()
	c.checkCommandLog()
}

// Fault 2 with no other fault: while six subscriptions are reset (each gap
// without a ready signal), no member times out a leader that leads and no
// lease is lost to a member left deaf (noSpuriousElection). It runs at
// the defaults (500 ms / 2 s), the timings docs/pilotctl.md ("Timing on
// Pilot") says absorb a reset: at the scaled ones the leader's 825 ms lease
// hangs on a heartbeat-and-ack round trip of pilotctl processes, which on a
// loaded 2-core runner (load 10-15) outlasted it in 3 of 10 runs ("lost
// contact with a majority"), while a reset leaves its twin subscription
// deaf for only 80-220 ms. With reset gaps of 2.5 s it fails (a member
// deaf for 1.7 s before a lease loss); gaps of 1.5 s passed twice.
func TestE2EPilotResetsNoSpuriousElection(t *testing.T) {
	c, d := newPilotClusterTimed(t, pilotFaults("a1", "a2", "a3"), "a1,a2,a3",
		core.DefaultHeartbeatMs*time.Millisecond, core.DefaultElectionTimeoutMs*time.Millisecond)
	c.noSpuriousElection(d, 6)
}

// Dedicated broker nodes (no agent on them): one broker killed hard (its
// publishes hang 29 s) and the others resetting their subscriptions at
// random; no election while a leader leads (noSpuriousElection), copies
// are de-duplicated, and a
// SIGKILLed leader is replaced within the bound. At the defaults, as
// TestE2EPilotResetsNoSpuriousElection and for the same reason (at the
// scaled timings it lost its lease at load 5-7).
func TestE2EPilotDedicatedBrokers(t *testing.T) {
	c, d := newPilotClusterTimed(t, pilotFaults("b1", "b2", "b3", "a1", "a2", "a3"), "b1,b2,b3",
		core.DefaultHeartbeatMs*time.Millisecond, core.DefaultElectionTimeoutMs*time.Millisecond)
	d.KillBroker("b3")
	c.noSpuriousElection(d, 4)
	for _, id := range c.ids {
		if dup := brokerMetric(t, c.proc(id), "duplicates_total", "b1") + brokerMetric(t, c.proc(id), "duplicates_total", "b2"); dup == 0 {
			t.Errorf("%s: no duplicate dropped with two live brokers", id)
		}
	}
	// The leader now: a lease lost to load since the watch ended would
	// make the kill below a follower's.
	leader, term, _ := c.waitAgreement("", 1, time.Minute)
	c.signal(leader, syscall.SIGKILL)
	c.waitExit(leader, time.Minute)
	c.expectFailover(leader, term, "its agent was SIGKILLed")
	c.stopAll()
	c.checkCommandLog()
}

// expectFailover waits for a leader other than lost, at a term above term,
// and for its leader-only command. The design bound, 2×ET + 5×latency (+1 s
// for process scheduling), is logged, as in scenario; the wait gives up
// after a minute (a CI pair at load 30: no agreement in 15.5 s, terms 13
// to 14). A publish hanging on a killed broker is caught by its cause
// (TestE2EPilotLeaderDaemonKilled reads how the publishes failed).
func (c *cluster) expectFailover(lost string, term uint64, what string) (string, uint64) {
	c.t.Helper()
	bound := 2*c.et + 5*c.latency + time.Second
	next, nextTerm, took := c.waitAgreement(lost, term+1, time.Minute)
	c.t.Logf("failover: %s leads term %d, %v after %s led and %s (design bound %v)", next, nextTerm, took.Round(time.Millisecond), lost, what, bound)
	// Its command, or a later leader's (not lost's): on a loaded runner the
	// new leader may lose its first lease to late acks and lead again.
	c.waitCommandFrom(lost, nextTerm, time.Minute)
	return next, nextTerm
}

// noSpuriousElection starts the cluster and watches every agent from the
// first agreed leader until the subscriptions were reset restarts times in
// all (the fault, counted, not a time that may hold none on a loaded
// runner) and a leader's command runs. A reset that left an agent deaf long
// enough would show as a follower campaigning (its election count rising)
// or seeing another leader while the leader still leads, or as a leader
// losing its lease after the stand-in saw a member deaf on the group's
// topic (every subscription of it reset at once) for more than a heartbeat
// within the election timeout before: those fail.
// A lease lost with no such deafness is not the fault under test: its acks
// came back too late, which on a loaded runner is pilotctl's process
// starts (a clean-clone CI run at load 15-19 lost six leases in 20 s, each
// within a second of the election, no reset near); it is logged, counted
// and the next leader watched, as is a planned hand-off to the
// best-priority member. It returns the last leader.
func (c *cluster) noSpuriousElection(d *pilotstandin.Daemon, restarts float64) string {
	t := c.t
	c.startAll()
	deadline := time.Now().Add(3 * time.Minute)
	leader, term, _ := c.waitAgreement("", 1, time.Minute)
	base := 0.0
	for _, id := range c.ids {
		base += brokerMetricSum(t, c.proc(id), "subscription_restarts_total")
	}
	elections := map[string]uint64{}
	watch := func() {
		for _, id := range c.ids {
			if s, err := c.proc(id).status(); err == nil {
				elections[id] = s.Elections
			}
		}
	}
	watch()
	t0, losses := time.Now(), 0
	for ; ; time.Sleep(50 * time.Millisecond) {
		// The followers first, then the leader: a follower that moved
		// while the leader still leads moved without losing it.
		moved := ""
		for _, id := range c.ids {
			if id == leader {
				continue
			}
			s, err := c.proc(id).status()
			if err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			if s.Elections > elections[id] || s.Leader != leader || s.Term != term {
				moved = fmt.Sprintf("%s campaigned %d times, sees %q at term %d", id, s.Elections-elections[id], s.Leader, s.Term)
			}
		}
		ls, err := c.proc(leader).status()
		if err != nil {
			t.Fatalf("%s: %v", leader, err)
		}
		leads := ls.Role == "leader" && ls.Term == term
		if moved != "" && leads {
			t.Fatalf("spurious election while %s led term %d: %s", leader, term, moved)
		}
		if !leads {
			// Why it stopped, from its own log; a leader whose lease never
			// began (no majority acked in time: a CI run at load 30) logged
			// neither "started" nor "stopped leading": that is a lease lost
			// too.
			reason, at := "lease expired: it never began", time.Now()
			began := false
			for _, rec := range c.proc(leader).logLines("started leading") {
				if tm, _ := rec["term"].(float64); uint64(tm) == term {
					began = true
				}
			}
			if began {
				waitFor(t, time.Minute, leader+" logs why it stopped leading", func() (bool, string) {
					for _, rec := range c.proc(leader).logLines("stopped leading") {
						if tm, _ := rec["term"].(float64); uint64(tm) == term {
							reason, _ = rec["reason"].(string)
							ts, _ := rec["time"].(string)
							at, _ = time.Parse(time.RFC3339Nano, ts)
							return true, ""
						}
					}
					return false, "not yet"
				})
			}
			switch {
			case reason == "resigned": // the hand-off to the best-priority member
				t.Logf("%s handed term %d over", leader, term)
			case strings.HasPrefix(reason, "lease expired"):
				for _, id := range c.ids {
					for _, sp := range d.DeafSpells(id, "election:"+c.group) {
						to := sp.To
						if to.IsZero() {
							to = time.Now()
						}
						if to.After(at.Add(-c.et)) && sp.From.Before(at) && to.Sub(sp.From) > c.hb {
							t.Fatalf("%s lost its lease at term %d after %s heard nothing for %v (every subscription reset at once), %v before", leader, term, id,
								to.Sub(sp.From).Round(time.Millisecond), at.Sub(sp.From).Round(time.Millisecond))
						}
					}
				}
				losses++
				t.Logf("%s lost its lease at term %d, not deaf before (%s): acks too late, not a reset", leader, term, reason)
			default:
				t.Fatalf("%s stopped leading term %d: %q (%s)", leader, term, reason, moved)
			}
			leader, term, _ = c.waitAgreement("", term+1, time.Until(deadline))
			watch()
			continue
		}
		n := -base
		for _, id := range c.ids {
			n += brokerMetricSum(t, c.proc(id), "subscription_restarts_total")
		}
		if b, err := os.ReadFile(filepath.Join(c.shared, "lock")); n >= restarts && err == nil && string(b) == fmt.Sprintf("%d %s", term, leader) {
			t.Logf("%s leads term %d; %v subscription restarts in %v, no election while a leader led (%d leases lost to late acks)", leader, term, n, time.Since(t0).Round(time.Millisecond), losses)
			return leader
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v subscription restarts in %v, want %v, and %s's command of term %d (%d leases lost to late acks)", n, time.Since(t0).Round(time.Second), restarts, leader, term, losses)
		}
	}
}

// waitBestLeader waits until every agent agrees on a leader that has the
// highest priority among the members.
func (c *cluster) waitBestLeader(within time.Duration) (string, uint64) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		leader, term, _ := c.waitAgreement("", 1, time.Until(deadline))
		s, err := c.proc(leader).status()
		if err == nil && s.Leader == leader && s.Term == term {
			best := true
			for _, m := range s.Members {
				if m.ID != leader && m.Priority > s.Priority {
					best = false
				}
			}
			if best {
				return leader, term
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the best-priority member does not lead within %v (leader %s: %+v %v)", within, leader, s, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopAll SIGTERMs every live agent and expects exit 0.
func (c *cluster) stopAll() {
	var live []string
	for _, id := range c.ids {
		if p := c.proc(id); p.alive() {
			c.signal(id, syscall.SIGTERM)
			live = append(live, id)
		}
	}
	for _, id := range live {
		if code := c.waitExit(id, time.Minute); code != 0 {
			c.t.Errorf("%s exited %d after SIGTERM, want 0", id, code)
		}
	}
}

var metricLine = regexp.MustCompile(`^electcore_pilot_broker_(\w+)\{broker="([^"]*)",[^}]*\} (\S+)$`)

// brokerMetrics scrapes p's per-broker pilot metrics: name → broker → value.
func brokerMetrics(t *testing.T, p *agentProc) map[string]map[string]float64 {
	t.Helper()
	code, body, err := p.get("/metrics")
	if err != nil || code != 200 {
		t.Fatalf("/metrics of %s: %d %v", p.id, code, err)
	}
	out := map[string]map[string]float64{}
	for _, l := range strings.Split(body, "\n") {
		if m := metricLine.FindStringSubmatch(l); m != nil {
			v, _ := strconv.ParseFloat(m[3], 64)
			if out[m[1]] == nil {
				out[m[1]] = map[string]float64{}
			}
			out[m[1]][m[2]] = v
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s exposes no per-broker metrics", p.id)
	}
	return out
}

func brokerMetric(t *testing.T, p *agentProc, name, broker string) float64 {
	t.Helper()
	m := brokerMetrics(t, p)[name]
	if m == nil {
		t.Fatalf("%s: no metric electcore_pilot_broker_%s", p.id, name)
	}
	return m[broker]
}

func brokerMetricSum(t *testing.T, p *agentProc, name string) float64 {
	t.Helper()
	sum := 0.0
	for _, v := range brokerMetrics(t, p)[name] {
		sum += v
	}
	return sum
}

// Fault 3 prevented: an agent whose only broker is its own node refuses to
// start (publishing there would flood its daemon); listed among others, its
// own node is only subscribed to, never published to (the tests above
// check SelfPublishes stays 0).
func TestPilotRefusesOwnNodeAsOnlyBroker(t *testing.T) {
	pilotctl := pilotstandin.Build(t)
	d := pilotstandin.StartDaemon(t, pilotstandin.Options{Hosts: []string{"a1", "a2"}})
	env := append(d.Env(), pilotstandin.EnvNode+"=a1")
	for _, broker := range []string{"a1", "0:0000.0000.0001", "1"} {
		code, _, stderr := runCLI(t, 30*time.Second, env, "run", "--group", "g", "--id", "a1", "--members", "a1,a2",
			"--state-dir", t.TempDir(), "--transport", "pilot", "--broker", broker, "--pilotctl", pilotctl)
		if code != exitUsage || !strings.Contains(stderr, "floods") {
			t.Fatalf("--broker %s on node a1: exit %d, %s", broker, code, stderr)
		}
	}
	if d.SelfPublishes() != 0 {
		t.Fatal("published to its own broker")
	}
}

// Fault 1 as the issue saw it, for contrast: all three agents on one
// dedicated broker. Killing the leader's daemon blocks that broker behind the
// dead subscription, and nobody is elected until it unblocks (here 4 s after
// the first event the dead subscription swallowed; on Pilot 28-45 s). The
// members'-nodes layout above fails over in ~1.3 s from the same fault.
//
// The broker blocks only once the dead subscription's window is used up,
// not at the kill, and the event that blocks it still reaches the
// subscribers ahead of the dead one. An election is four events in a row
// (pre-vote request and grant, vote request and grant): with the default
// window of 4 the survivors can finish one before the block (on Pilot the
// group stalled in 2 of 5 runs), so this test takes a window of 2 — at most
// 3 events pass — and measures from the block the broker reports, not from
// the kill.
func TestE2EPilotSharedBrokerStallsOnDaemonKill(t *testing.T) {
	opts := pilotFaults("b", "a1", "a2", "a3")
	opts.ResetEvery, opts.DeadSubscriberWindow, opts.DeadSubscriberBlock = 0, 2, 4*time.Second
	c, d := newPilotCluster(t, opts, "b")
	c.startAll()
	// The bounds below are give-up times for causes (the first election,
	// the broker's block and unblock, the election after it), generous for
	// a loaded runner; the test asserts only their order.
	leader, term := c.waitBestLeader(time.Minute)
	d.KillNode(leader)
	killed := time.Now()
	for {
		for _, id := range c.ids {
			if id == leader {
				continue
			}
			s, err := c.proc(id).status()
			// Read after the answer: it was leading by then at the latest.
			now, until := time.Now(), d.BlockedUntil("b")
			if err == nil && s.Role == "leader" && (until.IsZero() || now.Before(until)) {
				state := "it has not blocked yet"
				if !until.IsZero() {
					state = fmt.Sprintf("it is blocked until %v after the kill", until.Sub(killed).Round(time.Millisecond))
				}
				t.Fatalf("%s leads %v after the kill, before the shared broker unblocked: %s", id, now.Sub(killed).Round(time.Millisecond), state)
			}
		}
		if until := d.BlockedUntil("b"); !until.IsZero() && time.Now().After(until) {
			t.Logf("the broker was blocked until %v after the kill", until.Sub(killed).Round(time.Millisecond))
			break
		}
		// The block needs the survivors' election traffic (after an election
		// timeout) and lasts 4 s.
		if time.Since(killed) > time.Minute {
			t.Fatal("the broker did not block behind the dead subscriber, or never unblocked, within a minute")
		}
		time.Sleep(50 * time.Millisecond) // polls the stand-in and the agents
	}
	next, nextTerm, _ := c.waitAgreement(leader, term+1, time.Minute)
	t.Logf("shared broker: %s leads term %d only %v after %s's daemon was killed (blocked 4 s)", next, nextTerm, time.Since(killed).Round(time.Millisecond), leader)
}

// A node's daemon killed hard and restarted comes back cut off: the others'
// daemons still hold a tunnel to its old endpoint and key (docs/pilotctl.md,
// "A restarted daemon"). The survivors keep their leader, and each logs
// once — not at every failed publish — that the restarted node's broker
// answers nothing while its node is registered, with the likely cause and
// the fix. When the restarted node may re-key by sending first (a persisted
// identity, no beacon relay), its own agent's publishes do it: it hears the
// leader again, and the survivors say its broker publishes again. At the
// default timings and without the random resets: two survivors at the
// scaled timings, or with resets every second, lost their majority to CPU
// starvation at load 40-50.
func TestE2EPilotRestartedNodeCutOff(t *testing.T) {
	c, d := newPilotClusterTimed(t, pilotstandin.Options{Hosts: []string{"a1", "a2", "a3"}}, "a1,a2,a3",
		core.DefaultHeartbeatMs*time.Millisecond, core.DefaultElectionTimeoutMs*time.Millisecond)
	c.startAll()
	leader, term, _ := c.waitAgreement("", 1, time.Minute)
	cut := c.ids[0]
	if cut == leader {
		cut = c.ids[1]
	}
	const diagnosis = "answers nothing while its node is registered"
	d.KillNode(cut)
	d.RestartNodeStale(cut, false)
	for _, id := range c.ids {
		if id == cut {
			continue
		}
		rec := c.waitLog(id, diagnosis, time.Minute)
		if rec["host"] != cut || rec["since"] == nil || rec["likely_cause"] == nil || rec["fix"] == nil {
			t.Errorf("%s: diagnosis %v, want host %s with since, likely_cause and fix", id, rec, cut)
		}
	}
	c.waitAgreement(cut, term, time.Minute)
	// Once per spell: ten more failed or dropped publishes to it, one line.
	for _, id := range c.ids {
		if id == cut {
			continue
		}
		fails := func() float64 {
			return brokerMetric(t, c.proc(id), "publish_errors_total", cut) + brokerMetric(t, c.proc(id), "drops_total", cut)
		}
		n0 := fails()
		waitFor(t, time.Minute, id+": ten more failed publishes to "+cut, func() (bool, string) {
			n := fails()
			return n >= n0+10, fmt.Sprintf("%v then %v", n0, n)
		})
		if n := len(c.proc(id).logLines(diagnosis)); n != 1 {
			t.Errorf("%s logged the diagnosis %d times in one spell, want once", id, n)
		}
	}

	d.KillNode(cut)
	d.RestartNodeStale(cut, true)
	c.waitAgreement("", term, time.Minute)
	for _, id := range c.ids {
		if id == cut {
			continue
		}
		waitFor(t, time.Minute, id+" says broker "+cut+" publishes again after the cut-off", func() (bool, string) {
			for _, rec := range c.proc(id).logLines("pilot broker publishes again") {
				if rec["host"] == cut && rec["cut_off_for"] != nil {
					return true, ""
				}
			}
			return false, "not yet"
		})
	}
	c.stopAll()
	c.checkCommandLog()
}

// Flooding daemons (Pilot's FIN-ACK loops, docs/pilotctl.md "Why the
// daemons flood") in the recommended layout, with the resets and the
// per-connection ceiling on: every publish, and so its event, is delayed at
// random up to 200 ms, 100 ms on average (publish to delivery measured
// 78-107 ms on real Pilot with the daemons flooding; the stand-in's own is
// ~5 ms). At up to 300 ms and load 13, the two survivors of a kill agreed
// on no leader in 17 s (terms 2 to 6, one candidate, one pre-candidate):
// with pilotctl's process start under load, a message's delay then exceeds
// the gap between two members' campaign deadlines (a rank's slot is ET/8,
// 250 ms), and split votes repeat. The group must regain a leader, and
// that leader's command must run, after each fault — a SIGKILLed leader,
// a SIGTERM hand-off — and the leader-only command must never run twice
// at once. The hand-off must move leadership by the resign, not by an
// election timeout: no follower campaigns.
//
// How fast is logged against the design bounds, not asserted: a loaded
// runner misses them, and make bench-scale measures failover. Leadership
// also moves under the delays and load (a lease lost to a late round of
// acks: a clean-clone CI pair at load 15-30 went through terms 4-9 in 26 s,
// every lease lost within a second): the waits accept a later term, and
// give up after minutes, bounds on their cause (an agreed leader, its
// command). A hand-off that was not one — the resigner's leadership lost
// before its resign, or a follower campaigning — runs again from a
// restarted resigner: a hand-off broken for good fails every try.
func TestE2EPilotFloodDelays(t *testing.T) {
	const flood = 200 * time.Millisecond
	opts := pilotFaults("a1", "a2", "a3")
	opts.FloodDelayMax = flood
	pilotctl := pilotstandin.Build(t)
	d := pilotstandin.StartDaemon(t, opts)
	c := newCluster(t, 3, []string{"--transport", "pilot", "--broker", "a1,a2,a3", "--pilotctl", pilotctl}, d.Env(),
		pilotDefHB, pilotDefET, pilotLatency+flood)
	c.envOf = func(id string) []string { return []string{pilotstandin.EnvNode + "=" + id} }
	c.startAll()
	leader, term, _ := c.waitAgreement("", 1, 2*time.Minute)
	c.waitCommandFrom("", term, 2*time.Minute)
	// The leader right before the kill: a lease lost to load since would
	// make it a follower's.
	leader, term, _ = c.waitAgreement("", term, 2*time.Minute)
	t.Logf("first leader: %s at term %d", leader, term)

	// A SIGKILLed leader is replaced, and the killed agent rejoins. The
	// bound is logged, not asserted: two survivors can split their votes
	// several times over when a message's delay (pilotctl's process start
	// on a loaded runner, plus the flood's) exceeds the gap between their
	// campaign deadlines (a rank's slot, ET/8): at load 15-20 once no
	// leader in 16.5 s (both candidates at term 5).
	c.signal(leader, syscall.SIGKILL)
	c.waitExit(leader, time.Minute)
	killed := leader
	leader, term, took := c.waitAgreement(killed, term+1, 2*time.Minute)
	t.Logf("failover: %s leads term %d, %v after the SIGKILL of %s (design bound %v)", leader, term, took.Round(time.Millisecond), killed, 2*c.et+5*c.latency+time.Second)
	_, term = c.waitCommandFrom(killed, term, 2*time.Minute)
	c.start(killed)

	// A SIGTERM hand-off: the resigner stops leading by its resign and
	// exits 0, and another leads without a campaign of its own.
	for try := 1; ; try++ {
		// A leader hands over to the best member that acked its
		// configuration; right after an election (the rejoin can bring
		// one) none may have yet, their acks still in the flood, and the
		// resign then names nobody: an election, not a hand-off (a CI
		// run: SIGTERM 0.8 s into a2's term 3, a resign naming nobody,
		// terms 4-6 split, a3 led term 7 after 10.5 s).
		resigner, rterm := c.waitHandoffReady(term, 3*time.Minute)
		campaigns := map[string]uint64{}
		for _, id := range c.ids {
			if s, err := c.proc(id).status(); err == nil && id != resigner {
				campaigns[id] = s.Elections
			}
		}
		t0 := time.Now()
		c.signal(resigner, syscall.SIGTERM)
		leader, term, took = c.waitAgreement(resigner, rterm+1, 2*time.Minute)
		if code := c.waitExit(resigner, time.Minute); code != 0 {
			t.Fatalf("%s exited %d after SIGTERM, want 0", resigner, code)
		}
		problem := ""
		for id, before := range campaigns {
			if s, err := c.proc(id).status(); err != nil || s.Elections != before {
				problem = fmt.Sprintf("%s started %d campaigns (%v): the leadership moved by an election timeout, not by the resign", id, s.Elections-before, err)
			}
		}
		why := c.stoppedLeading(resigner, rterm)
		if why != "resigned" {
			problem = fmt.Sprintf("%s stopped leading term %d: %q, not by its resign", resigner, rterm, why)
		}
		if problem == "" {
			t.Logf("hand-off: %s → %s at term %d, %v after SIGTERM (design bound %v)", resigner, leader, term, took.Round(time.Millisecond), c.et+5*c.latency+time.Second)
			c.waitCommandFrom(resigner, term, 2*time.Minute)
			break
		}
		if try == stepTries {
			t.Fatalf("hand-off, %d tries: %s (leaderships lost since the last SIGTERM: %q)", try, problem, c.lostSince(t0))
		}
		t.Logf("hand-off from %s at term %d, try %d: %s (leaderships lost since the SIGTERM: %q); again", resigner, rterm, try, problem, c.lostSince(t0))
		c.start(resigner)
	}
	c.stopAll()
	c.checkCommandLog()

	// The fault was exercised: publishes were delayed, many by more than
	// half the maximum.
	delays := d.FloodDelays()
	long := 0
	for _, x := range delays {
		if x > flood/2 {
			long++
		}
	}
	if long < 10 {
		t.Fatalf("%d publishes delayed, %d by more than %v: the flood was not modelled", len(delays), long, flood/2)
	}
	t.Logf("%d publishes delayed, %d by more than %v", len(delays), long, flood/2)
	if n := d.SelfPublishes(); n != 0 {
		t.Errorf("%d publishes from a node to its own broker", n)
	}
}

// waitHandoffReady waits until every live agent follows one leader, of a
// term at least minTerm, and holds that term's configuration, committed: so
// the leader has a successor to name (a member that acked its
// configuration); and until that leader holds its lease, so that it has
// logged that it leads (one elected by a hand-off waits out the resigner's
// hold first) and will log why it stops.
func (c *cluster) waitHandoffReady(minTerm uint64, within time.Duration) (string, uint64) {
	c.t.Helper()
	var leader string
	var term uint64
	waitFor(c.t, within, "every agent follows one leader and holds its configuration, committed", func() (bool, string) {
		l, tm, ok, view := c.agreed("")
		leader, term = l, tm
		if !ok || tm < minTerm {
			return false, view
		}
		for _, id := range c.ids {
			if p := c.proc(id); p != nil && p.alive() {
				s, err := p.status()
				if err != nil || s.Term != tm || s.ConfTerm != tm || !s.ConfCommitted || id == l && s.LeaseRemainingMs <= 0 {
					return false, fmt.Sprintf("%s; %s: term %d conf %d.%d committed %v lease %d ms %v", view, id, s.Term, s.ConfTerm, s.ConfIndex, s.ConfCommitted, s.LeaseRemainingMs, err)
				}
			}
		}
		return true, ""
	})
	return leader, term
}

// Two of three nodes' daemons (the leader's and another's) killed hard and
// restarted as a real Pilot daemon comes back (RestartNodeStale): the
// survivor's daemon holds stale tunnels to both, and the group has no
// majority until the restarted nodes re-key them, which a node does by
// sending to a peer first (a persisted identity, no beacon relay: the
// recommended daemon setup). The Pilot network is partitioned until then,
// and the group must be led again as soon as it no longer is:
//   - while its daemon is down, an agent keeps trying every message (each
//     fails at once), so its first message after the restart goes out and
//     re-keys; a back-off grown during the outage would hold it back;
//   - the survivor says once per broker that it answers nothing while its
//     node is registered;
//   - no back-off grown while a pair was cut off exceeds the transport's
//     ceiling, and once the pair is re-keyed the peer's messages reach the
//     restarted node's broker again;
//   - a leader after the partition ends (the design bound is logged; the
//     wait gives up after a minute).
func TestE2EPilotMajorityRestartedStale(t *testing.T) {
	c, d := newPilotClusterTimed(t, pilotstandin.Options{Hosts: []string{"a1", "a2", "a3"}}, "a1,a2,a3", pilotDefHB, pilotDefET)
	c.startAll()
	// The best leader with its command running: a leadership that ends
	// before its command starts (a3 led terms 1 and 2 in a CI run at load
	// ~30, its command of term 1 never ran) is waited out. Two minutes for
	// all of it, a give-up, as TestE2EPilotFloodDelays gives its first
	// command: at load 44-48 (CI run s12-5) the group churned through six
	// terms and one minute ran out.
	leader, term := c.waitBestLeaderCommand(2 * time.Minute)
	other, survivor := "", ""
	for _, id := range c.ids {
		switch {
		case id == leader:
		case other == "":
			other = id
		default:
			survivor = id
		}
	}
	restartedNodes := []string{leader, other}
	killed := time.Now()
	for _, n := range restartedNodes {
		d.KillNode(n)
	}
	// Down until the survivor has diagnosed both (every publish to them
	// failed for 10 heartbeats): longer than any publish back-off.
	const diagnosis = "answers nothing while its node is registered"
	diagnosed := func(host string) int {
		n := 0
		for _, rec := range c.proc(survivor).logLines(diagnosis) {
			if rec["host"] == host {
				n++
			}
		}
		return n
	}
	for _, n := range restartedNodes {
		waitFor(t, time.Minute, survivor+" diagnoses broker "+n, func() (bool, string) { return diagnosed(n) > 0, "not yet" })
	}
	// And until it has failed six times on each: a back-off doubling from
	// 250 ms reaches any ceiling up to 8 s by then, so a ceiling above the
	// retry bound would hold its messages back after the partition ends.
	for _, n := range restartedNodes {
		waitFor(t, time.Minute, survivor+" fails six publishes to "+n, func() (bool, string) {
			k := 0
			for _, rec := range c.proc(survivor).logLines("backing off this broker") {
				if rec["host"] == n {
					k++
				}
			}
			return k >= 6, fmt.Sprintf("%d", k)
		})
	}
	restarted := time.Now()
	for _, n := range restartedNodes {
		d.RestartNodeStale(n, true)
	}
	var healed time.Time
	waitFor(t, time.Minute, "the restarted nodes re-key every stale tunnel", func() (bool, string) {
		a, b := d.StaleTunnels(leader), d.StaleTunnels(other)
		if a == 0 && b == 0 {
			healed = time.Now()
			return true, ""
		}
		return false, fmt.Sprintf("%s: %d stale, %s: %d stale", leader, a, other, b)
	})
	// A broker that answers again is tried within max(publish deadline,
	// back-off ceiling) = 1 s (transport/pilot); the other second is for
	// a loaded runner's process starts.
	const retryWithin = 2 * time.Second
	const backoffCeiling = time.Second // transport/pilot's default PublishBackoffMax
	// The peers' retry and an election is the bound.
	bound := retryWithin + 2*c.et + 5*c.latency + time.Second
	next, nextTerm, _ := c.waitAgreement("", term+1, time.Minute)
	t.Logf("%s and %s down %v; partition ended %v after their restart; %s leads term %d %v after that (design bound %v)",
		leader, other, restarted.Sub(killed).Round(time.Millisecond), healed.Sub(restarted).Round(time.Millisecond),
		next, nextTerm, time.Since(healed).Round(time.Millisecond), bound)
	for _, n := range restartedNodes {
		for _, sp := range d.DeafSpells(n, "election:"+c.group) {
			if sp.From.Before(restarted) && sp.To.After(restarted) {
				t.Logf("%s subscribed again %v after its restart", n, sp.To.Sub(restarted).Round(time.Millisecond))
			}
		}
	}
	// Its command, or a later leader's: one that just re-keyed may still
	// lose a lease to a late ack on a loaded runner.
	c.waitCommandFrom("", nextTerm, time.Minute)
	for _, n := range restartedNodes {
		for _, rec := range c.proc(n).logLines("publish failed") {
			if e, _ := rec["err"].(string); strings.Contains(e, "skipped while backing off") && strings.Contains(e, "not_running") {
				t.Errorf("%s held a message back for a back-off its own daemon's outage caused: %v", n, e)
				break
			}
		}
		if got := diagnosed(n); got != 1 {
			t.Errorf("%s diagnosed broker %s %d times in one spell, want once", survivor, n, got)
		}
	}
	checkRetriedAfterRekey(t, c, d, backoffCeiling)
	c.stopAll()
	c.checkCommandLog()
}

// checkRetriedAfterRekey checks that no back-off grown while a pair was cut
// off keeps the peer from the restarted node once the pair is re-keyed:
// every back-off the peer's transport took for that broker is within the
// ceiling (so it is tried again within max(publish deadline, ceiling) of
// answering), and, from the stand-in's request log, the peer's messages
// reach the restarted node again after the re-key. The wall-clock time of
// that retry is not asserted: on a loaded runner a pilotctl process start
// alone can outlast the ceiling.
func checkRetriedAfterRekey(t *testing.T, c *cluster, d *pilotstandin.Daemon, ceiling time.Duration) {
	t.Helper()
	rekeys := d.Rekeys()
	if len(rekeys) == 0 {
		t.Error("no pair was re-keyed")
	}
	for _, rk := range rekeys {
		var longest time.Duration
		for _, rec := range c.proc(rk.Peer).logLines("backing off this broker") {
			if ns, ok := rec["backoff"].(float64); ok && rec["host"] == rk.Node {
				longest = max(longest, time.Duration(ns))
			}
		}
		if longest > ceiling {
			t.Errorf("%s backed off broker %s for %v, over the %v ceiling", rk.Peer, rk.Node, longest, ceiling)
		}
		var reached time.Time
		waitFor(t, time.Minute, rk.Peer+"'s messages reach "+rk.Node+" after it re-keyed their pair", func() (bool, string) {
			for _, r := range d.Requests() {
				if r.Op == "publish" && r.Node == rk.Peer && r.Host == rk.Node && !r.Refused && r.At.After(rk.At) {
					reached = r.At
					return true, ""
				}
			}
			return false, "nothing yet"
		})
		t.Logf("%s re-keyed its pair with %s; %s's longest back-off of it %v, its next message to it %v after the re-key",
			rk.Node, rk.Peer, rk.Peer, longest, reached.Sub(rk.At).Round(time.Millisecond))
	}
}
