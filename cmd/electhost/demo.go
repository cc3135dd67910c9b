package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/host/wasmrt"
	"github.com/electcore/electcore/internal/wasmhost"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/mem"
	"github.com/electcore/electcore/transport/nats"
	"github.com/spf13/cobra"
)

// Demo timings: half the core's defaults (500 ms / 2 s), so the demo is
// brisk but behaves like a real deployment (same ratios, same code paths).
const (
	demoHeartbeat       = 250 * time.Millisecond
	demoElectionTimeout = time.Second
)

type demoOptions struct {
	agents          int
	transport       string
	jsonOut         bool
	wasmPath        string
	cacheDir        string
	heartbeat       time.Duration
	electionTimeout time.Duration
	verbose         bool
}

func newDemoCmd() *cobra.Command {
	o := &demoOptions{}
	c := &cobra.Command{
		Use:   "demo",
		Short: "Elect, crash the leader, fail over, rejoin and hand off, on an embedded broker",
		Long: `demo starts an embedded NATS server on loopback (or an in-memory bus with
--transport mem) and --agents agents in this process, each running the
electcore wasm module through the wazero host (one Runtime, one Agent and one
connection each), in quorum mode, and walks through these steps, one row
each in the closing table:

  start            the broker, the wasm runtime and the agents, joined
  first election   every agent agrees on one leader
  crash            the leader's agent is closed abruptly (no resignation)
  failover         the survivors elect a new leader
  rejoin           the crashed agent restarts from its persisted state
  hand-off         the leader resigns gracefully; a successor takes over
  stop             followers leave, then the leader resigns and leaves

It prints a timeline (ms since start, agent, what happened) and the table;
--json prints a summary instead. It also checks that no two agents lead the
same term. Exit status: 0 every step passed; 1 a step failed (named);
2 bad flags; 3 the module (--wasm, $ELECTCORE_WASM) cannot be loaded.
Timing: heartbeat 250ms, election timeout 1s (half the defaults).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.agents < 3 || o.agents > 64 {
				return usageErrorf("--agents %d: want 3..64 (a crash must leave a majority)", o.agents)
			}
			if o.transport != "nats" && o.transport != "mem" {
				return usageErrorf("--transport %q: want nats or mem", o.transport)
			}
			if _, err := deriveTiming(core.ModeQuorum, o.heartbeat, o.electionTimeout, 0, 0, false); err != nil {
				return err
			}
			if _, err := wasmhost.LoadModule(o.wasmPath); err != nil {
				return configErrorf("%s", userWords(err.Error()))
			}
			return runDemo(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := c.Flags()
	f.IntVar(&o.agents, "agents", 5, "number of agents (3..64)")
	f.StringVar(&o.transport, "transport", "nats", "nats (embedded server on loopback) or mem (in-process bus)")
	f.BoolVar(&o.jsonOut, "json", false, "print a JSON summary instead of the timeline")
	f.StringVar(&o.wasmPath, "wasm", "", "electcore.wasm (default as for run)")
	f.StringVar(&o.cacheDir, "cache-dir", "", "wazero compilation cache (default ~/.cache/electcore/wazero)")
	f.DurationVar(&o.heartbeat, "heartbeat", demoHeartbeat, "heartbeat interval")
	f.DurationVar(&o.electionTimeout, "election-timeout", demoElectionTimeout, "election timeout")
	f.BoolVar(&o.verbose, "verbose", false, "also log the host's and transports' records on stderr")
	return c
}

type demoStep struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Ms     int64  `json:"ms"`
	Detail string `json:"detail"`
}

type demoSummary struct {
	OK                bool       `json:"ok"`
	FailedStep        string     `json:"failed_step,omitempty"`
	Error             string     `json:"error,omitempty"`
	Agents            int        `json:"agents"`
	Transport         string     `json:"transport"`
	Mode              string     `json:"mode"`
	HeartbeatMs       int64      `json:"heartbeat_ms"`
	ElectionTimeoutMs int64      `json:"election_timeout_ms"`
	StartupMs         int64      `json:"startup_ms"`
	FirstElectionMs   int64      `json:"first_election_ms"`
	FailoverMs        int64      `json:"failover_ms"`
	RejoinMs          int64      `json:"rejoin_ms"`
	HandoffMs         int64      `json:"handoff_ms"`
	Publishes         uint64     `json:"publishes"`
	Steps             []demoStep `json:"steps"`
}

// demoAgent is one agent of the demo and its bookkeeping.
type demoAgent struct {
	id    string
	dir   string
	tr    transport.Transport
	store *statestore.Store
	agent *host.Agent
	el    *host.Election
	up    bool
	pubs  uint64       // publishes of previous incarnations
	quiet *atomic.Bool // set when this incarnation crashed: its callbacks are no longer shown
}

type demo struct {
	o       *demoOptions
	out     io.Writer
	logger  *slog.Logger
	start   time.Time
	rt      *wasmrt.Runtime
	bus     *mem.Bus
	natsURL string
	members []string
	agents  []*demoAgent

	cleanups []func()

	mu      sync.Mutex
	leaders map[uint64]string // term -> who started leading it (election safety)
	safety  error
}

func (d *demo) ms() int64 { return time.Since(d.start).Milliseconds() }

func (d *demo) event(id, format string, args ...any) {
	if d.o.jsonOut {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "%7d ms  %-9s %s\n", d.ms(), id, fmt.Sprintf(format, args...))
}

func (d *demo) header(format string, args ...any) {
	if d.o.jsonOut {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "\n== %s\n", fmt.Sprintf(format, args...))
}

func runDemo(ctx context.Context, o *demoOptions, stdout, stderr io.Writer) error {
	d := &demo{o: o, out: stdout, start: time.Now(), leaders: map[uint64]string{}}
	level := slog.LevelError + 4 // silent
	if o.verbose {
		level = slog.LevelInfo
	}
	d.logger = newLogger(stderr, false, level)
	sum := &demoSummary{Agents: o.agents, Transport: o.transport, Mode: string(core.ModeQuorum),
		HeartbeatMs: o.heartbeat.Milliseconds(), ElectionTimeoutMs: o.electionTimeout.Milliseconds(), Steps: []demoStep{}}
	for i := range o.agents {
		d.members = append(d.members, fmt.Sprintf("agent-%d", i+1))
	}
	defer d.cleanup()

	var failed *demoStep
	step := func(name string, fn func() (time.Duration, string, error)) bool {
		if failed != nil {
			return false
		}
		el, detail, err := fn()
		s := demoStep{Name: name, OK: err == nil, Ms: el.Milliseconds(), Detail: detail}
		if err == nil {
			d.mu.Lock()
			err = d.safety
			d.mu.Unlock()
			s.OK = err == nil
		}
		if err != nil {
			s.Detail = err.Error()
			failed = &s
		}
		sum.Steps = append(sum.Steps, s)
		return err == nil
	}

	if !o.jsonOut {
		fmt.Fprintf(stdout, "electcore demo: %d agents, quorum mode, %s transport, heartbeat %v, election timeout %v\n",
			o.agents, o.transport, o.heartbeat, o.electionTimeout)
	}
	step("start", func() (time.Duration, string, error) {
		t0 := time.Now()
		err := d.setup(ctx)
		return time.Since(t0), fmt.Sprintf("%s, wasm runtime, %d agents joined", d.brokerName(), o.agents), err
	})
	sum.StartupMs = d.ms()

	var leader string
	var term uint64
	step("first election", func() (time.Duration, string, error) {
		d.header("1. first election")
		t0 := time.Now()
		var err error
		leader, term, err = d.waitAgreement(ctx, "", 0, 10*o.electionTimeout+5*time.Second)
		if err != nil {
			return time.Since(t0), "", err
		}
		sum.FirstElectionMs = time.Since(t0).Milliseconds()
		d.event(leader, "is leader of term %d, known to all %d agents", term, o.agents)
		return time.Since(t0), fmt.Sprintf("%s leads term %d", leader, term), nil
	})

	crashed := leader
	var crashAt time.Time
	step("crash", func() (time.Duration, string, error) {
		d.header("2. crash: %s's agent is closed without resigning", crashed)
		t0 := time.Now()
		d.crash(d.agent(crashed))
		crashAt = time.Now()
		d.event(crashed, "crashed (transport cut, agent closed, no resignation)")
		return time.Since(t0), fmt.Sprintf("%s killed at term %d", crashed, term), nil
	})

	oldTerm := term
	step("failover", func() (time.Duration, string, error) {
		d.header("3. failover")
		var err error
		leader, term, err = d.waitAgreement(ctx, crashed, oldTerm+1, 10*o.electionTimeout+5*time.Second)
		el := time.Since(crashAt)
		if err != nil {
			return el, "", err
		}
		sum.FailoverMs = el.Milliseconds()
		d.event(leader, "is leader of term %d, known to the %d survivors, %d ms after the crash", term, o.agents-1, el.Milliseconds())
		return el, fmt.Sprintf("%s leads term %d (bound: 2×ET + latency)", leader, term), nil
	})

	step("rejoin", func() (time.Duration, string, error) {
		d.header("4. rejoin: %s restarts from its persisted state", crashed)
		t0 := time.Now()
		a := d.agent(crashed)
		if err := d.startAgent(ctx, a); err != nil {
			return time.Since(t0), "", err
		}
		d.event(crashed, "restarted (state dir %s)", a.dir)
		l, tm, err := d.waitAgreement(ctx, "", term, 10*o.electionTimeout+5*time.Second)
		el := time.Since(t0)
		if err != nil {
			return el, "", err
		}
		st := a.el.Status()
		if st.Term < oldTerm {
			return el, "", fmt.Errorf("%s came back at term %d, below the term %d it had before the crash (persisted state lost)", crashed, st.Term, oldTerm)
		}
		leader, term = l, tm
		sum.RejoinMs = el.Milliseconds()
		d.event(crashed, "rejoined: term %d, above its term %d before the crash", st.Term, oldTerm)
		return el, fmt.Sprintf("%s back at term %d (had %d), following %s", crashed, st.Term, oldTerm, leader), nil
	})

	step("hand-off", func() (time.Duration, string, error) {
		d.header("5. hand-off: %s resigns gracefully", leader)
		t0 := time.Now()
		a := d.agent(leader)
		prevTerm := term
		if err := a.el.Resign(ctx); err != nil {
			return time.Since(t0), "", fmt.Errorf("resign: %v", err)
		}
		d.event(leader, "resigned")
		l, tm, err := d.waitAgreement(ctx, leader, prevTerm+1, 10*o.electionTimeout+5*time.Second)
		el := time.Since(t0)
		if err != nil {
			return el, "", err
		}
		sum.HandoffMs = el.Milliseconds()
		d.event(l, "is leader of term %d, known to all, %d ms after the resignation", tm, el.Milliseconds())
		detail := fmt.Sprintf("%s → %s, term %d", leader, l, tm)
		leader, term = l, tm
		return el, detail, nil
	})

	for _, a := range d.agents {
		sum.Publishes += a.pubs
		if a.up && a.tr != nil {
			sum.Publishes += a.tr.Stats().Published
		}
	}
	step("stop", func() (time.Duration, string, error) {
		d.header("stop: the followers leave, then the leader resigns and leaves")
		t0 := time.Now()
		err := d.stopAll()
		return time.Since(t0), "all agents closed", err
	})

	sum.OK = failed == nil
	if failed != nil {
		sum.FailedStep, sum.Error = failed.Name, failed.Detail
	}
	if o.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(sum)
	} else {
		printDemoTable(stdout, sum)
	}
	if failed != nil {
		return fmt.Errorf("demo step %q failed: %s", failed.Name, failed.Detail)
	}
	return nil
}

func (d *demo) brokerName() string {
	if d.natsURL != "" {
		return "NATS " + d.natsURL
	}
	return "in-memory bus"
}

func printDemoTable(w io.Writer, s *demoSummary) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tRESULT\tTIME\tDETAIL")
	for _, st := range s.Steps {
		res := "ok"
		if !st.OK {
			res = "FAILED"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d ms\t%s\n", st.Name, res, st.Ms, st.Detail)
	}
	tw.Flush()
	if s.OK {
		fmt.Fprintf(w, "\nfirst election %d ms, failover %d ms, rejoin %d ms, hand-off %d ms; %d publishes in all\n",
			s.FirstElectionMs, s.FailoverMs, s.RejoinMs, s.HandoffMs, s.Publishes)
	}
}

func (d *demo) agent(id string) *demoAgent {
	for _, a := range d.agents {
		if a.id == id {
			return a
		}
	}
	return nil
}

func (d *demo) setup(ctx context.Context) error {
	if d.o.transport == "nats" {
		ns, url, err := startNATS("127.0.0.1:0")
		if err != nil {
			return err
		}
		d.natsURL = url
		d.cleanups = append(d.cleanups, func() { ns.Shutdown(); ns.WaitForShutdown() })
		d.event("broker", "NATS listening on %s", url)
	} else {
		d.bus = mem.NewBus(mem.Options{Logger: d.logger})
		d.cleanups = append(d.cleanups, func() { d.bus.Close() })
	}
	t0 := time.Now()
	rt, err := wasmrt.NewRuntime(ctx, wasmrt.Config{WasmPath: d.o.wasmPath, CacheDir: d.o.cacheDir, Logger: d.logger})
	if err != nil {
		return withCode(exitConfig, err)
	}
	d.rt = rt
	d.event("runtime", "electcore.wasm loaded and compiled in %d ms", time.Since(t0).Milliseconds())
	root, err := os.MkdirTemp("", "electcore-demo-")
	if err != nil {
		return err
	}
	d.cleanups = append(d.cleanups, func() { os.RemoveAll(root) })
	for _, id := range d.members {
		a := &demoAgent{id: id, dir: root + "/" + id}
		d.agents = append(d.agents, a)
	}
	for _, a := range d.agents {
		if err := d.startAgent(ctx, a); err != nil {
			return err
		}
		d.event(a.id, "joined (priority %d)", core.Cksum([]byte(a.id)))
	}
	return nil
}

func (d *demo) startAgent(ctx context.Context, a *demoAgent) error {
	store, err := statestore.Open(a.dir, statestore.Options{Logger: d.logger})
	if err != nil {
		return err
	}
	var tr transport.Transport
	if d.bus != nil {
		tr = d.bus.Transport(a.id)
	} else {
		tr, err = nats.New(nats.Options{URL: d.natsURL, Name: "demo " + a.id, Logger: d.logger, NoEcho: true})
		if err != nil {
			store.Close()
			return err
		}
	}
	agent, err := d.rt.NewAgent(ctx, host.AgentConfig{Transport: tr, Store: store, Clock: host.NewRealClock(), Logger: d.logger,
		OnTrap: func(err error) { d.event(a.id, "wasm trap: %v", err) }})
	if err != nil {
		tr.Close()
		store.Close()
		return err
	}
	id := a.id
	quiet := &atomic.Bool{}
	a.quiet = quiet
	cfg := core.Config{ID: id, Group: "demo", Mode: core.ModeQuorum, Members: d.members,
		HeartbeatMs: d.o.heartbeat.Milliseconds(), ElectionTimeoutMs: d.o.electionTimeout.Milliseconds()}
	el, err := agent.Join(ctx, cfg, host.Callbacks{
		OnStartedLeading: func(_ context.Context, term uint64) {
			d.mu.Lock()
			if other, ok := d.leaders[term]; ok && other != id && d.safety == nil {
				d.safety = fmt.Errorf("election safety violated: %s and %s both led term %d", other, id, term)
			}
			d.leaders[term] = id
			d.mu.Unlock()
			if !quiet.Load() {
				d.event(id, "started leading term %d", term)
			}
		},
		OnStoppedLeading: func(term uint64, reason string) {
			if !quiet.Load() {
				d.event(id, "stopped leading term %d (%s)", term, reason)
			}
		},
		OnNewLeader: func(leader string, term uint64) {
			if leader != "" && leader != id && !quiet.Load() {
				d.event(id, "follows %s (term %d)", leader, term)
			}
		},
	})
	if err != nil {
		agent.Close(context.Background())
		tr.Close()
		store.Close()
		return err
	}
	a.tr, a.store, a.agent, a.el, a.up = tr, store, agent, el, true
	return nil
}

// crash kills an agent abruptly: its transport is cut first, so nothing it
// does afterwards (a resignation included) reaches the others, then its agent
// and store are closed, as after a SIGKILL.
func (d *demo) crash(a *demoAgent) {
	a.quiet.Store(true)
	a.pubs += a.tr.Stats().Published
	a.tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a.agent.Close(ctx)
	a.store.Close()
	a.up = false
}

// waitAgreement waits until every live agent (except `except`) knows the same
// leader, other than `except`, with a term of at least minTerm.
func (d *demo) waitAgreement(ctx context.Context, except string, minTerm uint64, timeout time.Duration) (string, uint64, error) {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		leader, term, agree := "", uint64(0), true
		var views []string
		for _, a := range d.agents {
			if !a.up {
				continue
			}
			st := a.el.Status()
			views = append(views, fmt.Sprintf("%s→%q@%d", a.id, st.Leader, st.Term))
			if st.Leader == "" || st.Leader == except || st.Term < minTerm {
				agree = false
				continue
			}
			if leader == "" {
				leader, term = st.Leader, st.Term
			} else if st.Leader != leader || st.Term != term {
				agree = false
			}
		}
		last = strings.Join(views, " ")
		if agree && leader != "" {
			if la := d.agent(leader); la != nil && la.up && la.el.Status().Role == core.RoleLeader {
				return leader, term, nil
			}
		}
		if time.Now().After(deadline) {
			return "", 0, fmt.Errorf("no agreed leader within %v (views: %s)", timeout, last)
		}
		select {
		case <-ctx.Done():
			return "", 0, errors.New("interrupted")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// stopAll closes every live agent gracefully, the leader last, so that each
// follower's departure is quiet and the leader's resignation is the last.
func (d *demo) stopAll() error {
	live := slices.DeleteFunc(slices.Clone(d.agents), func(a *demoAgent) bool { return !a.up })
	slices.SortStableFunc(live, func(a, b *demoAgent) int {
		la, lb := a.el.Status().Role == core.RoleLeader, b.el.Status().Role == core.RoleLeader
		switch {
		case la && !lb:
			return 1
		case lb && !la:
			return -1
		}
		return 0
	})
	var errs []error
	for _, a := range live {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.agent.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.id, err))
		}
		cancel()
		a.tr.Close()
		a.store.Close()
		a.up = false
		d.event(a.id, "left")
	}
	return errors.Join(errs...)
}

func (d *demo) cleanup() {
	for _, a := range d.agents {
		if a.up {
			a.agent.Close(context.Background())
			a.tr.Close()
			a.store.Close()
		}
	}
	if d.rt != nil {
		d.rt.Close(context.Background())
	}
	for i := len(d.cleanups) - 1; i >= 0; i-- {
		d.cleanups[i]()
	}
}
