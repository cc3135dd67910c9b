package sim

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/electcore/electcore/core"
)

// Result is what one run observed.
type Result struct {
	Seed              uint64    `json:"seed"`
	Mode              core.Mode `json:"mode"`
	Scenario          Scenario  `json:"scenario"`
	Nodes             int       `json:"nodes"`
	HeartbeatMs       int64     `json:"heartbeat_ms"`
	ElectionTimeoutMs int64     `json:"election_timeout_ms"`
	LatencyMs         int64     `json:"latency_ms"`
	JitterMs          int64     `json:"jitter_ms"`
	BoundMs           int64     `json:"bound_ms"` // the liveness bound applied
	BatchMs           int64     `json:"batch_ms"` // the longest batching window of a host
	Clocks            string    `json:"clocks"`   // how the clock rates were drawn
	Faults            *FaultMix `json:"faults,omitempty"`

	VirtualMs  int64 `json:"virtual_ms"` // simulated time
	Steps      int64 `json:"steps"`      // Stepper.Step calls
	Publishes  int64 `json:"publishes"`
	Delivered  int64 `json:"delivered"`
	Dropped    int64 `json:"dropped"`
	Duplicated int64 `json:"duplicated"`
	Outliers   int64 `json:"outliers"`
	Crashes    int64 `json:"crashes"`
	// Replayed counts real messages delivered again long after they were
	// sent (FaultMix.Replays); SaveFailures the steps whose save failed.
	Replayed     int64 `json:"replayed,omitempty"`
	SaveFailures int64 `json:"save_failures,omitempty"`
	Pauses       int64 `json:"pauses,omitempty"`
	Rejected     int64 `json:"rejected"` // EventRejected (stale terms and the like)
	Elections    int64 `json:"elections"`
	// ElectionPublishes counts publishes of election, vote, leader and
	// resign messages (not heartbeats and acks).
	ElectionPublishes int64 `json:"election_publishes"`
	// SplitBrains counts two bully leaders in one term while the network
	// was not connected: allowed, and reported for information.
	SplitBrains int64 `json:"split_brains"`
	// Injected counts the adversary's deliveries (forgeries and replays).
	Injected int64 `json:"injected,omitempty"`
	// ConfigCommands counts the membership changes asked for (retries
	// included); ConfigChanges the committed configurations whose members
	// differ from the committed one before.
	ConfigCommands int64 `json:"config_commands,omitempty"`
	ConfigChanges  int64 `json:"config_changes,omitempty"`
	// HealedChangeMs is how long the change asked of the healed group took
	// to commit (membership.go healedChange); 0 if none was asked.
	HealedChangeMs int64 `json:"healed_change_ms,omitempty"`
	// StaleCampaigns counts the leaders crashed right after a change
	// committed, with a member that lacks it told to campaign.
	StaleCampaigns int64 `json:"stale_campaigns,omitempty"`

	// HandoffsNamed counts the resigns naming a successor sent on a healed
	// network to a member that stayed up (handoff.go); HandoffsLost those
	// whose successor did not lead the next term; HandoffLostAtMs when the
	// first of them was sent.
	HandoffsNamed   int64 `json:"handoffs_named,omitempty"`
	HandoffsLost    int64 `json:"handoffs_lost,omitempty"`
	HandoffLostAtMs int64 `json:"handoff_lost_at_ms,omitempty"`
	// HandoffsSuperseded counts the resigns on a healed network not
	// counted above: sent after the successor's term had enough votes for
	// others that no majority could elect it there (handoff.go).
	HandoffsSuperseded int64 `json:"handoffs_superseded,omitempty"`
	// HandoffsUnheard counts the hand-offs of HandoffsNamed whose
	// successor could win only with the votes of members that were in the
	// resign's term but knew no leader of it (handoff.go resignArrived);
	// StalledHandoffs the hand-off commands that reached, on a healed
	// network, a leader whose lease had run out before it could act on
	// them (paused past it).
	HandoffsUnheard int64 `json:"handoffs_unheard,omitempty"`
	StalledHandoffs int64 `json:"stalled_handoffs,omitempty"`
	// LateHandoffResigns counts the successors that led their term before
	// the resign naming them arrived, and were then paused past their
	// lease with it due (healedhandoff.go).
	LateHandoffResigns int64 `json:"late_handoff_resigns,omitempty"`

	// FirstLeaderMs is when the swarm first agreed on a leader (measuring
	// scenarios); LivenessMs is how long after the faults ended it agreed
	// (fault mix).
	FirstLeaderMs int64 `json:"first_leader_ms,omitempty"`
	LivenessMs    int64 `json:"liveness_ms,omitempty"`

	Failovers  []Failover  `json:"failovers,omitempty"`
	Handoffs   []Handoff   `json:"handoffs,omitempty"`
	Heals      []Heal      `json:"heals,omitempty"`
	Violations []Violation `json:"violations,omitempty"`

	// TraceHash is the hex SHA-256 over every node's msgp-encoded outputs,
	// in the order they were produced.
	TraceHash string `json:"trace_hash"`
	// Trace is the full record, with Options.Record.
	Trace *Trace `json:"-"`
}

// Violation is one broken invariant. Run(Options{Seed: Seed, ...}) with the
// same options reproduces it byte for byte.
type Violation struct {
	Invariant string   `json:"invariant"`
	Seed      uint64   `json:"seed"`
	AtMs      int64    `json:"at_ms"` // real (simulated) time
	Nodes     []string `json:"nodes"`
	Detail    string   `json:"detail"`
	// Excerpt is the trace of the nodes concerned over the two election
	// timeouts before AtMs, one line per step.
	Excerpt string `json:"excerpt,omitempty"`
}

func (v Violation) String() string {
	return "seed " + uitoa(v.Seed) + " at " + itoa(v.AtMs) + " ms: " + v.Invariant + ": " + v.Detail
}

// Failover is one crash of the settled leader.
type Failover struct {
	AtMs      int64  `json:"at_ms"`
	Leader    string `json:"leader"`
	NewLeader string `json:"new_leader"`
	ElectedMs int64  `json:"elected_ms"` // crash → a new leader is elected
	KnownMs   int64  `json:"known_ms"`   // crash → every live node knows it
	Publishes int64  `json:"publishes"`  // election publishes in between
}

// Handoff is one resign of the settled leader.
type Handoff struct {
	AtMs      int64  `json:"at_ms"`
	From      string `json:"from"`
	To        string `json:"to"`
	ElectedMs int64  `json:"elected_ms"` // resign command → successor elected
	KnownMs   int64  `json:"known_ms"`   // resign command → every node knows it
	Publishes int64  `json:"publishes"`
}

// Heal is one partition healed.
type Heal struct {
	AtMs          int64  `json:"at_ms"`
	Sides         []int  `json:"sides"`
	SidesSettled  int    `json:"sides_settled"` // sides with one leader known to the whole side at the heal
	ConvergedMs   int64  `json:"converged_ms"`  // heal → one leader known to every node
	Leader        string `json:"leader"`
	Term          uint64 `json:"term"`
	MaxTermAtHeal uint64 `json:"max_term_at_heal"`
}

// Stats summarises durations in ms (or counts).
type Stats struct {
	N    int     `json:"n"`
	P50  int64   `json:"p50"`
	P99  int64   `json:"p99"`
	Max  int64   `json:"max"`
	Mean float64 `json:"mean"`
	// MaxSeed is the seed of the run that produced Max (replay it with
	// electhost sim --seed).
	MaxSeed uint64 `json:"max_seed"`
}

// sample is one measurement and the seed of its run.
type sample struct {
	v    int64
	seed uint64
}

// newSeededStats is NewStats that also names the seed of the maximum (the
// first run to reach it).
func newSeededStats(ss []sample) Stats {
	v := make([]int64, len(ss))
	best := -1
	for i, x := range ss {
		v[i] = x.v
		if best < 0 || x.v > ss[best].v {
			best = i
		}
	}
	st := NewStats(v)
	if best >= 0 {
		st.MaxSeed = ss[best].seed
	}
	return st
}

// NewStats computes nearest-rank percentiles.
func NewStats(v []int64) Stats {
	if len(v) == 0 {
		return Stats{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	var sum int64
	for _, x := range s {
		sum += x
	}
	rank := func(p int) int64 { return s[max((len(s)*p+99)/100-1, 0)] }
	return Stats{N: len(s), P50: rank(50), P99: rank(99), Max: s[len(s)-1], Mean: float64(sum) / float64(len(s))}
}

// Report aggregates many runs.
type Report struct {
	Mode       core.Mode   `json:"mode"`
	Scenario   Scenario    `json:"scenario"`
	Seeds      int         `json:"seeds"`
	Violations []Violation `json:"violations"`
	Steps      int64       `json:"steps"`
	VirtualMs  int64       `json:"virtual_ms"`
	Elections  int64       `json:"elections"`
	// SplitBrains: bully elections in one term while the network was split.
	SplitBrains int64 `json:"split_brains"`
	// ConfigChanges: committed membership changes (fault mix, quorum);
	// MembershipSeeds: the seeds whose fault mix asked for changes.
	ConfigChanges   int64 `json:"config_changes,omitempty"`
	MembershipSeeds int   `json:"membership_seeds,omitempty"`
	// HandoffsNamed, HandoffsLost: hand-offs on a healed network and those
	// whose successor did not lead (Result); HandoffLostSeeds the seeds
	// that lost one (the first 20).
	HandoffsNamed    int64    `json:"handoffs_named,omitempty"`
	HandoffsLost     int64    `json:"handoffs_lost,omitempty"`
	HandoffLostSeeds []uint64 `json:"handoff_lost_seeds,omitempty"`
	// HandoffsSuperseded: resigns too late for any hand-off (Result).
	HandoffsSuperseded int64 `json:"handoffs_superseded,omitempty"`
	// HandoffsUnheard, StalledHandoffs: hand-offs that needed the votes of
	// members knowing no leader of their term, and hand-off commands that
	// reached a leader stalled past its lease (Result).
	HandoffsUnheard int64 `json:"handoffs_unheard,omitempty"`
	StalledHandoffs int64 `json:"stalled_handoffs,omitempty"`
	// LateHandoffResigns: successors stalled past their lease with the
	// resign that named them still due (Result).
	LateHandoffResigns int64 `json:"late_handoff_resigns,omitempty"`
	// FailoverElected: crash → new leader elected; FailoverKnown: crash →
	// every live node knows it.
	FailoverElected Stats `json:"failover_elected_ms"`
	FailoverKnown   Stats `json:"failover_known_ms"`
	// PublishesPerElection: election, vote, leader and resign publishes
	// from a crash to the moment every node knows the new leader.
	PublishesPerElection Stats `json:"publishes_per_election"`
	HandoffElected       Stats `json:"handoff_elected_ms"` // resign → successor elected
	HandoffKnown         Stats `json:"handoff_known_ms"`
	HealConverged        Stats `json:"heal_converged_ms"`
	Liveness             Stats `json:"liveness_ms"`      // fault mix: heal → agreement
	HealedChange         Stats `json:"healed_change_ms"` // fault mix with changes: the change asked after the heal → committed
	// TraceHash chains every run's TraceHash in seed order.
	TraceHash string `json:"trace_hash"`
}

// Seeds returns n consecutive seeds starting at first.
func Seeds(first uint64, n int) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = first + uint64(i)
	}
	return s
}

// RunMany runs opts once per seed (opts.Seed is replaced), in parallel on
// GOMAXPROCS goroutines, and aggregates the results in seed order, so the
// Report does not depend on the scheduling. progress, if set, is called
// after each run (from one goroutine at a time) with the runs done so far.
// It stops at the first error (invalid options or a Stepper that cannot be
// made), and with ctx's error once ctx is done (runs under way stop too).
func RunMany(ctx context.Context, opts Options, seeds []uint64, progress func(done, total int)) (*Report, error) {
	results := make([]*Result, len(seeds))
	errs := make([]error, len(seeds))
	var next, done atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	workers := min(runtime.GOMAXPROCS(0), max(len(seeds), 1))
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(seeds) || ctx.Err() != nil {
					return
				}
				o := opts
				o.Seed = seeds[i]
				results[i], errs[i] = runSeed(ctx, o)
				if errs[i] != nil {
					next.Store(int64(len(seeds)))
				}
				d := int(done.Add(1))
				if progress != nil {
					mu.Lock()
					progress(d, len(seeds))
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return Aggregate(results), nil
}

// Aggregate summarises results (nil entries are skipped).
func Aggregate(results []*Result) *Report {
	r := &Report{Violations: []Violation{}}
	var foE, foK, pubs, hoE, hoK, heal, live, hc []sample
	chain := newChain()
	for _, res := range results {
		if res == nil {
			continue
		}
		r.Mode, r.Scenario = res.Mode, res.Scenario
		r.Seeds++
		r.Violations = append(r.Violations, res.Violations...)
		r.Steps += res.Steps
		r.VirtualMs += res.VirtualMs
		r.Elections += res.Elections
		r.SplitBrains += res.SplitBrains
		r.ConfigChanges += res.ConfigChanges
		r.HandoffsNamed += res.HandoffsNamed
		r.HandoffsLost += res.HandoffsLost
		r.HandoffsSuperseded += res.HandoffsSuperseded
		r.HandoffsUnheard += res.HandoffsUnheard
		r.StalledHandoffs += res.StalledHandoffs
		r.LateHandoffResigns += res.LateHandoffResigns
		if res.HandoffsLost > 0 && len(r.HandoffLostSeeds) < 20 {
			r.HandoffLostSeeds = append(r.HandoffLostSeeds, res.Seed)
		}
		if res.Faults != nil && res.Faults.Changes > 0 {
			r.MembershipSeeds++
		}
		for _, f := range res.Failovers {
			foE = append(foE, sample{f.ElectedMs, res.Seed})
			foK = append(foK, sample{f.KnownMs, res.Seed})
			pubs = append(pubs, sample{f.Publishes, res.Seed})
		}
		for _, h := range res.Handoffs {
			hoE = append(hoE, sample{h.ElectedMs, res.Seed})
			hoK = append(hoK, sample{h.KnownMs, res.Seed})
		}
		for _, h := range res.Heals {
			heal = append(heal, sample{h.ConvergedMs, res.Seed})
		}
		if res.Scenario == ScenarioFaults {
			live = append(live, sample{res.LivenessMs, res.Seed})
		}
		if res.HealedChangeMs > 0 {
			hc = append(hc, sample{res.HealedChangeMs, res.Seed})
		}
		chain.add(res.TraceHash)
	}
	r.FailoverElected, r.FailoverKnown, r.PublishesPerElection = newSeededStats(foE), newSeededStats(foK), newSeededStats(pubs)
	r.HandoffElected, r.HandoffKnown = newSeededStats(hoE), newSeededStats(hoK)
	r.HealConverged, r.Liveness, r.HealedChange = newSeededStats(heal), newSeededStats(live), newSeededStats(hc)
	r.TraceHash = chain.sum()
	return r
}
