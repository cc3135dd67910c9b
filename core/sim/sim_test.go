package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/internal/abi"
)

// TestMain collects garbage at 4x the live heap, not 2x: a run allocates
// fast and keeps little (tens of MB for the whole suite), so the default
// spends about a tenth of the CPU collecting and in write barriers.
func TestMain(m *testing.M) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	os.Exit(m.Run())
}

// faultSeeds is how many seeds of the whole fault mix each mode runs:
// CISeeds (20,000) quorum + 20,000 bully (1,000 each with -short).
func faultSeeds() int {
	if testing.Short() {
		return 1000
	}
	return CISeeds
}

func runMix(t *testing.T, mode core.Mode, first uint64) *Report {
	t.Helper()
	return runSuite(t, Options{Mode: mode}, first)
}

// runSuite runs faultSeeds() seeds from first with o and reports every
// violation with the call that replays it.
func runSuite(t *testing.T, o Options, first uint64) *Report {
	t.Helper()
	mode := o.Mode
	rep, err := RunMany(t.Context(), o, Seeds(first, faultSeeds()), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range rep.Violations {
		if i == 3 {
			t.Errorf("... %d violations in all", len(rep.Violations))
			break
		}
		t.Errorf("%s\nreplay: sim.Run(sim.Options{Seed: %d, Mode: %q, Targeted: %v})\n%s", v, v.Seed, mode, o.Targeted, v.Excerpt)
	}
	t.Logf("%s: %d seeds (%d with membership changes: %d committed), %d steps, %.0f virtual hours, %d elections, %d bully split-brain elections in split networks, liveness after the faults %+v",
		mode, rep.Seeds, rep.MembershipSeeds, rep.ConfigChanges, rep.Steps, float64(rep.VirtualMs)/3.6e6, rep.Elections, rep.SplitBrains, rep.Liveness)
	if mode == core.ModeQuorum {
		// A hand-off on a healed network to a member that stays up makes
		// that member leader: a lost one costs an election timeout. Only a
		// resign too late for any hand-off (its next term already holds a
		// majority's votes for others) is not counted (handoff.go).
		t.Logf("hand-offs on a healed network: %d, lost %d (seeds %v); resigns too late for any: %d; needing members that know no leader of their term: %d; hand-off commands to a leader stalled past its lease: %d; successors stalled with their resign still due: %d",
			rep.HandoffsNamed, rep.HandoffsLost, rep.HandoffLostSeeds, rep.HandoffsSuperseded, rep.HandoffsUnheard, rep.StalledHandoffs, rep.LateHandoffResigns)
		if rep.HandoffsLost > 0 {
			t.Errorf("%d of %d hand-offs on a healed network did not make their successor leader (seeds %v; replay: electhost sim --scenario faults --seed S, with --targeted for that suite)", rep.HandoffsLost, rep.HandoffsNamed, rep.HandoffLostSeeds)
		}
		if rep.HandoffsNamed == 0 {
			t.Error("no hand-off on a healed network: the suite does not exercise them")
		}
	}
	if mode == core.ModeQuorum && (rep.MembershipSeeds < rep.Seeds/2 || rep.ConfigChanges < int64(rep.MembershipSeeds)/2) {
		t.Errorf("%d of %d seeds change membership, %d changes committed: the membership mix is too tame", rep.MembershipSeeds, rep.Seeds, rep.ConfigChanges)
	}
	return rep
}

func TestFaultMixQuorum(t *testing.T) {
	t.Parallel()
	rep := runMix(t, core.ModeQuorum, 1)
	if rep.Elections < int64(rep.Seeds) {
		t.Errorf("only %d elections in %d seeds: the fault mix is too tame", rep.Elections, rep.Seeds)
	}
}

func TestFaultMixBully(t *testing.T) {
	t.Parallel()
	rep := runMix(t, core.ModeBully, 1)
	if rep.SplitBrains == 0 {
		t.Error("no bully split brain in a split network: the partitions do not bite")
	}
}

// TestTargetedQuorum and TestTargetedBully: the targeted adversarial
// schedule (targeted.go) on top of the fault mix, CISeeds seeds each.
//
// In quorum mode the schedule also hands off on the healed network in the
// cases blind schedules reach only by luck (healedhandoff.go), in half
// the seeds: the suite fails if any reaches fewer than one seed in eight
// (about one in three to one in two do; without the schedule, none or a
// few in a thousand).
func TestTargetedQuorum(t *testing.T) {
	t.Parallel()
	rep := runSuite(t, Options{Mode: core.ModeQuorum, Targeted: true}, 1)
	if least := int64(rep.Seeds) / 8; rep.HandoffsUnheard < least || rep.StalledHandoffs < least || rep.LateHandoffResigns < least {
		t.Errorf("%d hand-offs needing members that know no leader of their term, %d hand-off commands to a leader stalled past its lease, %d successors stalled with their resign still due: the healed hand-offs no longer reach their cases",
			rep.HandoffsUnheard, rep.StalledHandoffs, rep.LateHandoffResigns)
	}
}

func TestTargetedBully(t *testing.T) {
	t.Parallel()
	runSuite(t, Options{Mode: core.ModeBully, Targeted: true}, 1)
}

// TestSlowNetworkQuorum: the slow-network suite (SlowNetwork), SlowCISeeds
// seeds (a fifth with -short). A leader that gave up its term when the
// lease from its vote requests ran out, before its first heartbeat's acks
// came back, broke liveness in 625 of the 1,000 seeds.
func TestSlowNetworkQuorum(t *testing.T) {
	t.Parallel()
	n := SlowCISeeds
	if testing.Short() {
		n /= 5
	}
	runBudget(t, SlowNetwork(), n, "sim.Run(sim.SlowNetwork() with Seed %d)")
}

// TestDrainQuorum: the fault mix with the best node drained at a drawn
// moment (Options.Drain): it never leads nor campaigns from then on.
// 2,000 seeds (200 with -short), a tenth of a fault-mix suite.
func TestDrainQuorum(t *testing.T) {
	t.Parallel()
	n := DrainCISeeds
	if testing.Short() {
		n /= 10
	}
	runBudget(t, Options{Mode: core.ModeQuorum, Drain: true}, n, "electhost sim --scenario faults --drain --seed %d")
}

// runBudget runs n seeds from 1 with o and reports every violation with
// replay, a format of its seed.
func runBudget(t *testing.T, o Options, n int, replay string) {
	t.Helper()
	rep, err := RunMany(t.Context(), o, Seeds(1, n), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range rep.Violations {
		if i == 3 {
			t.Errorf("... %d violations in all", len(rep.Violations))
			break
		}
		t.Errorf("%s\nreplay: "+replay+"\n%s", v, v.Seed, v.Excerpt)
	}
	t.Logf("%d seeds, %d elections, liveness after the faults %+v", rep.Seeds, rep.Elections, rep.Liveness)
}

// TestFaultsHappen checks that the fault mix really injects what it says,
// and that the hosts really batch: steps handling several messages, and
// steps whose Now was read before the step, at the batch's last arrival.
func TestFaultsHappen(t *testing.T) {
	var dropped, dups, outliers, crashes, pauses, replayed, saveFails, batched, early int64
	for s := range uint64(40) {
		res, err := Run(Options{Seed: s + 1, Record: true})
		if err != nil {
			t.Fatal(err)
		}
		dropped += res.Dropped
		dups += res.Duplicated
		outliers += res.Outliers
		crashes += res.Crashes
		pauses += res.Pauses
		replayed += res.Replayed
		saveFails += res.SaveFailures
		for _, n := range res.Trace.Nodes {
			for i := range n.Steps {
				if len(n.Steps[i].Input.Inbound) > 1 {
					batched++
				}
				// Now ran slower than real time between two steps of one
				// life by more than the drift allows: it was read early.
				if i > 0 && !n.Steps[i].Fresh {
					dNow := n.Steps[i].Input.Now - n.Steps[i-1].Input.Now
					dReal := n.Steps[i].AtMs - n.Steps[i-1].AtMs
					if dReal > 20 && dNow*10 < dReal*8 {
						early++
					}
				}
			}
		}
	}
	if dropped == 0 || dups == 0 || outliers == 0 || crashes == 0 || pauses == 0 || replayed == 0 || saveFails == 0 || batched == 0 || early == 0 {
		t.Errorf("40 seeds: dropped %d, duplicated %d, outliers %d, crashes %d, pauses %d, replayed %d, failed saves %d, batched steps %d, early Now reads %d: a fault never happens",
			dropped, dups, outliers, crashes, pauses, replayed, saveFails, batched, early)
	}
	t.Logf("40 seeds: %d pauses, %d replays, %d failed saves, %d batched steps, %d early Now reads", pauses, replayed, saveFails, batched, early)
}

// TestMembershipHappens checks that the membership mix (Options.Membership)
// does what membership.go says: spares added, a leader removing itself
// (a resign with remove), changes forwarded by followers, nodes restarted
// with a persisted configuration, stale candidates told to campaign.
func TestMembershipHappens(t *testing.T) {
	var changes, stale, sparesAdded, leaderRemovals, forwarded, confRestarts int64
	for s := range uint64(40) {
		res, err := Run(Options{Seed: s + 1, Membership: true, Record: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range res.Violations {
			t.Errorf("%s", v)
		}
		changes += res.ConfigChanges
		stale += res.StaleCampaigns
		for _, n := range res.Trace.Nodes {
			for _, st := range n.Steps {
				if st.Fresh && len(st.Input.Join) > 0 && st.Input.Join[0].State.ConfIndex > 0 {
					confRestarts++
				}
				var out core.Output
				if _, err := abi.UnmarshalOutput(st.Output, &out); err != nil {
					t.Fatal(err)
				}
				for _, ev := range out.Events {
					if ev.Kind == core.EventConfig && ev.Reason == "committed" && slices.ContainsFunc(ev.Members, func(id string) bool { return id[0] == 's' }) {
						sparesAdded++
					}
				}
				for _, p := range out.Publishes {
					switch {
					case bytes.Contains(p.Payload, []byte(`"type":"resign"`)) && bytes.Contains(p.Payload, []byte(`"remove":true`)):
						leaderRemovals++
					case bytes.Contains(p.Payload, []byte(`"type":"change"`)):
						forwarded++
					}
				}
			}
		}
	}
	if changes == 0 || stale == 0 || sparesAdded == 0 || leaderRemovals == 0 || forwarded == 0 || confRestarts == 0 {
		t.Errorf("40 seeds: %d committed changes, %d stale candidates, %d commits with a spare, %d leaders removing themselves, %d forwarded requests, %d restarts with a configuration: something never happens",
			changes, stale, sparesAdded, leaderRemovals, forwarded, confRestarts)
	}
	t.Logf("40 seeds: %d committed changes, %d stale candidates, %d commits with a spare, %d leaders removing themselves, %d forwarded requests, %d restarts with a configuration",
		changes, stale, sparesAdded, leaderRemovals, forwarded, confRestarts)
}

// TestDeterministic: the same seed gives a byte-identical trace, twice; the
// trace replays against a fresh engine; another seed gives another trace.
func TestDeterministic(t *testing.T) {
	for _, mode := range []core.Mode{core.ModeQuorum, core.ModeBully} {
		o := Options{Seed: 42, Mode: mode, Record: true}
		a, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Run(o)
		if err != nil {
			t.Fatal(err)
		}
		if a.TraceHash != b.TraceHash {
			t.Fatalf("%s: same seed, trace hashes %s and %s", mode, a.TraceHash, b.TraceHash)
		}
		if !reflect.DeepEqual(a.Trace, b.Trace) {
			t.Fatalf("%s: same seed, traces differ", mode)
		}
		if h := a.Trace.Hash(); h != a.TraceHash {
			t.Fatalf("%s: Trace.Hash %s, TraceHash %s", mode, h, a.TraceHash)
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if !bytes.Equal(ja, jb) {
			t.Fatalf("%s: results differ:\n%s\n%s", mode, ja, jb)
		}
		if err := a.Trace.Replay(NewNative); err != nil {
			t.Fatal(err)
		}
		o.Record = false
		c, _ := Run(o) // recording must not change the run
		if c.TraceHash != a.TraceHash {
			t.Fatalf("%s: recording changed the run", mode)
		}
		o.Seed = 43
		d, _ := Run(o)
		if d.TraceHash == a.TraceHash {
			t.Fatalf("%s: seeds 42 and 43 gave the same trace", mode)
		}
		steps := 0
		for _, n := range a.Trace.Nodes {
			steps += len(n.Steps)
		}
		if int64(steps) != a.Steps || steps == 0 {
			t.Fatalf("%s: trace has %d steps, result says %d", mode, steps, a.Steps)
		}
	}
}

// TestRunManyMatchesRun: the parallel runner reports what sequential runs
// observe, in seed order.
func TestRunManyMatchesRun(t *testing.T) {
	seeds := Seeds(1000, 24)
	calls := 0
	rep, err := RunMany(t.Context(), Options{Mode: core.ModeBully}, seeds, func(done, total int) {
		calls++
		if total != len(seeds) || done != calls {
			t.Errorf("progress(%d, %d) at call %d", done, total, calls)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var results []*Result
	for _, s := range seeds {
		r, err := Run(Options{Seed: s, Mode: core.ModeBully})
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, r)
	}
	seq := Aggregate(results)
	if !reflect.DeepEqual(rep, seq) {
		t.Fatalf("RunMany %+v\nsequential %+v", rep, seq)
	}
	if _, err := RunMany(t.Context(), Options{Mode: "raft"}, seeds[:2], nil); err == nil {
		t.Fatal("RunMany accepted an unknown mode")
	}
}

// liar wraps the native engine and misbehaves as told.
type liar struct {
	Stepper
	id   string
	kind string
	r    *rand.Rand
}

func (l *liar) Step(in *core.Input, out *core.Output) error {
	if l.kind == "amnesia" {
		for i := range in.Join {
			in.Join[i].State = core.GroupState{} // forgets its persisted term and vote
		}
	}
	if err := l.Stepper.Step(in, out); err != nil {
		return err
	}
	switch l.kind {
	case "usurper":
		// Claims leadership of any term it hears another leader announce.
		for _, m := range in.Inbound {
			if bytes.Contains(m.Payload, []byte(`"type":"leader"`)) && !bytes.Contains(m.Payload, []byte(`"from":"`+l.id+`"`)) {
				var w struct{ Term uint64 }
				json.Unmarshal(m.Payload, &w)
				out.Events = append(out.Events, core.Event{Kind: core.EventBecameLeader, Group: "g", Term: w.Term, Leader: l.id, LeaseUntil: in.Now + 1000})
			}
		}
	case "mute":
		out.Publishes = out.Publishes[:0] // never says anything
	case "silent":
		// Never tells its application that it stopped leading.
		out.Events = slices.DeleteFunc(out.Events, func(e core.Event) bool { return e.Kind == core.EventSteppedDown })
	case "fickle":
		// Grants a vote to anyone asking, in any term, without persisting.
		for _, m := range in.Inbound {
			if bytes.Contains(m.Payload, []byte(`"type":"election"`)) && !bytes.Contains(m.Payload, []byte(`"pre":true`)) {
				var w struct {
					Candidate string
					Term      uint64
				}
				json.Unmarshal(m.Payload, &w)
				p := fmt.Sprintf(`{"type":"vote","group":"g","from":"%s","priority":1,"candidate":"%s","term":%d,"granted":true}`, l.id, w.Candidate, w.Term)
				out.Publishes = append(out.Publishes, core.Message{Topic: "election:g", Payload: []byte(p)})
			}
		}
	}
	return nil
}

// TestCheckerCatchesBrokenEngines proves every invariant checker can fail:
// engines that lie are caught, with a replayable seed and an excerpt.
func TestCheckerCatchesBrokenEngines(t *testing.T) {
	cases := []struct {
		kind, liarID string
		mode         core.Mode
		want         []string
	}{
		{"usurper", "n1", core.ModeQuorum, []string{InvElectionSafety, InvLease}},
		{"usurper", "n1", core.ModeBully, []string{InvElectionSafety}},
		{"amnesia", "*", core.ModeQuorum, []string{InvTermDecrease}},
		{"fickle", "*", core.ModeQuorum, []string{InvDoubleVote, InvPersist}},
		{"mute", "*", core.ModeQuorum, []string{InvLiveness}},
		{"silent", "*", core.ModeQuorum, []string{InvLeadership}},
		{"mute", "*", core.ModeBully, []string{InvLiveness}},
	}
	for _, c := range cases {
		t.Run(c.kind+"/"+string(c.mode), func(t *testing.T) {
			found := map[string]bool{}
			var first *Violation
			var firstOpts Options
			var firstRes *Result
			for seed := uint64(1); seed <= 400 && len(found) < len(c.want); seed++ {
				o := Options{Seed: seed, Mode: c.mode, NewStepper: func(id string) (Stepper, error) {
					st, _ := NewNative(id)
					if c.liarID != "*" && id != c.liarID {
						return st, nil
					}
					return &liar{Stepper: st, id: id, kind: c.kind}, nil
				}}
				res, err := Run(o)
				if err != nil {
					t.Fatal(err)
				}
				for i, v := range res.Violations {
					if first == nil {
						first, firstOpts, firstRes = &res.Violations[i], o, res
					}
					found[v.Invariant] = true
				}
			}
			for _, w := range c.want {
				if !found[w] {
					t.Errorf("%s engine: %s never reported (found %v)", c.kind, w, found)
				}
			}
			if first == nil {
				return
			}
			if first.Excerpt == "" || first.Seed != firstOpts.Seed || len(first.Nodes) == 0 {
				t.Errorf("violation without seed, nodes or excerpt: %+v", first)
			}
			again, _ := Run(firstOpts)
			if !reflect.DeepEqual(again.Violations, firstRes.Violations) || again.TraceHash != firstRes.TraceHash {
				t.Errorf("seed %d did not reproduce its violation", firstOpts.Seed)
			}
			t.Logf("%s\n%s", first, lastLines(first.Excerpt, 4))
		})
	}
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(len(l)-n, 0):], "\n")
}

// TestWallClockDoesNotMatter: the same seed with a wall clock that jumps
// wildly at every step (or is absent) elects the same leaders at the same
// instants; only the informational fields of the payloads differ.
func TestWallClockDoesNotMatter(t *testing.T) {
	events := func(res *Result) string {
		var b strings.Builder
		for _, n := range res.Trace.Nodes {
			for _, s := range n.Steps {
				var out core.Output
				abi.UnmarshalOutput(s.Output, &out)
				fmt.Fprintf(&b, "%d %s persist=%v wake=%d pubs=%d", s.AtMs, n.ID, out.Persist, out.WakeAt, len(out.Publishes))
				for _, e := range out.Events {
					fmt.Fprintf(&b, " %+v", e)
				}
				b.WriteByte('\n')
			}
		}
		return b.String()
	}
	for seed := uint64(1); seed <= 20; seed++ {
		mode := []core.Mode{core.ModeQuorum, core.ModeBully}[seed%2]
		base, err := Run(Options{Seed: seed, Mode: mode, Record: true})
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(seed, 7))
		jumpy, err := Run(Options{Seed: seed, Mode: mode, Record: true, NewStepper: func(id string) (Stepper, error) {
			st, _ := NewNative(id)
			return stepFunc(func(in *core.Input, out *core.Output) error {
				in.Wall = []int64{0, -5, 1, r.Int64N(1 << 50), 4_102_444_800_000}[r.IntN(5)]
				return st.Step(in, out)
			}), nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		if a, b := events(base), events(jumpy); a != b {
			t.Fatalf("seed %d: wall-clock jumps changed the election", seed)
		}
	}
}

type stepFunc func(in *core.Input, out *core.Output) error

func (f stepFunc) Step(in *core.Input, out *core.Output) error { return f(in, out) }

// TestLeaseStress aims the fault mix at the lease: a 1 ms bus (elections
// finish as soon as the voters' election timeouts allow), a 5% drift bound
// (clocks at both extremes) and many partitions, a third of which cut the
// leader off right after it spoke. An engine whose lease ignored the drift
// bound fails here within a few hundred seeds.
func TestLeaseStress(t *testing.T) {
	t.Parallel()
	n := 1000
	if testing.Short() {
		n = 300
	}
	rep, err := RunMany(t.Context(), Options{Mode: core.ModeQuorum, LatencyMs: 1,
		Config: core.Config{MaxDriftPPM: 50_000, HeartbeatMs: 500, ElectionTimeoutMs: 2000},
		Faults: &FaultMix{Partitions: 8, Crashes: 2, Commands: 2}}, Seeds(1, n), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range rep.Violations {
		if i == 3 {
			break
		}
		t.Errorf("%s\n%s", v, v.Excerpt)
	}
	t.Logf("%d seeds, %d elections", rep.Seeds, rep.Elections)
}

// TestMembershipSeeds replays membership-mix seeds (electhost sim
// --membership) that once failed: 538, a spare whose configuration listed
// neither it nor the leader refused that leader's heartbeats and never
// learnt it had been added (no leader known to every member after the
// faults); with ed25519 too, where it cannot even verify that leader. 1922
// (--adversary, so HMAC): a member a term ahead deposed three leaders in
// a row with its stale replies, which moved only the leader to its term
// (core TestStaleReplyMovesTheLeadersFollowers).
func TestMembershipSeeds(t *testing.T) {
	for _, c := range []struct {
		seed      uint64
		auth      core.AuthMode
		adversary bool
	}{{538, core.AuthOff, false}, {538, core.AuthEd25519, false}, {1922, "", true}} {
		res, err := Run(Options{Seed: c.seed, Mode: core.ModeQuorum, Scenario: ScenarioFaults, Membership: true, Adversary: c.adversary, Config: core.Config{Auth: c.auth}})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range res.Violations {
			t.Errorf("seed %d, auth %s: %s", c.seed, c.auth, v)
		}
	}
}

// TestHandoffSeeds replays seeds that reach the hand-off cases the core
// once got wrong (electhost sim --scenario faults --seed S [--targeted]
// [--membership]), and checks that each still reaches its case: a timing
// change moves a blind schedule, and a seed that no longer reaches its case
// proves nothing. Each must hand off and lose none, with no resign too late
// for any hand-off (HandoffsSuperseded).
//
//   - unheard: the successor can win only with the votes of members that
//     are in the resign's term but know no leader of it (they restarted,
//     or voted and have not heard the leader yet); they once dropped the
//     resign as an unknown leader's (handoff_resign_before_heartbeat.txt).
//   - stalled: a hand-off command reaches a leader paused past its lease:
//     it once resigned as it resumed, into a term where a majority had
//     already voted for others; it must step down first and hand nothing
//     over.
//   - late: a successor led its term before the resign naming it arrived,
//     then stalled past its lease with the resign still due; the resign
//     once made it lead that term again (handoff_late_after_leading.txt).
//
// --membership 8078 meets the unheard case by chance (members restarted at
// the end of the fault phase) and fault mix 5523 the stalled one; the
// targeted schedule meets all three by construction (healedhandoff.go).
// Fault mix seed 1785 met the unheard case until campaigns backed off,
// which moved its schedule; since, it does not, and it was dropped, as
// were the targeted --membership seeds 15239 (members that had voted for
// the successor dropped its late resign: handoff_vote_resent.txt) and
// 10750 (the stalled case) before it.
func TestHandoffSeeds(t *testing.T) {
	for _, c := range []struct {
		seed                 uint64
		targeted, membership bool
		unheard, stalled     bool
		late                 bool
	}{
		{8078, false, true, true, false, false},
		{5523, false, false, false, true, false},
		{4, true, false, true, true, true},
		{4, true, true, false, true, true},
	} {
		res, err := Run(Options{Seed: c.seed, Mode: core.ModeQuorum, Scenario: ScenarioFaults, Targeted: c.targeted, Membership: c.membership})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range res.Violations {
			t.Errorf("seed %d: %s", c.seed, v)
		}
		if res.HandoffsLost != 0 || res.HandoffsSuperseded != 0 || res.HandoffsNamed == 0 {
			t.Errorf("seed %d: %d hand-offs on a healed network, %d lost (the first resign at %d ms), %d too late for any",
				c.seed, res.HandoffsNamed, res.HandoffsLost, res.HandoffLostAtMs, res.HandoffsSuperseded)
		}
		if c.unheard && res.HandoffsUnheard == 0 || c.stalled && res.StalledHandoffs == 0 || c.late && res.LateHandoffResigns == 0 {
			t.Errorf("seed %d (targeted %v, membership %v) no longer reaches its case: %d hand-offs needing members that know no leader of their term (want some: %v), %d hand-off commands to a leader stalled past its lease (%v), %d successors stalled with their resign due (%v)",
				c.seed, c.targeted, c.membership, res.HandoffsUnheard, c.unheard, res.StalledHandoffs, c.stalled, res.LateHandoffResigns, c.late)
		}
	}
}

// stepperFunc adapts a function to a Stepper.
type stepperFunc func(in *core.Input, out *core.Output) error

func (f stepperFunc) Step(in *core.Input, out *core.Output) error { return f(in, out) }

// TestRunManyStopsWhenCancelled: a run under way gives up once its context
// is done (the CLI's SIGTERM), not only between seeds. The run asked for is
// about an hour of CPU, so ignoring the cancel fails the test's give-up.
func TestRunManyStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var once sync.Once
	stepping := make(chan struct{})
	o := Options{Mode: core.ModeQuorum, Scenario: ScenarioFailover, Nodes: 1001, Cycles: 50,
		NewStepper: func(id string) (Stepper, error) {
			st, err := NewNative(id)
			return stepperFunc(func(in *core.Input, out *core.Output) error {
				once.Do(func() { close(stepping) })
				return st.Step(in, out)
			}), err
		}}
	done := make(chan error, 1)
	go func() {
		_, err := RunMany(ctx, o, Seeds(1, 2), nil)
		done <- err
	}()
	<-stepping
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunMany after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("RunMany still running 2 minutes after its context was cancelled")
	}
}
