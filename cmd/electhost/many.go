package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/electcore/electcore/cmd/electhost/internal/metrics"
	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport"
	"github.com/spf13/cobra"
)

// maxGroups bounds the groups one run joins: far above what one agent
// serves well, low enough that a wrong file (a log, a binary) is refused
// rather than joined line by line.
const maxGroups = 100_000

// readGroups gathers the groups of --group (each time given) and
// --groups-file (one per line; blank lines and # comments skipped), in that
// order, refusing bad names and repeats with where they are.
func readGroups(flags []string, file string) ([]string, error) {
	var groups []string
	where := map[string]string{}
	add := func(g, at string) error {
		if err := (core.Config{ID: "x", Group: g, Mode: core.ModeBully}).Validate(); err != nil {
			return nameInWords(err, at)
		}
		if prev, ok := where[g]; ok {
			return usageErrorf("%s: group %q is given twice (first at %s)", at, g, prev)
		}
		if len(groups) == maxGroups {
			return usageErrorf("%s: more than %d groups", at, maxGroups)
		}
		where[g] = at
		groups = append(groups, g)
		return nil
	}
	for _, g := range flags {
		if err := add(g, "--group"); err != nil {
			return nil, err
		}
	}
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return nil, usageErrorf("--groups-file: %s", userWords(err.Error()))
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if err := add(line, "--groups-file "+file+" line "+strconv.Itoa(n)); err != nil {
				return nil, err
			}
		}
		if err := sc.Err(); err != nil {
			return nil, usageErrorf("--groups-file %s: %s", file, userWords(err.Error()))
		}
		if len(groups) == len(flags) {
			return nil, usageErrorf("--groups-file %s names no group", file)
		}
	}
	if len(groups) == 0 {
		return nil, usageErrorf("--group is required (or --groups-file)")
	}
	return groups, nil
}

// refuseForMany refuses, with several groups, the flags that serve one
// group's agent only.
func (o *runOptions) refuseForMany(cmd *cobra.Command) error {
	for _, name := range []string{"once", "timeout", "join", "check", "check-http"} {
		if cmd.Flags().Changed(name) {
			return usageErrorf("--%s is for an agent of one group; with several groups (%d given) run one agent per group for it", name, len(o.groups))
		}
	}
	return nil
}

// defaultStateDirMany is the state directory of an agent of several groups
// when --state-dir is not given: $XDG_STATE_HOME/electcore/<id>, the
// directory that holds each group's own (defaultStateDir). Every group's
// state is one file in it.
func defaultStateDirMany(id string) string {
	return filepath.Dir(defaultStateDir(id, "g"))
}

// member is one group of an agent of several groups.
type member struct {
	group string
	st    *agentState
	lead  *leadership
	el    atomic.Pointer[host.Election]
	gate  *gate
}

// runMany is run with several groups: one agent (one module instance, one
// transport connection, one state directory) joins every group, and the
// leader-only command runs once for each group this agent leads, with
// ELECT_GROUP naming it. Its HTTP endpoints answer for all groups at once
// and, with ?group=G, for one.
func (o *runOptions) runMany(ctx context.Context, cmd *cobra.Command) (err error) {
	level, _ := parseLevel(o.logLevel)
	baseLogger := newLogger(cmd.ErrOrStderr(), o.jsonLogs, level)
	logger := baseLogger.With("id", o.id)

	var ln net.Listener
	if o.httpAddr != "" {
		ln, err = net.Listen("tcp", o.httpAddr)
		if err != nil {
			return configErrorf("--http %s: %v", o.httpAddr, err)
		}
		defer ln.Close()
	}
	members := make([]*member, len(o.groups))
	for i, g := range o.groups {
		glog := logger.With("group", g)
		sup, err := o.newSupervisor(glog)
		if err != nil {
			return err
		}
		m := &member{group: g, lead: newLeadership(sup, o, glog)}
		m.lead.group = g
		members[i] = m
	}

	// A group this id ran alone keeps its term and vote in a directory of
	// its own: joining it from here would forget them.
	for _, g := range o.groups {
		own := defaultStateDir(o.id, g)
		file, err := statestore.FileName(host.StateName(o.id, g))
		if own == o.stateDir || err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(own, file)); err == nil {
			if _, err := os.Stat(filepath.Join(o.stateDir, file)); err != nil {
				return configErrorf("group %s's state (term and vote) is in %s, where an agent of that group alone kept it: move %s into --state-dir %s, or run that group alone", g, own, file, o.stateDir)
			}
		}
	}
	store, err := o.openStore(baseLogger, "G")
	if err != nil {
		return err
	}
	defer store.Close()
	for _, m := range members {
		drained, err := loadDrained(store, o.id, m.group)
		if err != nil {
			return configErrorf("--state-dir %s: %s", o.stateDir, err)
		}
		m.gate = &gate{operator: drained}
	}

	tr, agent, clock, closeRest, err := o.openAgent(ctx, store, baseLogger, logger)
	if err != nil {
		return err
	}
	defer closeRest()
	agentClosed := false
	defer func() {
		if !agentClosed {
			agent.Close(context.Background())
		}
	}()

	et := time.Duration(o.cfg.ElectionTimeoutMs) * time.Millisecond
	dup := newDupGuard(et)
	selfDup := make(chan string, 1)
	var duplicates atomic.Uint64
	var mets *metrics.Metrics
	mets = metrics.NewMany(o.id, func() metrics.Snapshot { return manySnapshot(agent, members, clock, o.cfg.ElectionTimeoutMs) })
	addBrokerMetrics(mets, tr)

	dup.start(time.Now())
	// One JoinAll: one round trip to the broker for every subscription.
	specs := make([]host.JoinSpec, len(members))
	for i, m := range members {
		m.st = &agentState{dup: dup, stats: agent.Stats}
		cfg := o.cfg
		cfg.Group = m.group
		glog := logger.With("group", m.group)
		specs[i] = host.JoinSpec{Config: cfg, Drained: m.gate.operator, Callbacks: host.Callbacks{
			OnStartedLeading: func(lctx context.Context, term uint64) { m.lead.start(lctx, term) },
			OnNewLeader: func(leader string, term uint64) {
				noteLeader(m.st, m.el.Load(), clock, mets, glog, leader, term)
			},
			OnDuplicateID: func(id, reason string) {
				duplicates.Add(1)
				if id == o.id {
					dup.self(reason, selfDup, glog)
				}
			},
		}}
		m.lead.leaseEnd = leaseEnd(m.el.Load, clock)
	}
	els, errs := agent.JoinAll(ctx, specs)
	var joinErr error
	for i, m := range members {
		if errs[i] != nil {
			if joinErr == nil {
				joinErr = fmt.Errorf("join %s: %w", m.group, errs[i])
			}
			continue
		}
		m.el.Store(els[i])
		m.st.mu.Lock()
		m.st.joined, m.st.authFailure = true, els[i].AuthFailure
		m.st.mu.Unlock()
	}
	if err := joinErr; err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, transport.ErrConnectionFailed) {
			return withCode(exitTransport, errors.New(userWords(err.Error())))
		}
		if errors.Is(err, host.ErrStateUnusable) {
			return configErrorf("%s (electhost reset-state --group G --id %s --state-dir %s resets one group)", userWords(err.Error()), o.id, o.stateDir)
		}
		return configErrorf("%s", userWords(err.Error()))
	}
	var led int
	for _, m := range members {
		if m.gate.operator {
			led++
		}
	}
	if led > 0 {
		logger.Warn("drained by the operator in some groups: this agent will not lead them until electhost undrain", "groups_drained", led)
	}
	if len(o.cmdArgs) > 0 {
		c, detail := members[0].lead.sup.Containment()
		logger.Info("leader-only command, one per group led", "cmd", strings.Join(o.cmdArgs, " "), "containment", c, "detail", detail, "grace", o.grace)
	}
	logger.Info("running", "groups", len(members), "mode", o.cfg.Mode, "transport", o.tf.kind, "broker", o.tf.broker, "state_dir", o.stateDir,
		"heartbeat", o.heartbeat, "members", strings.Join(o.cfg.Members, ","), "priority", "balanced")

	var srv *http.Server
	if ln != nil {
		srv = &http.Server{Handler: newManyHandler(o.id, members, clock, et, mets, &duplicates), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		logger.Info("http listening", "addr", ln.Addr().String())
	}
	o.joined = true
	var result error
	select {
	case <-ctx.Done():
		logger.Info("signal received; stopping")
	case reason := <-selfDup:
		result = &exitError{code: exitDuplicateID, err: fmt.Errorf("another process runs with --id %s (%s); this agent, just started, did not go on: give every agent its own --id", o.id, reason)}
		logger.Error("duplicate id: another process with this id was heard for an election timeout while this agent started; stopping", "reason", reason)
	}
	// Stop every command while this agent still leads, then resign all.
	var stop sync.WaitGroup
	for _, m := range members {
		stop.Go(m.lead.shutdown)
	}
	stop.Wait()
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, m := range members {
		m.st.mu.Lock()
		m.st.closed = true
		m.st.mu.Unlock()
	}
	if err := agent.Close(cctx); err != nil {
		logger.Warn("close", "err", err)
	}
	agentClosed = true
	if srv != nil {
		srv.Shutdown(cctx)
	}
	logger.Info("stopped")
	return result
}

// manySnapshot sums the agent's groups for /metrics: counts of groups in
// each state, never a series per group.
func manySnapshot(agent *host.Agent, members []*member, clock host.Clock, etMs int64) metrics.Snapshot {
	s := agentSnapshot(agent.Stats())
	now := clock.NowMs()
	for _, m := range members {
		s.Groups++
		if m.lead.sup != nil {
			ss := m.lead.sup.Stats()
			s.CmdStarts += ss.Starts
			s.CmdKills += ss.Kills
		}
		el := m.el.Load()
		if el == nil {
			continue
		}
		cs := el.Status()
		s.Elections += cs.Elections
		if cs.Role == core.RoleLeader {
			s.GroupsLed++
		}
		if ok, _ := m.st.readiness(cs, now, etMs); ok {
			s.GroupsReady++
		}
		if m.gate.drained() {
			s.GroupsDrained++
		}
		if cs.Term >= core.MaxTerm {
			s.GroupsTermSpent++
		}
	}
	return s
}

// manyStatusJSON is GET /status of an agent of several groups: counts, and
// one short line per group (GET /status?group=G has the group's full
// status).
type manyStatusJSON struct {
	ID           string          `json:"id"`
	Groups       int             `json:"groups"`
	Led          int             `json:"led"`   // groups this agent leads
	Ready        int             `json:"ready"` // groups /readyz?group=G calls ready
	DuplicateIDs uint64          `json:"duplicate_ids"`
	List         []groupLineJSON `json:"list"`
	Dropped      uint64          `json:"dropped"` // received messages dropped unseen (all groups)
	// Superseded and thinned: heartbeats and acks not handed to the
	// cores (host.Stats.Superseded, Thinned), all groups.
	Superseded uint64 `json:"superseded"`
	Thinned    uint64 `json:"thinned"`
}

type groupLineJSON struct {
	Group          string `json:"group"`
	Role           string `json:"role"`
	Leader         string `json:"leader"`
	Term           uint64 `json:"term"`
	Priority       uint32 `json:"priority"`
	Ready          bool   `json:"ready"`
	ReadyReason    string `json:"ready_reason"`
	CommandRunning bool   `json:"command_running,omitempty"`
}

// newManyHandler serves /healthz, /readyz (every group ready; ?group=G: that
// one), /status (all groups in short; ?group=G: that one in full) and
// /metrics for an agent of several groups.
func newManyHandler(id string, members []*member, clock host.Clock, et time.Duration, mets *metrics.Metrics, duplicates *atomic.Uint64) http.Handler {
	byName := make(map[string]*member, len(members))
	for _, m := range members {
		byName[m.group] = m
	}
	// one finds ?group=G, answering 404 itself when there is no such group.
	one := func(w http.ResponseWriter, r *http.Request) (*member, core.Status, bool, bool) {
		g := r.URL.Query().Get("group")
		if g == "" {
			return nil, core.Status{}, false, false
		}
		m := byName[g]
		if m == nil {
			http.Error(w, "group "+strconv.Quote(g)+" is not one of this agent's", http.StatusNotFound)
			return nil, core.Status{}, false, true
		}
		el := m.el.Load()
		if el == nil {
			http.Error(w, "not joined", http.StatusServiceUnavailable)
			return nil, core.Status{}, false, true
		}
		return m, el.Status(), true, true
	}
	closed := func() bool {
		st := members[0].st
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.closed
	}
	readiness := func(m *member, cs core.Status) (bool, string) {
		ready, why := m.st.readiness(cs, clock.NowMs(), et.Milliseconds())
		return ready, m.gate.words(why)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if closed() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if closed() {
			http.Error(w, "not joined", http.StatusServiceUnavailable)
			return
		}
		if m, cs, ok, handled := one(w, r); handled {
			if !ok {
				return
			}
			ready, why := readiness(m, cs)
			if !ready {
				http.Error(w, m.group+": "+why, http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte("ok: " + m.group + ": " + why + "\n"))
			return
		}
		var notReady []string
		n, led := 0, 0
		for _, m := range members {
			el := m.el.Load()
			if el == nil {
				notReady = append(notReady, m.group+": not joined")
				continue
			}
			cs := el.Status()
			if ready, why := readiness(m, cs); !ready {
				notReady = append(notReady, m.group+": "+why)
				continue
			}
			n++
			if cs.Role == core.RoleLeader {
				led++
			}
		}
		if len(notReady) > 0 {
			// The first few say why; the count says how many.
			http.Error(w, strconv.Itoa(len(notReady))+" of "+strconv.Itoa(len(members))+" groups not ready: "+strings.Join(notReady[:min(len(notReady), 5)], "; "), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok: " + strconv.Itoa(n) + " groups, each with a current leader; " + strconv.Itoa(led) + " led by this agent\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if m, cs, ok, handled := one(w, r); handled {
			if !ok {
				return
			}
			w.Header().Set("Content-Type", "application/json")
			sj := toStatusJSON(cs, clock.NowMs(), m.lead)
			sj.Ready, sj.ReadyReason = readiness(m, cs)
			sj.Drained, _, _, _ = m.gate.state()
			sj.DuplicateIDs = duplicates.Load()
			enc.Encode(sj)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		s := manyStatusJSON{ID: id, Groups: len(members), DuplicateIDs: duplicates.Load(), List: make([]groupLineJSON, 0, len(members))}
		for _, m := range members {
			el := m.el.Load()
			if el == nil {
				s.List = append(s.List, groupLineJSON{Group: m.group, ReadyReason: "not joined"})
				continue
			}
			cs := el.Status()
			l := groupLineJSON{Group: m.group, Role: cs.Role.String(), Leader: cs.Leader, Term: cs.Term, Priority: cs.Priority}
			l.Ready, l.ReadyReason = readiness(m, cs)
			_, l.CommandRunning = m.lead.running()
			if l.Ready {
				s.Ready++
			}
			if cs.Role == core.RoleLeader {
				s.Led++
			}
			s.List = append(s.List, l)
		}
		if st := members[0].st; st.stats != nil {
			as := st.stats()
			s.Dropped, s.Superseded, s.Thinned = as.Dropped, as.Superseded, as.Thinned
		}
		enc.Encode(s)
	})
	mux.Handle("GET /metrics", mets.Handler())
	return http.TimeoutHandler(mux, 10*time.Second, "timeout\n")
}

// noteLeader records a new leader reported for st's group (OnNewLeader):
// the view /status and /readyz read, the leader-change metric, and the
// failover time — from the last message heard from the previous leader
// (as the core saw it) to knowing the new one — in the metrics and the log.
func noteLeader(st *agentState, el *host.Election, clock host.Clock, mets *metrics.Metrics, logger *slog.Logger, leader string, term uint64) {
	var lastHeard int64 = -1
	st.mu.Lock()
	prevLeader := st.leader
	st.mu.Unlock()
	if el != nil {
		for _, m := range el.Status().Members {
			if m.ID == prevLeader && m.LastHeard > 0 {
				lastHeard = m.LastHeard
			}
		}
	}
	now := clock.NowMs()
	st.mu.Lock()
	prev := st.leader
	st.leader, st.term = leader, max(st.term, term)
	var failover time.Duration
	measured := false
	if leader != prev && prev != "" && lastHeard > 0 {
		failover, measured = time.Duration(max(now-lastHeard, 0))*time.Millisecond, true
	}
	st.mu.Unlock()
	if leader != prev {
		mets.LeaderChanged()
		if measured {
			mets.ObserveFailover(failover)
		}
	}
	if measured {
		logger.Info("leader", "leader", leader, "term", term, "failover", failover)
	} else {
		logger.Info("leader", "leader", leader, "term", term)
	}
}
