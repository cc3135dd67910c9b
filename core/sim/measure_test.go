package sim

import (
	"testing"

	"github.com/electcore/electcore/core"
)

// The measuring runs use the defaults (HeartbeatMs 500, ElectionTimeoutMs
// 2000) and a quiet network with 100 ms one-way latency (±20 ms jitter).
const (
	latency = 100
	jitter  = 20
	// failoverBound: p99 of the failover must be within 2 election timeouts
	// + 5 latencies.
	failoverBound = 2*core.DefaultElectionTimeoutMs + 5*latency
	// handoffBound: a resign hands over within 3 latencies.
	handoffBound = 3 * latency
)

func measured(t *testing.T, o Options, seeds int) *Report {
	t.Helper()
	o.LatencyMs, o.JitterMs = latency, jitter
	rep, err := RunMany(t.Context(), o, Seeds(1, seeds), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Violations {
		t.Errorf("%s\n%s", v, v.Excerpt)
	}
	return rep
}

func TestFailover(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode         core.Mode
		nodes, seeds int
		cycles       int
	}{
		{core.ModeQuorum, 5, 20, 10},
		{core.ModeQuorum, 101, 1, 8},
		{core.ModeBully, 5, 20, 10},
		{core.ModeBully, 101, 1, 8},
	} {
		rep := measured(t, Options{Mode: c.mode, Scenario: ScenarioFailover, Nodes: c.nodes, Cycles: c.cycles}, c.seeds)
		if want := c.seeds * c.cycles; rep.FailoverKnown.N != want {
			t.Errorf("%s n=%d: %d failovers measured, want %d", c.mode, c.nodes, rep.FailoverKnown.N, want)
		}
		if rep.FailoverElected.P99 > failoverBound || rep.FailoverKnown.P99 > failoverBound {
			t.Errorf("%s n=%d: failover p99 elected %d ms, known %d ms; bound %d ms", c.mode, c.nodes,
				rep.FailoverElected.P99, rep.FailoverKnown.P99, failoverBound)
		}
		t.Logf("%s n=%d failover: elected %+v, known by all %+v, publishes per election %+v",
			c.mode, c.nodes, rep.FailoverElected, rep.FailoverKnown, rep.PublishesPerElection)
	}
}

func TestResignHandoff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		mode         core.Mode
		nodes, seeds int
		cycles       int
	}{
		{core.ModeQuorum, 5, 20, 10},
		{core.ModeQuorum, 101, 1, 6},
		{core.ModeBully, 5, 20, 10},
	} {
		rep := measured(t, Options{Mode: c.mode, Scenario: ScenarioResign, Nodes: c.nodes, Cycles: c.cycles}, c.seeds)
		if want := c.seeds * c.cycles; rep.HandoffElected.N != want {
			t.Errorf("%s n=%d: %d hand-offs measured, want %d", c.mode, c.nodes, rep.HandoffElected.N, want)
		}
		// Both modes: a bully leader names the best member it ever heard
		// (its followers are silent), which claims the next term at once.
		if rep.HandoffElected.P99 > handoffBound {
			t.Errorf("%s n=%d: resign hand-off p99 %d ms, bound %d ms", c.mode, c.nodes, rep.HandoffElected.P99, handoffBound)
		}
		t.Logf("%s n=%d resign: successor elected %+v, known by all %+v", c.mode, c.nodes, rep.HandoffElected, rep.HandoffKnown)
	}
}

// TestHeal: after a partition heals, a bully swarm in which each side had
// settled on a leader converges on one, the one with the highest term (then
// priority, then id), within one heartbeat interval plus one delay. A quorum
// swarm converges within the liveness bound.
func TestHeal(t *testing.T) {
	t.Parallel()
	for _, mode := range []core.Mode{core.ModeBully, core.ModeQuorum} {
		rep := measured(t, Options{Mode: mode, Scenario: ScenarioHeal, Nodes: 5, Cycles: 5}, 20)
		settled := 0
		hb := int64(core.DefaultHeartbeatMs)
		bound := hb + hb*core.DefaultMaxDriftPPM/1_000_000 + latency + jitter + 1
		for _, seed := range Seeds(1, 20) {
			res, _ := Run(Options{Seed: seed, Mode: mode, Scenario: ScenarioHeal, Nodes: 5, Cycles: 5, LatencyMs: latency, JitterMs: jitter})
			for _, h := range res.Heals {
				if mode == core.ModeQuorum {
					if h.ConvergedMs > res.BoundMs {
						t.Errorf("quorum seed %d: healed at %d, converged after %d ms > %d", seed, h.AtMs, h.ConvergedMs, res.BoundMs)
					}
					continue
				}
				if h.SidesSettled != 2 {
					continue
				}
				settled++
				if h.ConvergedMs > bound || h.Term != h.MaxTermAtHeal {
					t.Errorf("bully seed %d: healed at %d, converged on %s (term %d, highest %d) after %d ms, bound %d ms",
						seed, h.AtMs, h.Leader, h.Term, h.MaxTermAtHeal, h.ConvergedMs, bound)
				}
			}
		}
		if mode == core.ModeBully && settled < 50 {
			t.Errorf("only %d heals with a settled leader on each side", settled)
		}
		t.Logf("%s heal: converged %+v (bully: %d heals with two settled sides)", mode, rep.HealConverged, settled)
	}
}

// A measuring run on a network too slow for any election to finish (every
// round trip outlasts the election timeout) ends with a liveness violation
// instead of waiting for a settled leader forever.
func TestMeasureGivesUpWithoutASettledLeader(t *testing.T) {
	t.Parallel()
	for _, sc := range []Scenario{ScenarioFailover, ScenarioResign, ScenarioHeal} {
		res, err := Run(Options{Mode: core.ModeQuorum, Scenario: sc, Nodes: 3, Cycles: 3, Seed: 1,
			LatencyMs: 5 * core.DefaultElectionTimeoutMs, JitterMs: -1})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Violations) != 1 || res.Violations[0].Invariant != InvLiveness {
			t.Fatalf("%s: violations %v, want one liveness violation", sc, res.Violations)
		}
		if res.FirstLeaderMs != 0 || len(res.Failovers)+len(res.Handoffs)+len(res.Heals) != 0 {
			t.Errorf("%s: first leader at %d ms, %d disruptions measured: want none", sc, res.FirstLeaderMs,
				len(res.Failovers)+len(res.Handoffs)+len(res.Heals))
		}
		t.Logf("%s: %s", sc, res.Violations[0].Detail)
	}
}
