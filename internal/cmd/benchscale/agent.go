package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/host/wasmrt"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport/nats"
)

// groupName is the name of benchmark group i (0-based).
func groupName(i int) string { return fmt.Sprintf("bench-%05d", i) }

// runAgent is one agent process: it joins every group over NATS and reports
// on stdout, each line stamped with the wall clock in ms (all processes run
// on one machine, so the stamps compare):
//
//	ready <ms>                      every group joined
//	L <ms> <group> <leader> <term>  OnNewLeader
//	U <ms> <group>                  the group's leader is no longer known (a
//	                                probe of every group's Election.Leader, every 250 ms)
//	C <ms> <in> <out> <dropped>     the agent's message counters, every second
//	E <ms> <campaigns>              campaigns its groups started so far (on
//	                                "quiet" and "probe" from stdin)
//
// It runs until its stdin is closed (or it is killed), without handing
// leadership off.
func runAgent(args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	broker := fs.String("broker", "", "NATS URL")
	id := fs.String("id", "", "agent id")
	members := fs.String("members", "", "comma-separated member ids")
	groups := fs.Int("groups", 1, "groups to join")
	native := fs.Bool("native", false, "run the native core (host.NewNativeAgent) instead of the wasm module")
	stateDir := fs.String("state-dir", "", "persist state here (default: in memory)")
	balanced := fs.Bool("balanced", false, "join with core.Config.BalancedPriority (the multi-group default priority)")
	verbose := fs.Bool("v", false, "every 5 s, write the agent's counters and its groups' roles to stderr, and its warnings and errors as they come")
	callTimeout := fs.Duration("call-timeout", 0, "wasm: the deadline of one call into the module (0: the library's, 1 s)")
	memoryPages := fs.Uint("memory-pages", 0, "wasm: the least bound of the module's linear memory in 64 KiB pages; with more groups it is 16 MiB + 16 KiB a group (0: the library's, 1024)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the steady window (between quiet and probe) to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	tr, err := nats.New(nats.Options{URL: *broker, Name: *id, NoEcho: true}) // one agent per connection
	if err != nil {
		return err
	}
	var store *statestore.Store
	if *stateDir != "" {
		if store, err = statestore.Open(*stateDir); err != nil {
			return err
		}
	}
	cfg := host.AgentConfig{Transport: tr, Store: store}
	var logger *slog.Logger
	if *verbose { // warnings and errors (a trap's cause among them)
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		cfg.Logger = logger
	}
	var ag *host.Agent
	if *native {
		ag, err = host.NewNativeAgent(ctx, cfg)
	} else {
		var rt *wasmrt.Runtime
		if rt, err = wasmrt.NewRuntime(ctx, wasmrt.Config{CallTimeout: *callTimeout, MemoryLimitPages: uint32(*memoryPages), Logger: logger}); err == nil {
			ag, err = rt.NewAgent(ctx, cfg)
		}
	}
	if err != nil {
		return err
	}

	var mu sync.Mutex
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	line := func(s string) {
		mu.Lock()
		w.WriteString(s)
		w.WriteByte('\n')
		mu.Unlock()
	}
	now := func() int64 { return time.Now().UnixMilli() }

	ids := strings.Split(*members, ",")
	// view[i] is the leader of group i as last written to stdout ("" once a
	// probe found it lost). OnNewLeader never reports a loss, so the probe
	// polls Election.Leader (no call into the core) for that.
	var viewMu sync.Mutex
	view := make([]string, *groups)
	// One JoinAll: one round trip to the broker for every subscription.
	specs := make([]host.JoinSpec, *groups)
	for i := range specs {
		specs[i] = host.JoinSpec{
			Config: core.Config{ID: *id, Group: groupName(i), Members: ids, BalancedPriority: *balanced},
			Callbacks: host.Callbacks{
				OnNewLeader: func(leader string, term uint64) {
					viewMu.Lock()
					view[i] = leader
					line(fmt.Sprintf("L %d %d %s %d", now(), i, leader, term))
					viewMu.Unlock()
				},
			},
		}
	}
	els, errs := ag.JoinAll(ctx, specs)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	line(fmt.Sprintf("ready %d", now()))

	// stdin: "quiet" stops the probe (while CPU is measured), "probe"
	// restarts it; its end stops the agent.
	var probing atomic.Bool
	probing.Store(true)
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		profiling := false
		// A wasm instance re-created after a trap counts its campaigns
		// from 0 again: total adds each group's increase since the last
		// report, and after a drop its whole count.
		last := make([]uint64, len(els))
		var total uint64
		for sc.Scan() {
			for i, el := range els {
				n := el.Status().Elections
				if n >= last[i] {
					total += n - last[i]
				} else {
					total += n
				}
				last[i] = n
			}
			line(fmt.Sprintf("E %d %d", now(), total))
			quiet := sc.Text() == "quiet"
			probing.Store(!quiet)
			if *cpuProfile != "" && quiet != profiling {
				profiling = quiet
				if quiet {
					profile(*cpuProfile)
				} else {
					pprof.StopCPUProfile()
				}
			}
		}
		close(done)
	}()
	probe := func() {
		for i, el := range els {
			viewMu.Lock()
			before := view[i]
			viewMu.Unlock()
			if id, _ := el.Leader(); before == "" || id != "" {
				continue
			}
			viewMu.Lock()
			if view[i] == before { // no new leader reported meanwhile
				view[i] = ""
				line(fmt.Sprintf("U %d %d", now(), i))
			}
			viewMu.Unlock()
		}
	}
	ticks := 0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	flush := time.NewTicker(100 * time.Millisecond)
	defer flush.Stop()
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-done:
			mu.Lock()
			w.Flush()
			mu.Unlock()
			return nil
		case <-poll.C:
			if probing.Load() {
				probe()
			}
		case <-tick.C:
			st := ag.Stats()
			line(fmt.Sprintf("C %d %d %d %d %d", now(), st.MessagesIn, st.MessagesOut, st.Dropped, st.Steps))
			if ticks++; *verbose && ticks%5 == 0 {
				describe(*id, st, els)
			}
		case <-flush.C:
			mu.Lock()
			err := w.Flush()
			mu.Unlock()
			if err != nil {
				return nil // the benchmark is gone
			}
		}
	}
}

// profile starts a CPU profile into path (stopped by pprof.StopCPUProfile;
// the file stays open until the process ends, which flushes nothing more).
func profile(path string) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cpuprofile:", err)
	}
}

// describe writes the agent's counters and how many of its groups are in
// each role with each known leader, and three leaderless groups in detail:
// what to look at when groups do not settle.
func describe(id string, st host.Stats, els []*host.Election) {
	roles := map[string]int{}
	var stuck []string
	for _, el := range els {
		s := el.Status()
		roles[s.Role.String()+"/"+s.Leader]++
		if s.Leader == "" && len(stuck) < 3 {
			stuck = append(stuck, fmt.Sprintf("%s term %d vote %q campaigns %d received %d rejected %d",
				s.Group, s.Term, s.Vote, s.Elections, s.Received, s.Rejected))
		}
	}
	fmt.Fprintf(os.Stderr, "%s: %+v\n%s: role/leader: %v; leaderless: %s\n", id, st, id, roles, strings.Join(stuck, "; "))
}
