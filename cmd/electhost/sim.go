package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/core/sim"
	"github.com/electcore/electcore/internal/abi"
	"github.com/spf13/cobra"
)

type simOptions struct {
	seeds     int
	firstSeed uint64
	seed      uint64
	replay    bool
	nodes     int
	mode      string
	scenario  string
	cycles    int
	jsonOut   bool
	noBar     bool
	adversary bool   // keygen.go's authentication: --adversary
	auth      string // and --auth
	targeted  bool
	members   bool  // --membership
	drain     bool  // --drain
	outsider  bool  // --outsider
	balanced  bool  // --balanced
	latency   int64 // --latency: one-way delay, ms (0: the simulator's 100)
	jitter    int64 // --jitter: uniform jitter around it, ms (0: the simulator's default, -1: none)
}

func newSimCmd() *cobra.Command {
	o := &simOptions{}
	c := &cobra.Command{
		Use:   "sim [--seeds N] [--nodes N] [--mode quorum|bully] [--seed S]",
		Short: "Run the deterministic simulator over many seeds (or replay one)",
		Long: `sim runs core/sim, the deterministic whole-swarm simulator (virtual time,
lossy and partitioned network, crashes, broker outages, clock drift), on
--seeds consecutive seeds from --first-seed, checking every invariant
(election safety, lease exclusivity, monotonic terms, single vote per term,
liveness after the faults stop).

--scenario all (the default) runs each seed twice: once under the fault mix
(for violations) and once in the failover scenario (the settled leader is
crashed repeatedly), which measures failover time and publishes per
election. Other scenarios: faults, failover, resign, heal. A measuring
scenario whose quiet swarm does not settle on a leader known to every node
within the liveness bound reports a liveness violation and ends that seed.

--targeted adds the targeted adversarial schedule to the fault mix
(core/sim/targeted.go).

--membership (quorum mode) makes every fault-mix seed change the
configuration: spare agents waiting to be added, members added, removed
(the leader too) and replaced while the faults run, and a member that
missed a change told to campaign as the leader crashes
(core/sim/membership.go). Without it most quorum seeds have a few changes.

--outsider (quorum, no authentication) adds an outsider that forges, while
the faults run, what no single message may turn into an outage even with
auth off: acks far ahead in term and configurations under a non-member's
name (core/sim/adversary.go).

--seed S replays one seed with its full trace printed. A violation makes sim
exit 1 after printing the seed and the command that replays it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.replay = cmd.Flags().Changed("seed")
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := c.Flags()
	f.IntVar(&o.seeds, "seeds", 200, "number of seeds to run")
	f.Uint64Var(&o.firstSeed, "first-seed", 1, "first seed")
	f.Uint64Var(&o.seed, "seed", 0, "replay this one seed and print its trace")
	f.IntVar(&o.nodes, "nodes", 0, "swarm size (default: drawn from each seed in the fault mix, 5 otherwise)")
	f.StringVar(&o.mode, "mode", "quorum", "quorum or bully")
	f.StringVar(&o.scenario, "scenario", "all", "all, faults, failover, resign or heal")
	f.IntVar(&o.cycles, "cycles", 0, "crashes/resigns/heals per seed in the measuring scenarios (default 10)")
	f.BoolVar(&o.jsonOut, "json", false, "print a JSON report")
	f.BoolVar(&o.noBar, "no-progress", false, "no progress on stderr (a bar on a terminal, else a line every 5s with an ETA)")
	f.BoolVar(&o.adversary, "adversary", false, "add an attacker that forges, replays and floods messages (core/sim/adversary.go)")
	f.BoolVar(&o.outsider, "outsider", false, "quorum, auth off: add an outsider forging far-ahead terms and non-members' configurations in the fault mix")
	f.BoolVar(&o.targeted, "targeted", false, "add the targeted adversarial schedule to the fault mix (core/sim/targeted.go): opposite clock drift, leader cut off with a minority, late votes, crash loops, partial resigns")
	f.BoolVar(&o.members, "membership", false, "every fault-mix seed changes the configuration (quorum; core/sim/membership.go): spares added, members and leaders removed, replacements, stale candidates")
	f.BoolVar(&o.balanced, "balanced", false, "every node's default priority is the balanced one (core.Config.BalancedPriority), as an agent running many groups has")
	f.BoolVar(&o.drain, "drain", false, "drain the best node at a moment of the fault mix, for the rest of the run (quorum, no membership changes): it must never lead nor campaign")
	f.Int64Var(&o.latency, "latency", 0, "one-way network delay in ms, as slow delivery over a loaded broker (0: 100 ms; the fault mix draws 1-100 ms per seed)")
	f.Int64Var(&o.jitter, "jitter", 0, "uniform jitter around --latency in ms (0: latency/2 in the fault mix, latency/5 otherwise; -1: none)")
	f.StringVar(&o.auth, "auth", "", "authentication of the simulated swarm: off, hmac or ed25519 (default hmac with --adversary, else off)")
	return c
}

// maxSimNodes bounds --nodes: a 1001-member failover run takes about a
// minute of CPU per leader crash; much larger swarms are not worth simulating
// node by node.
const maxSimNodes = 1001

// simReport is sim's JSON output.
type simReport struct {
	Mode                 string          `json:"mode"`
	Scenario             string          `json:"scenario"`
	Nodes                int             `json:"nodes,omitempty"`
	FirstSeed            uint64          `json:"first_seed"`
	Seeds                int             `json:"seeds"`
	Runs                 int             `json:"runs"`
	ViolationCount       int             `json:"violations"`          // 0 unless an invariant broke
	Violations           []sim.Violation `json:"violation_list"`      // each with its seed and a trace excerpt
	FailoverMs           statsJSON       `json:"failover_ms"`         // crash → every live node knows the new leader
	FailoverElectedMs    statsJSON       `json:"failover_elected_ms"` // crash → a new leader elected
	PublishesPerElection statsJSON       `json:"publishes_per_election"`
	HandoffMs            *statsJSON      `json:"handoff_ms,omitempty"`
	HealMs               *statsJSON      `json:"heal_ms,omitempty"`
	LivenessMs           *statsJSON      `json:"liveness_ms,omitempty"`
	HealedChangeMs       *statsJSON      `json:"healed_change_ms,omitempty"` // a membership change asked after the heal → committed
	Elections            int64           `json:"elections"`
	SplitBrains          int64           `json:"split_brains"`
	ConfigChanges        int64           `json:"config_changes"` // committed membership changes (quorum fault mix)
	HandoffsNamed        int64           `json:"handoffs_named"` // resigns naming a live successor on a healed network
	HandoffsLost         int64           `json:"handoffs_lost"`  // ... whose successor did not lead the next term
	HandoffLostSeeds     []uint64        `json:"handoff_lost_seeds,omitempty"`
	HandoffsSuperseded   int64           `json:"handoffs_superseded,omitempty"`  // resigns too late for any hand-off (not counted above)
	HandoffsUnheard      int64           `json:"handoffs_unheard,omitempty"`     // hand-offs needing the votes of members that knew no leader of their term
	StalledHandoffs      int64           `json:"stalled_handoffs,omitempty"`     // hand-off commands reaching a leader stalled past its lease (healed network)
	LateHandoffResigns   int64           `json:"late_handoff_resigns,omitempty"` // successors stalled past their lease with the resign naming them still due
	VirtualMs            int64           `json:"virtual_ms"`
	Steps                int64           `json:"steps"`
	ElapsedMs            int64           `json:"elapsed_ms"`
	TraceHash            string          `json:"trace_hash"`
}

type statsJSON struct {
	N    int     `json:"n"`
	P50  int64   `json:"p50"`
	P99  int64   `json:"p99"`
	Max  int64   `json:"max"`
	Mean float64 `json:"mean"`
	// MaxSeed is the seed whose run gave Max: replay it with --seed.
	MaxSeed uint64 `json:"max_seed"`
}

func toStats(s sim.Stats) statsJSON {
	return statsJSON{N: s.N, P50: s.P50, P99: s.P99, Max: s.Max, Mean: s.Mean, MaxSeed: s.MaxSeed}
}

func optStats(s sim.Stats) *statsJSON {
	if s.N == 0 {
		return nil
	}
	j := toStats(s)
	return &j
}

func (o *simOptions) validate() ([]sim.Scenario, error) {
	if o.mode != string(core.ModeQuorum) && o.mode != string(core.ModeBully) {
		return nil, usageErrorf("--mode %q: want quorum or bully", o.mode)
	}
	if o.seeds < 1 {
		return nil, usageErrorf("--seeds %d: want at least 1", o.seeds)
	}
	if o.nodes != 0 && (o.nodes < 1 || o.nodes > maxSimNodes) {
		return nil, usageErrorf("--nodes %d: want 1..%d", o.nodes, maxSimNodes)
	}
	if o.cycles < 0 {
		return nil, usageErrorf("--cycles must not be negative")
	}
	if o.latency < 0 || o.latency > 60_000 || o.jitter < -1 || o.jitter > 60_000 {
		return nil, usageErrorf("--latency %d --jitter %d: want 0..60000 ms each (jitter -1: none)", o.latency, o.jitter)
	}
	switch core.AuthMode(o.auth) {
	case "", core.AuthOff, core.AuthHMAC, core.AuthEd25519:
	default:
		return nil, usageErrorf("--auth %q: want off, hmac or ed25519", o.auth)
	}
	if o.targeted && o.scenario != "all" && o.scenario != "faults" {
		return nil, usageErrorf("--targeted adds to the fault mix: want --scenario all or faults")
	}
	if o.drain && (o.mode != string(core.ModeQuorum) || o.members || o.scenario != "all" && o.scenario != "faults") {
		return nil, usageErrorf("--drain adds to the fault mix in quorum mode, without --membership: want --mode quorum and --scenario all or faults")
	}
	if o.outsider && (o.mode != string(core.ModeQuorum) || o.adversary || o.auth != "" && o.auth != string(core.AuthOff) || o.scenario != "all" && o.scenario != "faults") {
		return nil, usageErrorf("--outsider forges against the fault mix in quorum mode without authentication: want --mode quorum, --scenario all or faults, no --adversary, no --auth but off")
	}
	if o.members && (o.mode != string(core.ModeQuorum) || o.scenario != "all" && o.scenario != "faults") {
		return nil, usageErrorf("--membership adds to the fault mix in quorum mode: want --mode quorum and --scenario all or faults")
	}
	switch o.scenario {
	case "all":
		return []sim.Scenario{sim.ScenarioFaults, sim.ScenarioFailover}, nil
	case "faults", "failover", "resign", "heal":
		return []sim.Scenario{sim.Scenario(o.scenario)}, nil
	}
	return nil, usageErrorf("--scenario %q: want all, faults, failover, resign or heal", o.scenario)
}

func (o *simOptions) options(sc sim.Scenario) sim.Options {
	return sim.Options{Mode: core.Mode(o.mode), Scenario: sc, Nodes: o.nodes, Cycles: o.cycles,
		Adversary: o.adversary, Targeted: o.targeted && sc == sim.ScenarioFaults, Membership: o.members && sc == sim.ScenarioFaults,
		Drain: o.drain && sc == sim.ScenarioFaults, Outsider: o.outsider && sc == sim.ScenarioFaults,
		LatencyMs: o.latency, JitterMs: o.jitter, Config: core.Config{Auth: core.AuthMode(o.auth), BalancedPriority: o.balanced}}
}

// replayCmd is the command line that replays seed.
func (o *simOptions) replayCmd(seed uint64, sc sim.Scenario) string {
	s := fmt.Sprintf("electhost sim --mode %s --scenario %s --seed %d", o.mode, sc, seed)
	if o.nodes != 0 {
		s += fmt.Sprintf(" --nodes %d", o.nodes)
	}
	if o.cycles != 0 {
		s += fmt.Sprintf(" --cycles %d", o.cycles)
	}
	if o.adversary {
		s += " --adversary"
	}
	if o.auth != "" {
		s += " --auth " + o.auth
	}
	if o.targeted && sc == sim.ScenarioFaults {
		s += " --targeted"
	}
	if o.members && sc == sim.ScenarioFaults {
		s += " --membership"
	}
	if o.drain && sc == sim.ScenarioFaults {
		s += " --drain"
	}
	if o.outsider && sc == sim.ScenarioFaults {
		s += " --outsider"
	}
	if o.balanced {
		s += " --balanced"
	}
	if o.latency != 0 {
		s += fmt.Sprintf(" --latency %d", o.latency)
	}
	if o.jitter != 0 {
		s += fmt.Sprintf(" --jitter %d", o.jitter)
	}
	return s
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar draws "[#####     ]  42% 420/1000 seeds  3.1s" on a terminal;
// elsewhere (a log, CI) it prints a line every progressEvery, with an ETA.
type progressBar struct {
	w     io.Writer
	label string
	start time.Time
	tty   bool
	mu    sync.Mutex
	last  time.Time
}

// progressEvery is how often sim reports progress where it cannot redraw.
const progressEvery = 5 * time.Second

func (p *progressBar) update(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty {
		if p.last.IsZero() {
			p.last = p.start
		}
		if done >= total || time.Since(p.last) < progressEvery {
			return
		}
		p.last = time.Now()
		el := time.Since(p.start)
		eta := time.Duration(float64(el) * float64(total-done) / float64(max(done, 1)))
		fmt.Fprintf(p.w, "sim %s: %d/%d seeds (%d%%), %v elapsed, about %v left\n", p.label, done, total, 100*done/max(total, 1),
			el.Round(time.Second), eta.Round(time.Second))
		return
	}
	if done < total && time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	const width = 30
	filled := width * done / max(total, 1)
	fmt.Fprintf(p.w, "\r%-9s [%s%s] %3d%% %d/%d seeds  %.1fs", p.label, strings.Repeat("#", filled), strings.Repeat(" ", width-filled),
		100*done/max(total, 1), done, total, time.Since(p.start).Seconds())
	if done == total {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func (o *simOptions) run(ctx context.Context, stdout, stderr io.Writer) error {
	scenarios, err := o.validate()
	if err != nil {
		return err
	}
	if o.replay {
		return o.runReplay(stdout, scenarios)
	}
	start := time.Now()
	rep := simReport{Mode: o.mode, Scenario: o.scenario, Nodes: o.nodes, FirstSeed: o.firstSeed, Seeds: o.seeds, Violations: []sim.Violation{}}
	seeds := sim.Seeds(o.firstSeed, o.seeds)
	var hashes []string
	violationScenario := map[int]sim.Scenario{}
	for _, sc := range scenarios {
		var progress func(done, total int)
		if !o.noBar {
			bar := &progressBar{w: stderr, label: string(sc), start: time.Now(), tty: isTerminal(stderr)}
			progress = bar.update
		}
		r, err := sim.RunMany(ctx, o.options(sc), seeds, progress)
		if ctx.Err() != nil {
			return fmt.Errorf("sim: interrupted before its %d seeds ran: nothing to report", o.seeds)
		}
		if err != nil {
			return withCode(exitConfig, fmt.Errorf("sim: %v", err))
		}
		rep.Runs += r.Seeds
		for _, v := range r.Violations {
			violationScenario[len(rep.Violations)] = sc
			rep.Violations = append(rep.Violations, v)
		}
		rep.Elections += r.Elections
		rep.SplitBrains += r.SplitBrains
		rep.ConfigChanges += r.ConfigChanges
		rep.HandoffsNamed += r.HandoffsNamed
		rep.HandoffsLost += r.HandoffsLost
		rep.HandoffLostSeeds = append(rep.HandoffLostSeeds, r.HandoffLostSeeds...)
		rep.HandoffsSuperseded += r.HandoffsSuperseded
		rep.HandoffsUnheard += r.HandoffsUnheard
		rep.StalledHandoffs += r.StalledHandoffs
		rep.LateHandoffResigns += r.LateHandoffResigns
		rep.VirtualMs += r.VirtualMs
		rep.Steps += r.Steps
		hashes = append(hashes, r.TraceHash)
		switch sc {
		case sim.ScenarioFailover:
			rep.FailoverMs, rep.FailoverElectedMs, rep.PublishesPerElection = toStats(r.FailoverKnown), toStats(r.FailoverElected), toStats(r.PublishesPerElection)
		case sim.ScenarioResign:
			rep.HandoffMs = optStats(r.HandoffKnown)
		case sim.ScenarioHeal:
			rep.HealMs = optStats(r.HealConverged)
		case sim.ScenarioFaults:
			rep.LivenessMs = optStats(r.Liveness)
			rep.HealedChangeMs = optStats(r.HealedChange)
		}
	}
	rep.TraceHash = strings.Join(hashes, "+")
	rep.ElapsedMs = time.Since(start).Milliseconds()
	rep.ViolationCount = len(rep.Violations)
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		printSimTable(stdout, &rep)
	}
	if n := len(rep.Violations); n > 0 {
		w := stderr
		for i, v := range rep.Violations {
			if i == 10 {
				fmt.Fprintf(w, "... and %d more\n", n-10)
				break
			}
			fmt.Fprintf(w, "VIOLATION %s\n  replay: %s\n", v.String(), o.replayCmd(v.Seed, violationScenario[i]))
		}
		v := rep.Violations[0]
		return fmt.Errorf("%d invariant violation(s); first: seed %d (%s); replay with: %s", n, v.Seed, v.Invariant, o.replayCmd(v.Seed, violationScenario[0]))
	}
	return nil
}

func printSimTable(w io.Writer, r *simReport) {
	nodes := "drawn per seed"
	if r.Nodes != 0 {
		nodes = fmt.Sprint(r.Nodes)
	}
	fmt.Fprintf(w, "electcore simulator: mode %s, scenario %s, nodes %s, seeds %d..%d (%d runs, %s of virtual time, %s real)\n\n",
		r.Mode, r.Scenario, nodes, r.FirstSeed, r.FirstSeed+uint64(r.Seeds)-1, r.Runs, humanDuration(r.VirtualMs), humanDuration(r.ElapsedMs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASURE\tN\tP50\tP99\tMAX\tMAX SEED\tMEAN")
	row := func(name string, s statsJSON, unit string) {
		if s.N == 0 {
			return
		}
		fmt.Fprintf(tw, "%s\t%d\t%d%s\t%d%s\t%d%s\t%d\t%.1f%s\n", name, s.N, s.P50, unit, s.P99, unit, s.Max, unit, s.MaxSeed, s.Mean, unit)
	}
	row("failover (all know)", r.FailoverMs, " ms")
	row("failover (elected)", r.FailoverElectedMs, " ms")
	row("publishes/election", r.PublishesPerElection, "")
	if r.HandoffMs != nil {
		row("hand-off", *r.HandoffMs, " ms")
	}
	if r.HealMs != nil {
		row("heal→one leader", *r.HealMs, " ms")
	}
	if r.LivenessMs != nil {
		row("liveness after faults", *r.LivenessMs, " ms")
	}
	if r.HealedChangeMs != nil {
		row("change after the heal", *r.HealedChangeMs, " ms")
	}
	tw.Flush()
	if r.HandoffsNamed > 0 {
		fmt.Fprintf(w, "\nhand-offs on a healed network %d, successor led %d (%.2f %%), lost %d",
			r.HandoffsNamed, r.HandoffsNamed-r.HandoffsLost, 100*float64(r.HandoffsNamed-r.HandoffsLost)/float64(r.HandoffsNamed), r.HandoffsLost)
		if len(r.HandoffLostSeeds) > 0 {
			fmt.Fprintf(w, " (seeds %v)", r.HandoffLostSeeds)
		}
		if r.HandoffsSuperseded > 0 {
			fmt.Fprintf(w, "; %d more resigns too late for any hand-off (the next term already had a majority's votes elsewhere)", r.HandoffsSuperseded)
		}
		fmt.Fprintln(w)
	}
	if r.HandoffsUnheard+r.StalledHandoffs+r.LateHandoffResigns > 0 {
		fmt.Fprintf(w, "hand-offs needing members that knew no leader of their term %d; hand-off commands to a leader stalled past its lease %d; successors stalled with their resign still due %d\n", r.HandoffsUnheard, r.StalledHandoffs, r.LateHandoffResigns)
	}
	fmt.Fprintf(w, "\nelections %d, split brains (bully, partitioned: allowed) %d, committed membership changes %d, violations %d; replay a seed: electhost sim --seed S --scenario ...\n",
		r.Elections, r.SplitBrains, r.ConfigChanges, len(r.Violations))
}

// humanDuration prints milliseconds in the largest sensible unit:
// "850 ms", "12.3 s", "4 min 5 s", "2 h 13 min".
func humanDuration(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", ms)
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
}

// runReplay runs one seed with its trace recorded and prints it.
func (o *simOptions) runReplay(w io.Writer, scenarios []sim.Scenario) error {
	var bad []string
	for _, sc := range scenarios {
		opts := o.options(sc)
		opts.Seed = o.seed
		opts.Record = true
		res, err := sim.Run(opts)
		if err != nil {
			return withCode(exitConfig, fmt.Errorf("sim: %v", err))
		}
		if o.jsonOut {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.Encode(struct {
				*sim.Result
				Trace *sim.Trace `json:"trace"`
			}{res, res.Trace})
		} else {
			printTrace(w, res)
		}
		for _, v := range res.Violations {
			bad = append(bad, v.String())
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("seed %d: %d violation(s): %s", o.seed, len(bad), bad[0])
	}
	return nil
}

func printTrace(w io.Writer, res *sim.Result) {
	fmt.Fprintf(w, "seed %d: mode %s, scenario %s, %d nodes, heartbeat %d ms, election timeout %d ms, latency %d±%d ms, liveness bound %d ms\n",
		res.Seed, res.Mode, res.Scenario, res.Nodes, res.HeartbeatMs, res.ElectionTimeoutMs, res.LatencyMs, res.JitterMs, res.BoundMs)
	if res.Faults != nil {
		f := res.Faults
		fmt.Fprintf(w, "faults: loss %.3f dup %.3f outliers %.3f (≤%d ms), %d partitions, %d crashes, %d outages, %d wall jumps, %d commands, %d pauses, %d replays, save failures %.3f\n",
			f.Loss, f.Dup, f.Outlier, f.OutlierMaxMs, f.Partitions, f.Crashes, f.Outages, f.WallJumps, f.Commands, f.Pauses, f.Replays, f.SaveFail)
	}
	fmt.Fprintf(w, "hosts: batching windows up to %d ms; clocks: %s\n", res.BatchMs, res.Clocks)
	fmt.Fprintln(w)
	if res.Trace != nil {
		type line struct {
			at   int64
			node int
			s    string
		}
		var lines []line
		for n, nt := range res.Trace.Nodes {
			for _, s := range nt.Steps {
				var out core.Output
				abi.UnmarshalOutput(s.Output, &out)
				fresh := ""
				if s.Fresh {
					fresh = " (fresh)"
				}
				lines = append(lines, line{s.AtMs, n, fmt.Sprintf("%8d %-8s%s %s → %s", s.AtMs, nt.ID, fresh, sim.FormatInput(&s.Input), sim.FormatOutput(&out))})
			}
		}
		slices.SortStableFunc(lines, func(a, b line) int {
			if a.at != b.at {
				if a.at < b.at {
					return -1
				}
				return 1
			}
			return a.node - b.node
		})
		for _, l := range lines {
			fmt.Fprintln(w, l.s)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "virtual %d ms, %d steps, %d publishes (%d delivered, %d dropped), %d elections, %d crashes, trace %s\n",
		res.VirtualMs, res.Steps, res.Publishes, res.Delivered, res.Dropped, res.Elections, res.Crashes, res.TraceHash)
	for _, f := range res.Failovers {
		fmt.Fprintf(w, "failover at %d ms: %s → %s, elected after %d ms, known after %d ms, %d publishes\n", f.AtMs, f.Leader, f.NewLeader, f.ElectedMs, f.KnownMs, f.Publishes)
	}
	for _, h := range res.Handoffs {
		fmt.Fprintf(w, "hand-off at %d ms: %s → %s, elected after %d ms, known after %d ms\n", h.AtMs, h.From, h.To, h.ElectedMs, h.KnownMs)
	}
	if res.HandoffsNamed > 0 {
		fmt.Fprintf(w, "hand-offs on a healed network %d, lost %d", res.HandoffsNamed, res.HandoffsLost)
		if res.HandoffsLost > 0 {
			fmt.Fprintf(w, " (the first lost one's resign left at %d ms)", res.HandoffLostAtMs)
		}
		fmt.Fprintln(w)
	}
	if res.HandoffsSuperseded > 0 {
		fmt.Fprintf(w, "resigns too late for any hand-off (the next term already had a majority's votes elsewhere) %d\n", res.HandoffsSuperseded)
	}
	if res.HandoffsUnheard+res.StalledHandoffs+res.LateHandoffResigns > 0 {
		fmt.Fprintf(w, "hand-offs needing members that knew no leader of their term %d; hand-off commands to a leader stalled past its lease %d; successors stalled with their resign still due %d\n", res.HandoffsUnheard, res.StalledHandoffs, res.LateHandoffResigns)
	}
	for _, v := range res.Violations {
		fmt.Fprintf(w, "VIOLATION %s\n%s\n", v.String(), v.Excerpt)
	}
	if len(res.Violations) == 0 {
		fmt.Fprintln(w, "no violations")
	}
}
