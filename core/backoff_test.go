package core

import (
	"testing"
)

// campaignTimes records when each node published a pre-vote request (a
// campaign), from now on.
func campaignTimes(n *testNet) map[string][]int64 {
	at := map[string][]int64{}
	n.sent = func(from string, m Message) {
		var w wireMsg
		if decodeWire(m.Payload, &w) == nil && w.Type == typeElection && w.Pre {
			at[from] = append(at[from], n.now)
		}
	}
	return at
}

// crashedLeaderNet elects a leader among a, b and c, whose random draws
// come from seed, and crashes it.
func crashedLeaderNet(t *testing.T, seed uint64) *testNet {
	t.Helper()
	n := newTestNet(t, ModeQuorum)
	n.ids = []string{"a", "b", "c"}
	n.cfgHook = func(c *Config) { c.Seed = seed*7919 + 2*uint64(c.ID[0]) }
	for _, id := range n.ids {
		n.start(id)
	}
	n.advance(3000, 10)
	l := n.leaders()
	if len(l) != 1 {
		t.Fatalf("seed %d: leaders %v", seed, l)
	}
	n.crash(l[0][:1])
	return n
}

// A member that hears no leader backs off: each election timeout that runs
// out doubles its slots (ET/8) up to eight times, so its campaigns, one
// election timeout plus a random part of a slot apart while it is the best
// candidate, spread up to two election timeouts apart; hearing a leader, or
// leading, brings the default timing back at once. Without the back-off every gap
// stays under ET + ET/8.
func TestCampaignBackoffWidensAndResets(t *testing.T) {
	const et, slot, step = DefaultElectionTimeoutMs, DefaultElectionTimeoutMs / 8, 10
	wide := 0
	for seed := uint64(1); seed <= 40; seed++ {
		n := newTestNet(t, ModeQuorum)
		n.ids = []string{"a", "b", "c"}
		n.prio = map[string]uint32{"a": 30, "b": 10, "c": 20}
		n.cfgHook = func(c *Config) { c.Seed = seed<<8 | uint64(c.ID[0]) }
		for _, id := range n.ids {
			n.start(id)
		}
		n.advance(15_000, 10) // the first leader hands over to a, the best
		if l := n.leaders(); len(l) != 1 || l[0][:1] != "a" {
			t.Fatalf("seed %d: leaders %v, want a", seed, l)
		}
		// c alone: nobody answers, nobody is live after two election
		// timeouts (rank 0), every campaign fails.
		n.partition([]string{"a", "b"}, []string{"c"})
		at := campaignTimes(n)
		n.advance(60_000, 10)
		cs := at["c"]
		if len(cs) < 10 {
			t.Fatalf("seed %d: c campaigned %d times in 60 s alone", seed, len(cs))
		}
		for i := 1; i < len(cs); i++ {
			gap := cs[i] - cs[i-1]
			level := min(i, maxBackoff)
			// (+step: the test steps every 10 ms)
			if gap < et || gap >= et+5*slot<<level+step {
				t.Errorf("seed %d: campaigns %d and %d of c %d ms apart: want [%d, %d) ms", seed, i, i+1, gap, et, et+5*slot<<level+step)
			}
			if i >= 4 { // rank 0, the full back-off
				if gap >= et+slot<<maxBackoff+step {
					t.Errorf("seed %d: campaign %d of c %d ms after the previous: want < %d ms", seed, i+1, gap, et+slot<<maxBackoff+step)
				}
				if gap >= et+2*slot {
					wide++
				}
			}
		}
		// Healed, c hears a; then a crashes: c, now the best candidate,
		// campaigns within ET plus one default slot of a's last heartbeat.
		n.partition()
		n.advance(1000, 10)
		if s := n.status("c"); s.Leader != "a" {
			t.Fatalf("seed %d: c follows %q after the heal, want a", seed, s.Leader)
		}
		at = campaignTimes(n)
		n.crash("a")
		last := n.now
		n.advance(3000, 10)
		if len(at["c"]) == 0 || at["c"][0]-last >= et+slot+step {
			t.Errorf("seed %d: c's first campaign after a's crash at %d: %v, want within %d ms (no back-off left)", seed, last, at["c"], et+slot+step)
		}
		// c won that campaign, one timeout after it last heard a leader.
		// Once a no longer counts as live, c is cut off: it steps down
		// when its lease ends and, having led, campaigns again with the
		// default slot.
		n.advance(2*et, 10)
		if l := n.leaders(); len(l) != 1 || l[0][:1] != "c" {
			t.Fatalf("seed %d: leaders %v after a's crash, want c", seed, l)
		}
		n.partition([]string{"b"}, []string{"c"})
		at = campaignTimes(n)
		for n.status("c").Role == RoleLeader {
			n.advance(1, 1)
		}
		down := n.now
		n.advance(3000, 10)
		if len(at["c"]) == 0 || at["c"][0]-down >= et+slot+step {
			t.Errorf("seed %d: c stepped down at %d and campaigned at %v, want within %d ms (no back-off left)", seed, down, at["c"], et+slot+step)
		}
	}
	if wide == 0 {
		t.Error("no campaign of a lone member came later than ET + 2 slots after its previous one: no back-off")
	}
}

// On a network slower than a slot, two survivors of a leader's crash split
// votes; backing off, they settle in few rounds. Without the back-off, at
// 300–400 ms one-way delays some of these 200 failovers took 10 or 12
// campaigns (and up to 18.8 s); with it at most 6 (11.1 s).
func TestCampaignBackoffSettlesSlowDelivery(t *testing.T) {
	for _, delay := range []int64{300, 400} {
		worst, worstSeed := 0, uint64(0)
		for seed := uint64(1); seed <= 200; seed++ {
			n := crashedLeaderNet(t, seed)
			at := campaignTimes(n)
			start := n.now
			for len(n.leaders()) == 0 {
				if n.now-start > 60_000 {
					t.Fatalf("delay %d seed %d: no leader 60 s after the crash", delay, seed)
				}
				n.advanceDelayed(10, delay)
			}
			c := 0
			for _, ts := range at {
				c += len(ts)
			}
			if c > worst {
				worst, worstSeed = c, seed
			}
		}
		if worst > 7 {
			t.Errorf("delay %d ms: a failover took %d campaigns (seed %d), want at most 7", delay, worst, worstSeed)
		}
	}
}

// A leader heard for less than an election timeout does not end the
// back-off: overload makes such leaders step down within their first lease,
// and if each cleared it every member would campaign at the default pace
// again. Two survivors of a crash on a slow network split votes (backing
// off), one wins and crashes as soon as the other hears it: the other's
// next campaign still has wide slots.
func TestCampaignBackoffOutlivesShortLeader(t *testing.T) {
	const et, slot, step = DefaultElectionTimeoutMs, DefaultElectionTimeoutMs / 8, 10
	late := 0
	for seed := uint64(1); seed <= 40; seed++ {
		n := crashedLeaderNet(t, seed)
		var winner, other string
		for winner == "" || n.status(other).Leader != winner {
			if n.now > 60_000 {
				t.Fatalf("seed %d: no leader known to both survivors by %d", seed, n.now)
			}
			n.advanceDelayed(10, 400)
			if l := n.leaders(); winner == "" && len(l) == 1 {
				winner = l[0][:1]
				other = n.others(winner)[0]
				if n.down[other] {
					other = n.others(winner)[1]
				}
			}
		}
		n.crash(winner)
		var heard int64
		for _, m := range n.status(other).Members {
			if m.ID == winner {
				heard = m.LastHeard
			}
		}
		at := campaignTimes(n)
		for len(at[other]) == 0 && n.now < heard+et+slot<<maxBackoff+step {
			n.advanceDelayed(10, 400)
		}
		if len(at[other]) == 0 {
			t.Fatalf("seed %d: %s did not campaign within %d ms of hearing %s", seed, other, et+slot<<maxBackoff, winner)
		}
		if at[other][0]-heard >= et+slot+step {
			late++
		}
	}
	if late == 0 {
		t.Error("every survivor campaigned within ET + one default slot of last hearing a leader it had followed briefly: the back-off ended with it")
	}
}
