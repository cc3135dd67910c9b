package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/electcore/electcore/cmd/electhost/internal/metrics"
	"github.com/electcore/electcore/cmd/electhost/internal/supervise"
	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/host/wasmrt"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport"
	"github.com/spf13/cobra"
)

// killSlack is what electhost budgets, on top of --grace, for SIGKILL to be
// delivered and for the host to notice the end of the lease: the lease is
// shortened by grace + killSlack so that the leader-only command is dead
// before any other member can be elected.
const killSlack = 50 * time.Millisecond

type runOptions struct {
	id, group       string
	groupFlags      []string // every --group
	groupsFile      string   // --groups-file
	groups          []string // several groups (runMany); group is "" then
	priority        uint32
	mode            string
	members         []string
	tf              transportFlags
	stateDir        string
	wasmPath        string
	cacheDir        string
	httpAddr        string
	heartbeat       time.Duration
	electionTimeout time.Duration
	lease           time.Duration
	grace           time.Duration
	jsonLogs        bool
	logLevel        string
	cmdArgs         []string
	once            bool
	onceTimeout     time.Duration
	value           string // the leader value (core.Config.Value)
	containment     string
	join            bool // wait to be added (core.Config.AwaitConfig)
	check           checkFlags
	auth            authFlags // keygen.go

	// derived
	cfg    core.Config
	joined bool // run got past joining: its result is decided there
}

func newRunCmd() *cobra.Command {
	o := &runOptions{}
	c := &cobra.Command{
		Use:   "run --group G [flags] [-- CMD ARGS...]",
		Short: "Join a group; optionally run CMD only while this agent leads",
		Long: `run joins an election group as one agent, running the electcore wasm core
through the wazero host, until SIGINT or SIGTERM; then it resigns (handing
leadership to the best live member at once) and exits 0.

With "-- CMD ARGS...", CMD runs only while this agent leads: it starts when
the agent becomes leader, with ELECT_GROUP, ELECT_TERM (the fencing token),
ELECT_LEADER, ELECT_ID and ELECT_VALUE (--value, or the last proclaim) in
its environment; it gets SIGTERM as soon as the
leadership or its lease is lost, SIGKILL --grace later; if it exits while
the agent still leads it is restarted with back-off. In quorum mode the lease
is shortened by --grace + 50ms so that CMD is dead before anyone else can be
elected. CMD runs under a supervising process that finds every process it
starts (--containment: a cgroup of its own, or as their reaper) and stops
them all at the lease's end on its own, and when electhost dies.

With --once, CMD runs once when this agent leads: when it exits, the agent
resigns and electhost exits with CMD's exit code (128+N if a signal N
killed it), like consul lock. Losing the leadership first stops CMD
(SIGTERM) and exits 1. While it waits it logs who leads and why it is not
this agent; --timeout D gives up (exit 7); SIGINT/SIGTERM before CMD ran
exits 8, while it runs with CMD's status.

With --value V (say, the address where it serves as leader), V is announced
with this agent's leadership: every follower's /status, "electhost status"
and the Go API (OnValue) show the leader's value, and "electhost proclaim
--group G --value V2" on the leader changes it without an election.

While it runs, "electhost resign --group G [--to ID]" and "electhost
transfer --group G --to ID" hand its leadership over, "electhost drain"
keeps it from leading (see their --help), --check CMD or --check-http URL
let it lead only while healthy, and in quorum mode "electhost members
add|remove|list" changes the group's members through it; --join starts an
agent outside the configuration, waiting to be added (see electhost members
--help).

Exit status:
  0  stopped by SIGINT/SIGTERM after a graceful resign (--once: CMD exited 0)
  1  an unexpected failure; --once: leadership lost while CMD ran
  2  bad flags or a config the core refuses; CMD not found
  3  state directory, module, --http address or saved state unusable
  4  the transport (NATS, pilotctl, the pilot daemon) unreachable
  5  another process was heard with this --id while this agent started
  7  --once --timeout: this agent did not lead in time; CMD never ran
  8  --once: stopped by a signal before this agent led; CMD never ran
  N  --once: CMD's own exit code
Every flag, default and exit code: cmd/electhost/README.md.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				if dash > 0 {
					return usageErrorf("unexpected argument %q before --", args[0])
				}
				o.cmdArgs = args
				if len(o.cmdArgs) == 0 {
					return usageErrorf("nothing after --: give the leader-only command")
				}
			} else if len(args) > 0 {
				return usageErrorf("unexpected argument %q (put the leader-only command after --)", args[0])
			}
			if err := o.complete(cmd); err != nil {
				return err
			}
			run := o.run
			if len(o.groups) > 1 {
				run = o.runMany
			}
			err := run(cmd.Context(), cmd)
			if err != nil && cmd.Context().Err() != nil && !o.joined {
				if o.once {
					return o.notRun()
				}
				return nil // interrupted while starting: nothing to resign, a clean stop
			}
			return err
		},
	}
	f := c.Flags()
	f.StringArrayVar(&o.groupFlags, "group", nil, "group to join (required, or --groups-file); repeat it to join several")
	f.StringVar(&o.groupsFile, "groups-file", "", "join every group named in this file, one per line (# comments and blank lines ignored), besides any --group")
	f.StringVar(&o.id, "id", "", "this agent's id (default: the host name; give one per agent when several run on a host)")
	f.Uint32Var(&o.priority, "priority", 0, "priority; higher is preferred (default: POSIX cksum of the id, as the seed skill)")
	f.StringVar(&o.mode, "mode", "quorum", "election mode: quorum (needs --members) or bully")
	f.StringSliceVar(&o.members, "members", nil, "every member's id, comma-separated, this one included (required in quorum mode)")
	o.tf.register(f)
	f.StringVar(&o.stateDir, "state-dir", "", "directory for the persisted term and vote (default $XDG_STATE_HOME/electcore/<id>/<group>, i.e. ~/.local/state/electcore/<id>/<group>)")
	f.StringVar(&o.wasmPath, "wasm", "", "a module file to load instead of the one built into electhost (default $ELECTCORE_WASM)")
	f.StringVar(&o.cacheDir, "cache-dir", "", "wazero compilation cache (default ~/.cache/electcore/wazero; - for memory only)")
	f.StringVar(&o.httpAddr, "http", "", "serve /healthz, /readyz, /status and /metrics on ADDR (e.g. 127.0.0.1:9090)")
	f.DurationVar(&o.heartbeat, "heartbeat", time.Duration(core.DefaultHeartbeatMs)*time.Millisecond, "leader heartbeat interval")
	f.DurationVar(&o.electionTimeout, "election-timeout", 0, "time without a leader before campaigning (default max(2s, 3×heartbeat))")
	f.DurationVar(&o.lease, "lease", 0, "quorum leader lease (default: the longest safe lease, minus --grace+50ms when a command is given)")
	f.DurationVar(&o.grace, "grace", 0, "SIGTERM→SIGKILL grace for the leader-only command (default election-timeout/4)")
	f.BoolVar(&o.join, "join", false, "quorum mode: start outside the configuration and wait to be added (electhost members add ID at any member); --members are the members to learn it from")
	f.StringVar(&o.containment, "containment", "auto", "how the leader-only command's processes are contained and stopped: auto (the best available), cgroup (a cgroup v2 of its own), subreaper (every orphan below its supervisor), process-group")
	f.StringVar(&o.check.cmd, "check", "", "health check: lead only while `sh -c CMD` exits 0 (Consul-style); failing, the agent hands over and does not campaign")
	f.StringVar(&o.check.url, "check-http", "", "health check: lead only while GET URL answers 2xx")
	f.DurationVar(&o.check.interval, "check-interval", 2*time.Second, "how often the health check runs")
	f.DurationVar(&o.check.timeout, "check-timeout", time.Second, "a check not done within this fails")
	f.IntVar(&o.check.failures, "check-failures", 3, "consecutive failures that make the agent unhealthy (one pass makes it healthy)")
	f.StringVar(&o.value, "value", "", "the value this agent announces while it leads (e.g. the address where it serves); followers show it, the command gets it as ELECT_VALUE; at most 1024 bytes")
	f.BoolVar(&o.once, "once", false, "run CMD once when leading, then resign and exit with its exit code (like consul lock)")
	f.DurationVar(&o.onceTimeout, "timeout", 0, "--once: give up (exit 7) if this agent does not lead within this time (0: wait for ever)")
	f.BoolVar(&o.jsonLogs, "json", false, "log JSON lines (slog JSONHandler) on stderr")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	o.auth.register(f)
	return c
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usageErrorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// defaultID is the host name restricted to the id alphabet.
func defaultID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "agent"
	}
	b := []byte(h)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:@/+-", c) >= 0) {
			b[i] = '-'
		}
	}
	if len(b) > core.MaxIDLen {
		b = b[:core.MaxIDLen]
	}
	return string(b)
}

// localAgent fills in the --id and --state-dir of the local agent that a
// command such as resign or reset-state acts on, with run's defaults
// (the host name; the state directory of that id). --group is required.
func localAgent(group, id, stateDir string) (string, string, error) {
	if group == "" {
		return "", "", usageErrorf("--group is required")
	}
	if id == "" {
		id = defaultID()
	}
	if stateDir == "" {
		stateDir = defaultStateDir(id, group)
	}
	return id, stateDir, nil
}

// defaultStateDir is an agent's state directory when --state-dir is not
// given: $XDG_STATE_HOME/electcore/<id>/<group>, one per group, so that
// agents of several groups with the default --id (the host name) run side
// by side. An agent that saved its state in <id> itself (before state was
// kept per group) goes on using it.
func defaultStateDir(id, group string) string {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		if home, err := os.UserHomeDir(); err == nil {
			base = filepath.Join(home, ".local", "state")
		} else {
			base = ".electcore-state"
		}
	}
	perID := filepath.Join(base, "electcore", pathSafe(id))
	if file, err := statestore.FileName(host.StateName(id, group)); err == nil {
		if _, err := os.Stat(filepath.Join(perID, file)); err == nil {
			return perID
		}
	}
	return filepath.Join(perID, pathSafe(group))
}

// pathSafe makes an id or group (which may hold '/') one path element.
func pathSafe(name string) string {
	if name == "." || name == ".." {
		return "_" + name
	}
	return strings.ReplaceAll(name, "/", "_")
}

// timing derives the core's timings, the lease and the grace period from the
// flags (see README.md, "Leader-only command").
type timing struct {
	heartbeatMs, electionTimeoutMs, leaseMs int64
	grace                                   time.Duration
}

func deriveTiming(mode core.Mode, hb, et, lease, grace time.Duration, withCmd bool) (timing, error) {
	if hb <= 0 {
		return timing{}, usageErrorf("--heartbeat must be positive")
	}
	if et < 0 || lease < 0 || grace < 0 {
		return timing{}, usageErrorf("durations must not be negative")
	}
	t := timing{heartbeatMs: hb.Milliseconds()}
	// The timing rules (defaults, at least 3 heartbeats per election
	// timeout, the lease and hold bounds) are core's: ask it, and say its
	// refusals in flags (configRules).
	c, err := core.Config{HeartbeatMs: t.heartbeatMs, ElectionTimeoutMs: et.Milliseconds()}.WithTimingDefaults()
	if err != nil {
		return t, inFlags(err)
	}
	t.electionTimeoutMs = c.ElectionTimeoutMs
	etd := time.Duration(t.electionTimeoutMs) * time.Millisecond
	maxLease := time.Duration(core.MaxLeaseMs(t.electionTimeoutMs, core.DefaultMaxDriftPPM)) * time.Millisecond
	t.grace = grace
	if t.grace == 0 && (lease == 0 || mode != core.ModeQuorum || !withCmd) {
		t.grace = etd / 4
	}
	if mode == core.ModeQuorum && withCmd {
		if grace == 0 && lease > 0 {
			// The lease given, the command gets what is left of it.
			t.grace = maxLease - lease - killSlack
			if t.grace <= 0 {
				return t, usageErrorf("--lease %v leaves no time to stop the leader-only command before another election (max lease %v); shorten --lease", lease, maxLease)
			}
		}
		// A hand-off waits --grace + killSlack; the default lease is what
		// the safe lease leaves after it.
		c.HandoffHoldMs = (t.grace + killSlack).Milliseconds()
	}
	c.LeaseMs = lease.Milliseconds()
	if c, err = c.WithTimingDefaults(); err != nil {
		return t, inFlags(err)
	}
	t.leaseMs = lease.Milliseconds()
	if mode == core.ModeQuorum && withCmd {
		t.leaseMs = c.LeaseMs
	}
	return t, nil
}

func (o *runOptions) complete(cmd *cobra.Command) error {
	groups, err := readGroups(o.groupFlags, o.groupsFile)
	if err != nil {
		return err
	}
	if len(groups) == 1 {
		o.group = groups[0]
	} else {
		o.groups = groups
		if err := o.refuseForMany(cmd); err != nil {
			return err
		}
	}
	if o.id == "" {
		o.id = defaultID()
	}
	mode := core.Mode(o.mode)
	if mode != core.ModeQuorum && mode != core.ModeBully {
		return usageErrorf("--mode %q: want quorum or bully", o.mode)
	}
	if o.onceTimeout < 0 {
		return usageErrorf("--timeout must not be negative")
	}
	if cmd.Flags().Changed("timeout") && !o.once {
		return usageErrorf("--timeout is how long --once waits to lead: give --once too")
	}
	if err := o.check.validate(mode == core.ModeBully); err != nil {
		return err
	}
	if len(o.cmdArgs) == 0 {
		if o.once {
			return usageErrorf("--once needs the command to run: electhost run --once ... -- CMD ARGS")
		}
		if cmd.Flags().Changed("grace") {
			return usageErrorf("--grace is the leader-only command's stop delay, but no command is given (put it after --)")
		}
		if cmd.Flags().Changed("containment") {
			return usageErrorf("--containment is the leader-only command's, but no command is given (put it after --)")
		}
	}
	if _, err := supervise.ParseContainment(o.containment); err != nil {
		return usageErrorf("--containment %q: want auto, cgroup, subreaper or process-group", o.containment)
	}
	if err := o.tf.validate(); err != nil {
		return err
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		return err
	}
	tm, err := deriveTiming(mode, o.heartbeat, o.electionTimeout, o.lease, o.grace, len(o.cmdArgs) > 0)
	if err != nil {
		return err
	}
	o.grace = tm.grace
	var members []string
	for _, m := range o.members {
		if m = strings.TrimSpace(m); m != "" {
			members = append(members, m)
		}
	}
	if o.join && mode != core.ModeQuorum {
		return usageErrorf("--join is for quorum mode: in bully mode an agent joins by running")
	}
	if o.join && len(members) == 0 && o.auth.membersFile == "" {
		return usageErrorf("--join needs --members: the group's current members, from which this agent learns the configuration")
	}
	o.cfg = core.Config{
		ID: o.id, Group: o.group, Priority: o.priority, Mode: mode, Members: members, AwaitConfig: o.join,
		HeartbeatMs: tm.heartbeatMs, ElectionTimeoutMs: tm.electionTimeoutMs, LeaseMs: tm.leaseMs,
		Value: o.value,
		// Several groups: leadership spread over the agents (RATIONALE:
		// "balanced priorities are chosen explicitly").
		BalancedPriority: len(o.groups) > 1,
	}
	if len(o.groups) > 1 {
		o.cfg.Group = o.groups[0] // Validate checks the rest: readGroups did their names
	}
	if len(o.cmdArgs) > 0 {
		// On a hand-off the command is told to stop when this agent
		// resigns, and may take --grace to exit: the successor waits that
		// long (plus killSlack) before its lease, so before its command.
		o.cfg.HandoffHoldMs = (tm.grace + killSlack).Milliseconds()
	}
	if err := o.auth.apply(&o.cfg); err != nil {
		return err
	}
	if err := o.cfg.Validate(); err != nil {
		return inFlags(err)
	}
	if o.stateDir == "" {
		if len(o.groups) > 1 {
			o.stateDir = defaultStateDirMany(o.id)
		} else {
			o.stateDir = defaultStateDir(o.id, o.group)
		}
	}
	return nil
}

// agentState is what run's HTTP endpoints and metrics read.
type agentState struct {
	mu         sync.Mutex
	joined     bool
	closed     bool
	leader     string // the last leader reported (OnNewLeader: never "")
	term       uint64
	duplicates uint64 // duplicate-id reports (this agent's id or a member's)
	inConfig   bool   // in the last committed configuration (quorum mode)
	lastDup    string // the last report's reason
	dup        *dupGuard
	stats      func() host.Stats // the agent's counters (nil in tests)
	// authFailure: the last message refused for its authentication (nil
	// before joining, and in tests).
	authFailure func() (host.AuthFailure, bool)
}

// notRun is run --once's error when it stops before this agent led.
func (o *runOptions) notRun() error {
	return &exitError{code: exitOnceNotRun, err: fmt.Errorf("--once: stopped by a signal before this agent led group %s: the command never ran", o.group)}
}

func (o *runOptions) run(ctx context.Context, cmd *cobra.Command) (err error) {
	started := time.Now()
	level, _ := parseLevel(o.logLevel)
	baseLogger := newLogger(cmd.ErrOrStderr(), o.jsonLogs, level)
	logger := baseLogger.With("group", o.group, "id", o.id)

	// Every fallible step comes before anything is logged, so that a bad
	// setup gives exactly one error line.
	var ln net.Listener
	if o.httpAddr != "" {
		ln, err = net.Listen("tcp", o.httpAddr)
		if err != nil {
			return configErrorf("--http %s: %v", o.httpAddr, err)
		}
		defer ln.Close()
	}

	sup, err := o.newSupervisor(logger)
	if err != nil {
		return err
	}
	store, err := o.openStore(baseLogger, o.group)
	if err != nil {
		return err
	}
	defer store.Close()
	drained, err := loadDrained(store, o.id, o.group)
	if err != nil {
		return configErrorf("--state-dir %s: %s", o.stateDir, err)
	}
	gt := &gate{operator: drained, checked: o.check.enabled()}

	tr, agent, clock, closeRest, err := o.openAgent(ctx, store, baseLogger, logger)
	if err != nil {
		return err
	}
	defer closeRest()
	st := &agentState{stats: agent.Stats}
	agentClosed := false
	defer func() {
		if !agentClosed {
			agent.Close(context.Background())
		}
	}()

	var mets *metrics.Metrics
	var el *host.Election
	var elp atomic.Pointer[host.Election] // el, for callbacks that may run before Join returns
	lead := newLeadership(sup, o, logger)
	lead.leaseEnd = leaseEnd(elp.Load, clock)
	// Another process with this agent's id: an agent still starting that
	// hears it for an election timeout refuses to go on (exit 5); one that
	// was running first keeps running and says so (RATIONALE: "Duplicate
	// ids").
	selfDup := make(chan string, 1)
	st.dup = newDupGuard(time.Duration(o.cfg.ElectionTimeoutMs) * time.Millisecond)

	cbs := host.Callbacks{
		OnStartedLeading: func(lctx context.Context, term uint64) {
			lead.start(lctx, term) // the host logs "started leading" and "stopped leading"
		},
		OnNewLeader: func(leader string, term uint64) {
			noteLeader(st, elp.Load(), clock, mets, logger, leader, term)
		},
		OnValue: func(leader string, term uint64, value string) {
			logger.Info("leader value", "leader", leader, "term", term, "value", value)
		},
		OnConfig: func(c host.ConfigChange) { // the host logs every change
			if !c.Committed || o.cfg.Mode != core.ModeQuorum {
				return
			}
			in := slices.Contains(c.Members, o.id)
			st.mu.Lock()
			was := st.inConfig
			st.inConfig = in
			st.mu.Unlock()
			switch {
			case in && !was:
				logger.Info("added to the configuration: this agent is a voting member now", "members", strings.Join(c.Members, ","), "conf_index", c.Index)
			case !in && was:
				logger.Warn("removed from the configuration: this agent keeps running as a non-voter; it never campaigns or leads, so the leader-only command will not run here (stop it, or add it back with electhost members add)",
					"members", strings.Join(c.Members, ","), "conf_index", c.Index)
			}
		},
		OnDuplicateID: func(id, reason string) { // the host logs the reason
			st.mu.Lock()
			st.duplicates++
			st.lastDup = reason
			st.mu.Unlock()
			if id != o.id {
				return // a member heard from two processes: the alarm is all
			}
			st.dup.self(reason, selfDup, logger)
		},
	}
	mets = metrics.New(o.group, o.id, func() metrics.Snapshot {
		s := agentSnapshot(agent.Stats())
		if e := elp.Load(); e != nil {
			cs := e.Status()
			s.Elections, s.Term = cs.Elections, cs.Term
			s.IsLeader = cs.Role == core.RoleLeader
			s.ConfIndex, s.ConfMembers, s.ConfCommitted, s.Voter = cs.ConfIndex, len(cs.Members), cs.ConfCommitted, cs.Voter
			s.Drained, s.Checked, s.Healthy, _ = gt.state()
			s.TermSpent = cs.Term >= core.MaxTerm
		}
		if sup != nil {
			ss := sup.Stats()
			s.CmdStarts, s.CmdKills = ss.Starts, ss.Kills
		}
		return s
	})

	addBrokerMetrics(mets, tr)

	// Callbacks may fire before Join returns: mets must exist first. A
	// drain the operator recorded is applied with the join itself, and so
	// is a health check's until it first passes.
	st.dup.start(time.Now())
	if gt.applied = gt.drained(); gt.applied {
		el, err = agent.JoinDrained(ctx, o.cfg, cbs)
	} else {
		el, err = agent.Join(ctx, o.cfg, cbs) // the host logs "joined election"
	}
	elp.Store(el)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, transport.ErrConnectionFailed) {
			return withCode(exitTransport, errors.New(userWords(err.Error())))
		}
		if errors.Is(err, host.ErrStateUnusable) {
			return configErrorf("%s", stateRecovery(err, o))
		}
		return configErrorf("join %s: %s", o.group, userWords(err.Error()))
	}
	cs := el.Status()
	st.mu.Lock()
	st.authFailure = el.AuthFailure
	st.joined = true
	st.inConfig = cs.Voter
	st.mu.Unlock()
	if o.cfg.Mode == core.ModeQuorum && !cs.Voter {
		why := "removed from the configuration it persisted"
		if o.join && cs.ConfIndex == 0 {
			why = "started with --join"
		}
		logger.Warn("not in the configuration ("+why+"): a non-voter that never campaigns or leads, so the leader-only command will not run here, until a member adds it (electhost members add "+o.id+" at any member)",
			"members", strings.Join(configOf(cs).Members, ","), "conf_index", cs.ConfIndex)
	}
	if sup != nil {
		c, detail := sup.Containment()
		logger.Info("leader-only command", "cmd", strings.Join(o.cmdArgs, " "), "containment", c, "detail", detail, "grace", o.grace)
	}
	if gt.operator {
		logger.Warn("drained by the operator: this agent will not lead until electhost undrain --group " + o.group + " --id " + o.id)
	}
	logger.Info("running", "mode", o.cfg.Mode, "transport", o.tf.kind, "broker", o.tf.broker, "state_dir", o.stateDir,
		"heartbeat", o.heartbeat, "members", strings.Join(o.cfg.Members, ","), "once", o.once)

	gt.el = func() *host.Election { return elp.Load() }
	if gt.checked {
		go gt.runChecks(ctx, o.check, logger)
	}
	ctl := &controller{group: o.group, id: o.id, et: time.Duration(o.cfg.ElectionTimeoutMs) * time.Millisecond,
		el: func() *host.Election { return elp.Load() }, st: st, gate: gt,
		saveDrain:  func(on bool) error { return saveDrained(store, o.id, o.group, on) },
		proclaimed: lead.setValue}
	ctlLn, token, cerr := listenControl(o.stateDir)
	ctl.token = token
	if cerr != nil {
		logger.Warn("no control socket: electhost resign cannot reach this agent", "err", cerr)
	}
	var ctlSrv *http.Server
	if ctlLn != nil {
		mux := http.NewServeMux()
		mux.Handle("POST /resign", ctl.handler(false))
		mux.Handle("POST /drain", ctl.drainHandler())
		mux.Handle("POST /proclaim", ctl.proclaimHandler(false))
		mux.Handle("GET /members", ctl.membersHandler())
		mux.Handle("POST /members", ctl.membersHandler())
		ctlSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go ctlSrv.Serve(ctlLn)
	}

	var srv *http.Server
	if ln != nil {
		h := newHTTPHandler(st, func() (core.Status, bool) { return el.Status(), true }, gt, clock, mets, lead, ctl)
		srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		logger.Info("http listening", "addr", ln.Addr().String())
	}

	var onceTimeout <-chan time.Time
	if o.once {
		if o.onceTimeout > 0 {
			t := time.NewTimer(time.Until(started.Add(o.onceTimeout)))
			defer t.Stop()
			onceTimeout = t.C
		}
		wctx, wcancel := context.WithCancel(ctx)
		defer wcancel()
		go lead.logWaiting(wctx, func() (core.Status, bool) { return el.Status(), true }, started)
	}

	o.joined = true
	var result error
wait:
	for {
		select {
		case <-ctx.Done():
			logger.Info("signal received; stopping")
			if o.once {
				// What the command did, or that it never ran, once it is stopped.
				lead.shutdown()
				if r, ran := lead.onceOutcome(); !ran {
					logger.Warn("stopped before this agent led: the command never ran")
					result = o.notRun()
				} else if r.code != 0 {
					logger.Info("command stopped by the signal", "code", r.code)
					result = quietError{code: r.code}
				}
			}
			break wait
		case <-onceTimeout:
			if !lead.giveUp() {
				onceTimeout = nil // it leads, the command runs: wait for it
				continue
			}
			why := lead.waitReason(el.Status())
			logger.Warn("--timeout: this agent did not lead in time; the command never ran", "timeout", o.onceTimeout, "why", why)
			result = &exitError{code: exitOnceTimeout, err: fmt.Errorf("--once: this agent did not lead group %s within --timeout %v (%s): the command never ran", o.group, o.onceTimeout, why)}
			break wait
		case reason := <-selfDup:
			result = &exitError{code: exitDuplicateID, err: fmt.Errorf("another process runs with --id %s in group %s (%s); this agent, just started, did not go on: give every agent its own --id",
				o.id, o.group, reason)}
			logger.Error("duplicate id: another process with this id was heard for an election timeout while this agent started; stopping", "reason", reason)
			break wait
		case r := <-lead.onceDone:
			if r.exited {
				logger.Info("command exited; resigning", "code", r.code)
				if r.code != 0 {
					result = quietError{code: r.code}
				}
			} else {
				result = fmt.Errorf("lost the leadership of %s (term %d) while the command ran: it was stopped before it finished", o.group, r.term)
			}
			break wait
		}
	}
	// 1. Stop the leader-only command (SIGTERM, SIGKILL after --grace) while
	//    we still lead, so that it is gone before anyone else can lead.
	lead.shutdown()
	// 2. Resign (hand-off) and leave.
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
	if err := agent.Close(cctx); err != nil {
		logger.Warn("close", "err", err)
	}
	agentClosed = true
	if srv != nil {
		srv.Shutdown(cctx)
	}
	if ctlSrv != nil {
		ctlSrv.Shutdown(cctx)
		os.Remove(filepath.Join(o.stateDir, controlSocketName))
	}
	os.Remove(filepath.Join(o.stateDir, controlTokenName))
	logger.Info("stopped")
	return result
}

// stateRecovery says, for a persisted state the host refuses, which file it
// is and the command that resets this member.
func stateRecovery(err error, o *runOptions) string {
	file, _ := statestore.FileName(host.StateName(o.id, o.group))
	return fmt.Sprintf("the saved election state of --id %s in group %s (%s in --state-dir %s) cannot be used: %s; restore it from a backup, or reset this member with: electhost reset-state --group %s --id %s --state-dir %s (safe once the others have moved past its term)",
		o.id, o.group, file, o.stateDir, stateProblem(err.Error()), o.group, o.id, o.stateDir)
}

// corruptWhy is what the check of a corrupt state file found ("checksum
// mismatch"), without the path and package the error carries first.
func corruptWhy(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "state corrupt: "); i >= 0 {
		return msg[i+len("state corrupt: "):]
	}
	return "it fails its checks"
}

// stateProblem is the middle of the host's message: what is wrong, without
// the Go-level advice.
func stateProblem(msg string) string {
	msg = userWords(msg)
	if i := strings.Index(msg, "persisted election state unusable: "); i >= 0 {
		msg = msg[i+len("persisted election state unusable: "):]
	}
	if i := strings.Index(msg, "; refusing to start"); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// leadership runs the leader-only command for each term this agent leads.
type leadership struct {
	sup    *supervise.Supervisor
	group  string
	id     string
	logger *slog.Logger

	// once (--once): the command runs for the first term led only, and its
	// end is reported on onceDone (and kept in outcome, stopped or not).
	once     bool
	onceDone chan onceResult
	outcome  onceResult

	// leaseEnd is when the lease of term ends (zero: no lease, bully
	// mode); its supervising process stops the command then by itself.
	leaseEnd  func(term uint64) time.Time
	heartbeat time.Duration

	mu       sync.Mutex
	value    string // this agent's leader value, for ELECT_VALUE
	stopping bool
	ran      bool
	cancel   context.CancelFunc
	done     chan struct{}
	term     uint64
}

func newLeadership(sup *supervise.Supervisor, o *runOptions, logger *slog.Logger) *leadership {
	return &leadership{sup: sup, group: o.group, id: o.id, logger: logger, once: o.once, onceDone: make(chan onceResult, 1), heartbeat: o.heartbeat, value: o.value}
}

// setValue records a proclaimed value: the command started for a later
// term gets it as ELECT_VALUE.
func (l *leadership) setValue(v string) {
	l.mu.Lock()
	l.value = v
	l.mu.Unlock()
}

// onceResult is how the --once command ended: by itself (exited, with its
// exit code) or stopped because the leadership of term ended.
type onceResult struct {
	term   uint64
	code   int
	exited bool
}

// start runs the command for term until lctx ends (loss of leadership or lease)
// or shutdown. A previous term's command is stopped first.
func (l *leadership) start(lctx context.Context, term uint64) {
	if l == nil || l.sup == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopping || (l.once && l.ran) {
		return
	}
	l.ran = true
	prevDone := l.done
	if l.cancel != nil {
		l.cancel()
	}
	ctx, cancel := context.WithCancel(lctx)
	done := make(chan struct{})
	l.cancel, l.done, l.term = cancel, done, term
	env := []string{
		"ELECT_GROUP=" + l.group,
		fmt.Sprintf("ELECT_TERM=%d", term),
		"ELECT_LEADER=" + l.id,
		"ELECT_ID=" + l.id,
		"ELECT_VALUE=" + l.value,
	}
	go func() {
		defer close(done)
		if prevDone != nil {
			<-prevDone
		}
		if l.leaseEnd != nil {
			l.sup.SetDeadline(l.leaseEnd(term))
			go l.followLease(ctx, term)
		}
		if l.once {
			code, exited, err := l.sup.RunOnce(ctx, env...)
			if err != nil {
				l.logger.Error("leader-only command", "err", err)
				code, exited = 127, true // as a shell reports a command it cannot run
			}
			r := onceResult{term: term, code: code, exited: exited}
			l.mu.Lock()
			stopping := l.stopping
			l.outcome = r
			l.mu.Unlock()
			if !stopping {
				l.onceDone <- r
			}
			return
		}
		if err := l.sup.Run(ctx, env...); err != nil {
			l.logger.Error("leader-only command", "err", err)
		}
	}()
}

// followLease passes every renewal of term's lease to the supervisor, four
// times per heartbeat (a lease is renewed once per heartbeat and has at
// least one more heartbeat to run when it is: a renewal passed late stops
// the command early, never late), until ctx ends.
func (l *leadership) followLease(ctx context.Context, term uint64) {
	t := time.NewTicker(max(l.heartbeat/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if end := l.leaseEnd(term); !end.IsZero() {
				l.sup.SetDeadline(end)
			}
		}
	}
}

// onceOutcome reports whether the --once command ran (started) and, once
// it ended, how (after shutdown it has).
func (l *leadership) onceOutcome() (onceResult, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.outcome, l.ran
}

// giveUp stops a --once agent that has not led yet from ever running its
// command, and reports whether it did (false: the command runs already).
func (l *leadership) giveUp() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ran {
		return false
	}
	l.stopping = true
	return true
}

// waitReason says, for a --once agent that waits, who leads and why it is
// not this agent.
func (l *leadership) waitReason(cs core.Status) string {
	if cs.Mode == core.ModeQuorum && !cs.Voter {
		return "this agent is not in the configuration: a non-voter never leads (electhost members add " + l.id + " at any member)"
	}
	if cs.Leader == "" || cs.Leader == l.id {
		switch cs.Role {
		case core.RoleLeader:
			return "leading term " + strconv.FormatUint(cs.Term, 10) + ", waiting for a lease (a majority's acknowledgements)"
		case core.RolePreCandidate, core.RoleCandidate:
			return "no leader known; campaigning (a leader needs a majority of the members running)"
		}
		return "no leader known yet (a leader needs a majority of the members running)"
	}
	var lp uint32
	for _, m := range cs.Members {
		if m.ID == cs.Leader {
			lp = m.Priority
		}
	}
	who := fmt.Sprintf("%s leads term %d (priority %d, this agent %d)", cs.Leader, cs.Term, lp, cs.Priority)
	switch {
	case lp >= cs.Priority:
		return who + ": it keeps the leadership while it runs; this agent leads only when " + cs.Leader + " stops, fails or hands over (electhost resign), or with a higher --priority"
	default:
		return who + ": a lower priority; it hands over to this agent once it hears it"
	}
}

// logWaiting logs, while a --once agent waits to lead, who leads and why
// it is not this agent: at once, whenever that changes, and every 10 s.
func (l *leadership) logWaiting(ctx context.Context, status func() (core.Status, bool), since time.Time) {
	t := time.NewTicker(max(l.heartbeat, 100*time.Millisecond))
	defer t.Stop()
	last, lastAt := "", time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		done := l.ran || l.stopping
		l.mu.Unlock()
		if done {
			return
		}
		cs, ok := status()
		if !ok {
			continue
		}
		why := l.waitReason(cs)
		// The reason without its figures decides whether it changed.
		key := cs.Leader + "/" + strconv.FormatUint(cs.Term, 10) + "/" + cs.Role.String()
		if key != last || time.Since(lastAt) >= onceLogEvery {
			l.logger.Info("--once: waiting to lead", "why", why, "waited", time.Since(since).Round(time.Second))
			last, lastAt = key, time.Now()
		}
	}
}

// onceLogEvery: a --once agent that waits says so at least this often.
const onceLogEvery = 10 * time.Second

// running reports the term whose command runs (0 if none).
func (l *leadership) running() (uint64, bool) {
	if l == nil || l.sup == nil {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		return 0, false
	}
	select {
	case <-l.done:
		return 0, false
	default:
		return l.term, true
	}
}

// shutdown stops the command and waits for it; no new term starts it again.
func (l *leadership) shutdown() {
	if l == nil || l.sup == nil {
		return
	}
	l.mu.Lock()
	l.stopping = true
	if l.cancel != nil {
		l.cancel()
	}
	done := l.done
	l.mu.Unlock()
	if done != nil {
		<-done
	}
}

// shimPath is the executable that supervises the leader-only command: this
// one, re-executed (main runs supervise.RunShim). On Linux /proc/self/exe
// is this very binary even if the file was replaced since it started.
func shimPath() string {
	switch runtime.GOOS {
	case "linux":
		return "/proc/self/exe"
	case "windows", "plan9", "js", "wasip1":
		return "" // no shim: the command runs directly
	}
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	return p
}

// newSupervisor is the supervisor of the leader-only command (nil without
// one).
func (o *runOptions) newSupervisor(logger *slog.Logger) (*supervise.Supervisor, error) {
	if len(o.cmdArgs) == 0 {
		return nil, nil
	}
	if _, err := exec.LookPath(o.cmdArgs[0]); err != nil {
		return nil, usageErrorf("leader-only command %q not found or not executable (give a path, or a name in PATH)", o.cmdArgs[0])
	}
	sup, err := supervise.New(supervise.Options{
		Path: o.cmdArgs[0], Args: o.cmdArgs[1:],
		Stdout: os.Stdout, Stderr: os.Stderr,
		Grace:   o.grace,
		Logger:  logger,
		Shim:    shimPath(),
		Contain: supervise.Containment(o.containment),
	})
	if err != nil {
		return nil, configErrorf("--containment %s: %s", o.containment, strings.TrimPrefix(err.Error(), "supervise: "))
	}
	return sup, nil
}

// openStore opens --state-dir, saying what to do when it cannot (group:
// the one reset-state would name; "G" with several).
func (o *runOptions) openStore(logger *slog.Logger, group string) (*statestore.Store, error) {
	store, err := statestore.Open(o.stateDir, statestore.Options{Logger: logger})
	if err == nil {
		return store, nil
	}
	if errors.Is(err, statestore.ErrLocked) {
		return nil, configErrorf("--state-dir %s is in use by another process (another agent with --id %s? give each agent its own --id or --state-dir)", o.stateDir, o.id)
	}
	if errors.Is(err, statestore.ErrCorrupt) {
		return nil, configErrorf("the state manifest %s (the list of the states ever saved in --state-dir %s) is corrupt (%s); restore it from a backup, or rebuild it from the state files present and reset this member with: electhost reset-state --group %s --id %s --state-dir %s (safe once the others have moved past its term)",
			filepath.Join(o.stateDir, statestore.ManifestName), o.stateDir, corruptWhy(err), group, o.id, o.stateDir)
	}
	return nil, configErrorf("--state-dir %s: %s", o.stateDir, userWords(err.Error()))
}

// openAgent opens the transport, then the module's runtime and the agent
// on them; closeRest closes the runtime and the transport, once the caller
// has closed the agent.
func (o *runOptions) openAgent(ctx context.Context, store host.Store, baseLogger, logger *slog.Logger) (tr transport.Transport, agent *host.Agent, clock host.Clock, closeRest func(), err error) {
	// The transport before the module: a broker that cannot be reached
	// fails before the first start logs that it compiles the module.
	tr, err = o.tf.open(ctx, "electhost "+o.id, baseLogger, o.heartbeat, false)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	rt, err := wasmrt.NewRuntime(ctx, wasmrt.Config{WasmPath: o.wasmPath, CacheDir: o.cacheDir, Logger: baseLogger})
	if err != nil {
		tr.Close()
		return nil, nil, nil, nil, configErrorf("%s", userWords(err.Error()))
	}
	clock = host.NewRealClock()
	agent, err = rt.NewAgent(ctx, host.AgentConfig{
		Transport: tr, Store: store, Clock: clock, Logger: baseLogger,
		OnTrap: func(err error) {
			logger.Error("wasm trap; the module was re-instantiated from persisted state", "err", err)
		},
	})
	if err != nil {
		rt.Close(context.Background())
		tr.Close()
		return nil, nil, nil, nil, configErrorf("%s", userWords(err.Error()))
	}
	return tr, agent, clock, func() {
		rt.Close(context.Background())
		tr.Close()
	}, nil
}

// leaseEnd is when the lease of term ends as the election el returns sees
// it (zero: none, or el not joined yet), for the supervisor's own deadline.
func leaseEnd(el func() *host.Election, clock host.Clock) func(term uint64) time.Time {
	return func(term uint64) time.Time {
		e := el()
		if e == nil {
			return time.Time{}
		}
		cs := e.Status()
		if cs.Role != core.RoleLeader || cs.Term != term || cs.LeaseUntil <= 0 {
			return time.Time{}
		}
		// The core's milliseconds are the agent clock's, truncated: a
		// millisecond earlier is never later than the lease's end.
		return time.Now().Add(time.Duration(cs.LeaseUntil-clock.NowMs()-1) * time.Millisecond)
	}
}

// agentSnapshot is the part of /metrics' snapshot that the agent's own
// counters give, for one group or many.
func agentSnapshot(as host.Stats) metrics.Snapshot {
	return metrics.Snapshot{
		MessagesIn: as.MessagesIn, MessagesOut: as.MessagesOut,
		Rejected:    as.Rejected + as.Transport.Rejected,
		PublishErrs: as.PublishErrors, Traps: as.Traps, DuplicateIDs: as.DuplicateIDs,
		Dropped: as.Dropped, DroppedFromMembers: as.DroppedFromMembers, TransportDropped: as.Transport.Dropped,
		Superseded: as.Superseded, Thinned: as.Thinned,
	}
}
