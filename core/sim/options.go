package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/electcore/electcore/core"
)

// Stepper is one node's election engine: native core.Engine or the wasm module.
type Stepper interface {
	Step(in *core.Input, out *core.Output) error
}

// NewNative returns the default Stepper: a fresh native core.Engine.
func NewNative(id string) (Stepper, error) { return native{core.NewEngine()}, nil }

type native struct{ e *core.Engine }

func (n native) Step(in *core.Input, out *core.Output) error {
	n.e.Step(in, out)
	return nil
}

// Scenario selects what a run does.
type Scenario string

const (
	// ScenarioFaults (the default): a fault phase with the whole fault mix
	// (loss, duplication, delay outliers, partitions, crashes, broker
	// outages, wall-clock jumps, random commands), then a quiet phase in
	// which liveness is checked.
	ScenarioFaults Scenario = "faults"
	// ScenarioFailover: a quiet network; the settled leader is crashed Cycles
	// times (and restarted once the swarm has a new leader). Measures the
	// failover time and the publishes per election.
	ScenarioFailover Scenario = "failover"
	// ScenarioResign: a quiet network; the settled leader resigns Cycles
	// times. Measures the hand-off time.
	ScenarioResign Scenario = "resign"
	// ScenarioHeal: the swarm is split into two halves until each side has a
	// settled leader (bully) or the majority side has one (quorum), then
	// healed, Cycles times. Measures the time to converge on one leader.
	ScenarioHeal Scenario = "heal"
)

// Options configure one simulated run. The zero value (but for Seed) is a
// fault-mix run in quorum mode with swarm size, timings and faults drawn from
// the seed.
type Options struct {
	Seed     uint64    `json:"seed"`
	Mode     core.Mode `json:"mode"`               // default quorum
	Scenario Scenario  `json:"scenario,omitempty"` // default faults
	// Nodes is the swarm size; 0 draws 3..7 from the seed (faults) or uses 5.
	Nodes int `json:"nodes"`
	// Config is the template of every node's configuration; the simulator
	// fills ID, Group and Members (and Priority, in the fault mix, unless
	// set). Zero timings: the core's defaults, except in the fault mix,
	// where HeartbeatMs and ElectionTimeoutMs are drawn from the seed
	// (300–500 ms, 1400–2500 ms) when both are 0.
	Config core.Config `json:"config"`
	// LatencyMs is the base one-way delay (default 100) and JitterMs the
	// uniform jitter around it (default LatencyMs/2 in the fault mix,
	// LatencyMs/5 otherwise; -1 for none). Delays never go below 1 ms.
	LatencyMs int64 `json:"latency_ms"`
	JitterMs  int64 `json:"jitter_ms"`
	// FaultMs is the length of the fault phase (default 8 election
	// timeouts). The quiet phase that follows lasts until every message sent
	// in the fault phase has arrived, plus the liveness bound, plus two
	// election timeouts.
	FaultMs int64 `json:"fault_ms"`
	// Faults is the fault mix; nil draws one from the seed.
	Faults *FaultMix `json:"faults,omitempty"`
	// Cycles is how many crashes, resigns or heals the measuring scenarios
	// perform (default 10).
	Cycles int `json:"cycles"`
	// NewStepper, if set, makes a fresh engine for a node (also on every
	// restart); default NewNative.
	NewStepper func(id string) (Stepper, error) `json:"-"`
	// Record keeps the full Trace in the Result (memory grows with the run).
	Record bool `json:"-"`
	// Adversary adds mallory (adversary.go): a non-member that captures,
	// replays, forges and floods messages for the whole run. Unless
	// Config.Auth says otherwise, the swarm then authenticates (HMAC);
	// Config.Auth = core.AuthOff shows what the adversary does without.
	// With Config.Auth set, the simulator derives every key from the seed.
	Adversary bool `json:"adversary,omitempty"`
	// Outsider adds, to a swarm that does not authenticate, an outsider
	// that forges, during the fault phase, what one message must not turn
	// into an outage even without authentication (adversary.go
	// outsiderAct): acks far ahead in term and configurations under a
	// non-member's name. Quorum mode, fault mix; not with Adversary nor with
	// Config.Auth on.
	Outsider bool `json:"outsider,omitempty"`
	// Targeted adds the targeted adversarial schedule to the fault mix
	// (targeted.go): clocks at opposite extremes of the drift bound for the
	// whole run, the leader cut off with a minority right after it speaks,
	// single messages and votes held back for one to three election
	// timeouts, crash-restart loops, pauses, and resignations and transfers
	// that reach only some members; in quorum mode, after the heal,
	// hand-offs to members that know no leader of their term and to a
	// successor stalled past its lease (healedhandoff.go).
	Targeted bool `json:"targeted,omitempty"`
	// Membership makes every seed of the fault mix (quorum mode) change the
	// configuration: spare nodes waiting to be added and several changes
	// (membership.go). Without it, the drawn fault mix of a quorum seed
	// has them most of the time, fewer and sometimes none.
	Membership bool `json:"membership,omitempty"`
	// Drain drains the best node (highest priority, then id) at a moment of
	// the fault phase drawn from the seed, for the rest of the run, as an
	// operator does for maintenance (core.CmdDrain); its host persists the
	// drain and sends it again with every restart. The checker (InvDrained)
	// then holds it to never leading at the end of a step nor asking for
	// (pre-)votes. Quorum mode, fault mix, at least two nodes; the run has
	// no membership changes (a drained node left alone could never elect).
	Drain bool `json:"drain,omitempty"`
	// BatchMs bounds the hosts' batching windows: each node life steps after
	// a window of up to BatchMs (0 for a third of the lives), collecting what
	// arrives meanwhile. 0 draws it from the seed in the fault mix (none in
	// the measuring scenarios); -1 for none.
	BatchMs int64 `json:"batch_ms,omitempty"`
}

// FaultMix says how hostile the network and the environment are during the
// fault phase. Probabilities are per delivery (each subscriber of a publish
// draws separately).
type FaultMix struct {
	Loss         float64 `json:"loss"`           // a delivery is lost
	Dup          float64 `json:"dup"`            // a delivery arrives twice
	Outlier      float64 `json:"outlier"`        // a delivery is delayed up to OutlierMaxMs
	OutlierMaxMs int64   `json:"outlier_max_ms"` // default 3 election timeouts
	Partitions   int     `json:"partitions"`     // partition episodes (symmetric, asymmetric, one-way, isolation)
	Crashes      int     `json:"crashes"`        // crash + restart episodes (some in the middle of a step)
	Outages      int     `json:"outages"`        // broker outages: every message dropped
	WallJumps    int     `json:"wall_jumps"`     // the wall clock jumps by up to a day either way
	Commands     int     `json:"commands"`       // random campaign, resign and transfer commands
	Pauses       int     `json:"pauses"`         // a node's process frozen (GC, SIGSTOP) for a heartbeat interval plus up to 3 election timeouts
	Replays      int     `json:"replays"`        // a real message delivered again, arbitrarily long after it was sent
	SaveFail     float64 `json:"save_fail"`      // a save fails (the host's core.PersistGate holds the group's publishes until one succeeds)
	// Quorum mode: Spares nodes start waiting to be added (Config.AwaitConfig)
	// and Changes membership changes (add, remove, replace; at the leader or
	// forwarded by any node) are asked for during the fault phase
	// (membership.go).
	Spares  int `json:"spares,omitempty"`
	Changes int `json:"changes,omitempty"`
}

// drawFaults picks a fault mix from the seed: calm seeds (so that bully's
// connected-network safety is exercised) as well as hostile ones.
func drawFaults(r *rand.Rand, et int64, mode core.Mode, membership bool) *FaultMix {
	f := &FaultMix{OutlierMaxMs: 3 * et}
	intensity := r.IntN(4) // 0 calm .. 3 hostile
	probs := [...]float64{0, 0.005, 0.03, 0.15}
	f.Loss = probs[r.IntN(intensity+1)]
	f.Dup = probs[r.IntN(intensity+1)]
	f.Outlier = probs[r.IntN(intensity+1)] / 3
	f.Partitions = r.IntN(3*intensity + 1)
	f.Crashes = r.IntN(3*intensity + 2)
	f.Outages = r.IntN(intensity + 1)
	f.WallJumps = r.IntN(3)
	f.Commands = r.IntN(4)
	f.Pauses = r.IntN(intensity + 1)
	f.Replays = r.IntN(4*intensity + 1)
	f.SaveFail = probs[r.IntN(intensity+1)]
	switch {
	case mode != core.ModeQuorum:
	case membership:
		f.Spares, f.Changes = 1+r.IntN(2), 2+r.IntN(7)
	case r.IntN(5) > 0:
		f.Spares, f.Changes = r.IntN(3), 1+r.IntN(2*intensity+2)
	}
	return f
}

// setup is a normalised Options plus what was drawn from the seed.
type setup struct {
	Options
	cfg      core.Config // normalised template (timings filled in)
	ids      []string
	prios    []uint32
	latency  int64
	jitter   int64
	dmax     int64 // the largest normal one-way delay
	batchMax int64 // the longest batching window
	faultEnd int64 // real time the fault phase ends (faults scenario)
	bound    int64 // liveness bound (ms after the heal)
}

func (o Options) normalize() (*setup, error) {
	s := &setup{Options: o}
	if s.Mode == "" {
		s.Mode = core.ModeQuorum
	}
	if s.Mode != core.ModeQuorum && s.Mode != core.ModeBully {
		return nil, fmt.Errorf("sim: mode %q", s.Mode)
	}
	if s.Scenario == "" {
		s.Scenario = ScenarioFaults
	}
	switch s.Scenario {
	case ScenarioFaults, ScenarioFailover, ScenarioResign, ScenarioHeal:
	default:
		return nil, fmt.Errorf("sim: scenario %q", s.Scenario)
	}
	if s.Targeted && s.Scenario != ScenarioFaults {
		return nil, errors.New("sim: the targeted schedule is part of the fault mix (scenario faults)")
	}
	if s.Membership && (s.Scenario != ScenarioFaults || s.Mode != core.ModeQuorum) {
		return nil, errors.New("sim: membership changes are part of the fault mix in quorum mode (bully mode has no configuration)")
	}
	if s.Outsider && (s.Scenario != ScenarioFaults || s.Mode != core.ModeQuorum || s.Adversary ||
		s.Config.Auth != "" && s.Config.Auth != core.AuthOff) {
		return nil, errors.New("sim: the outsider forges in the fault mix of quorum mode, without authentication nor the adversary")
	}
	if s.Drain && (s.Scenario != ScenarioFaults || s.Mode != core.ModeQuorum || s.Membership) {
		return nil, errors.New("sim: drain is part of the fault mix in quorum mode, without membership changes")
	}
	// The seed's own stream for drawing the setup; the run uses others.
	r := rand.New(rand.NewPCG(s.Seed, 0x5e7a9))
	if s.Nodes == 0 {
		s.Nodes = 5
		if s.Scenario == ScenarioFaults {
			s.Nodes = 3 + r.IntN(5)
		}
	}
	if s.Nodes < 1 || s.Nodes > core.MaxMembers {
		return nil, fmt.Errorf("sim: %d nodes", s.Nodes)
	}
	if s.Scenario == ScenarioHeal && s.Nodes < 2 {
		return nil, errors.New("sim: heal needs two nodes")
	}
	cfg := s.Config
	if s.Scenario == ScenarioFaults && cfg.HeartbeatMs == 0 && cfg.ElectionTimeoutMs == 0 {
		cfg.HeartbeatMs = 300 + 10*r.Int64N(21)
		cfg.ElectionTimeoutMs = max(3*cfg.HeartbeatMs, 1400+10*r.Int64N(111))
		if r.IntN(2) == 0 {
			// Large drift bounds make the lease much shorter than the
			// election timeout: an engine that ignored the bound is caught.
			cfg.MaxDriftPPM = []int64{1_000, 30_000, 50_000, 100_000}[r.IntN(4)]
		}
		if cfg.HandoffHoldMs == 0 && r.IntN(2) == 0 {
			// A resigning leader's work may run on for up to ET/2, within
			// what the lease leaves (the lease shrinks by the hold).
			drift := cfg.MaxDriftPPM
			if drift == 0 {
				drift = core.DefaultMaxDriftPPM
			}
			limit := min(cfg.ElectionTimeoutMs/2, core.MaxLeaseMs(cfg.ElectionTimeoutMs, drift)-2*cfg.HeartbeatMs)
			cfg.HandoffHoldMs = r.Int64N(max(limit, 0) + 1)
		}
	}
	s.ids = make([]string, s.Nodes)
	width := len(fmt.Sprint(s.Nodes - 1))
	for i := range s.ids {
		s.ids[i] = fmt.Sprintf("n%0*d", width, i)
	}
	s.prios = make([]uint32, s.Nodes)
	if cfg.Priority != 0 {
		for i := range s.prios {
			s.prios[i] = cfg.Priority
		}
	} else if s.Scenario == ScenarioFaults && r.IntN(3) == 0 {
		for i := range s.prios {
			s.prios[i] = 1 + uint32(r.IntN(3)) // many ties: the id decides
		}
	}
	cfg.ID, cfg.Group = s.ids[0], "g"
	if s.Mode == core.ModeQuorum || s.Scenario == ScenarioFaults && r.IntN(2) == 0 {
		cfg.Members = s.ids
	}
	cfg.Mode = s.Mode
	s.authKeys(&cfg)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim: config: %w", err)
	}
	cfg = fill(cfg) // the defaults the core applies, for the simulator's own use
	s.cfg = cfg
	s.latency = s.LatencyMs
	if s.latency <= 0 {
		s.latency = 100
		if s.Scenario == ScenarioFaults {
			// Fast networks make elections quick, which is where leases and
			// restarted voters are tested hardest.
			s.latency = []int64{1, 1, 2, 5, 10, 30, 100, 100}[r.IntN(8)]
		}
	}
	switch {
	case s.JitterMs < 0:
		s.jitter = 0
	case s.JitterMs > 0:
		s.jitter = min(s.JitterMs, s.latency-1)
	case s.Scenario == ScenarioFaults:
		s.jitter = s.latency / 2
	default:
		s.jitter = s.latency / 5
	}
	s.dmax = s.latency + s.jitter
	switch {
	case s.BatchMs > 0:
		s.batchMax = s.BatchMs
	case s.BatchMs == 0 && s.Scenario == ScenarioFaults:
		s.batchMax = []int64{0, 1, 5, 20, s.latency}[r.IntN(5)]
	}
	if s.Cycles <= 0 {
		s.Cycles = 10
	}
	if s.Scenario == ScenarioFaults {
		if s.FaultMs <= 0 {
			s.FaultMs = 8 * cfg.ElectionTimeoutMs
		}
		if s.Faults == nil {
			s.Faults = drawFaults(r, cfg.ElectionTimeoutMs, s.Mode, s.Membership)
		} else {
			f := *s.Faults
			if f.OutlierMaxMs <= 0 {
				f.OutlierMaxMs = 3 * cfg.ElectionTimeoutMs
			}
			s.Faults = &f
		}
		s.faultEnd = s.FaultMs
		if s.Drain {
			if s.Nodes < 2 {
				return nil, errors.New("sim: drain needs two nodes: a drained node alone never leads")
			}
			f := *s.Faults
			f.Spares, f.Changes = 0, 0
			s.Faults = &f
		}
		if s.Faults.Spares < 0 || s.Faults.Changes < 0 || (s.Faults.Spares > 0 || s.Faults.Changes > 0) && s.Mode != core.ModeQuorum {
			return nil, errors.New("sim: spares and membership changes need quorum mode")
		}
		// Spares, named s0, s1, …, wait to be added (their Members: the
		// initial ones, from which they learn their first configuration).
		for i := range s.Faults.Spares {
			s.ids = append(s.ids, fmt.Sprintf("s%d", i))
			s.prios = append(s.prios, s.prios[0])
		}
		if s.Nodes+s.Faults.Spares > core.MaxMembers {
			return nil, fmt.Errorf("sim: %d nodes and %d spares", s.Nodes, s.Faults.Spares)
		}
	}
	// A message is handled up to one batching window after it arrives.
	s.bound = livenessBound(s.Mode, cfg, s.dmax+s.batchMax)
	if s.NewStepper == nil {
		s.NewStepper = NewNative
	}
	return s, nil
}

// LivenessBound is the time within which, once the faults have stopped (the
// network is whole, every node is up and every message sent during the fault
// phase has arrived), a leader is elected and known to every member:
//
//   - quorum: 3 election timeouts + 4 heartbeat intervals + 8 one-way delays.
//     Members that heard a leader or voted refuse votes for up to one
//     election timeout (ET); the first campaign can come up to 1.625·ET
//     later (timeout plus ranked, randomised offset) and fail on a member
//     still in its lease, and the next succeeds within another timeout;
//     the delays are pre-vote, vote, announcement and an ack round trip.
//   - bully: 2 election timeouts + CollectMs + 4 heartbeat intervals + 6
//     delays: a follower that heard a leader or a better candidate waits
//     up to 1.625·ET before it campaigns, then collects for CollectMs.
//
// maxDelayMs is the longest normal time from a publish to the step that
// handles it: the simulator passes latency + jitter + the longest batching
// window. Clock drift stretches every local interval by at most 1+drift,
// which the slack covers.
func LivenessBound(mode core.Mode, cfg core.Config, maxDelayMs int64) int64 {
	return livenessBound(mode, fill(cfg), maxDelayMs)
}

func livenessBound(mode core.Mode, c core.Config, d int64) int64 {
	var b int64
	if mode == core.ModeBully {
		b = 2*c.ElectionTimeoutMs + c.CollectMs + 4*c.HeartbeatMs + 6*d
	} else {
		b = 3*c.ElectionTimeoutMs + 4*c.HeartbeatMs + 8*d
	}
	return b + b*c.MaxDriftPPM/1_000_000 + 1
}

// fill applies the core's defaults to the timings of a valid config. Only
// the fields fill set before are taken (the lease stays as configured, 0
// meaning the core's default, which each node then derives itself).
func fill(c core.Config) core.Config {
	d, err := c.WithTimingDefaults()
	if err != nil {
		return c // invalid timings: nothing the core would run with
	}
	c.HeartbeatMs, c.ElectionTimeoutMs, c.MaxDriftPPM, c.CollectMs = d.HeartbeatMs, d.ElectionTimeoutMs, d.MaxDriftPPM, d.CollectMs
	return c
}

// CISeeds is how many seeds of each simulation suite (the fault mix and the
// targeted schedule, in each mode) the CI runs: the budget within which
// make mutants shows each mutation of the core caught.
const CISeeds = 20_000

// AdversaryCISeeds and OutsiderCISeeds are the budgets of the adversary's
// (HMAC) and the outsider's fault-mix suites in make mutants.
const (
	AdversaryCISeeds = 2_000
	OutsiderCISeeds  = 2_000
)

// DrainCISeeds is the CI's budget of the drain suite (Options.Drain), which
// checks one rule on top of the fault mix the other suites run.
const DrainCISeeds = 2_000

// SlowCISeeds is the CI's budget of the slow-network suite (SlowNetwork).
const SlowCISeeds = 1_000

// SlowNetwork is the slow-network suite: the default timings (heartbeat
// 500 ms, election timeout 2 s, a 1959 ms lease) on a network whose round
// trip, 1.1–1.5 s, is more than half the lease but less than the lease
// less a heartbeat interval, with a few partitions, crashes and commands.
// A leader elected there has a round trip of its votes' lease left at most,
// and its first heartbeat's acks take another: a leader that stepped down
// when the votes' lease ran out never kept a term.
func SlowNetwork() Options {
	return Options{Mode: core.ModeQuorum, LatencyMs: 650, JitterMs: 100,
		Config: core.Config{HeartbeatMs: 500, ElectionTimeoutMs: 2000},
		Faults: &FaultMix{Partitions: 2, Crashes: 2, Commands: 2}}
}
