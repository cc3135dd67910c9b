package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport"
)

// groupName is the name of benchmark group i (0-based).
func groupName(i int) string { return fmt.Sprintf("bench-%05d", i) }

// runAgent is one agent process: it joins every group over NATS and reports
// on stdout, each line stamped with the wall clock in ms (all processes run
// on one machine, so the stamps compare):
//
//	ready <ms>                      every group joined
//	L <ms> <group> <leader> <term>  OnNewLeader
//	C <ms> <in> <out> <dropped>     the agent's message counters, every second
//
// It runs until its stdin is closed (or it is killed).
func runAgent(args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	broker := fs.String("broker", "", "NATS URL")
	id := fs.String("id", "", "agent id")
	members := fs.String("members", "", "comma-separated member ids")
	groups := fs.Int("groups", 1, "groups to join")
	native := fs.Bool("native", false, "run the native core (host.NewNativeAgent) instead of the wasm module")
	stateDir := fs.String("state-dir", "", "persist state here (default: in memory)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	tr, err := transport.NewNATSTransport(transport.NATSOptions{URL: *broker, Name: *id})
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
	var ag *host.Agent
	if *native {
		ag, err = host.NewNativeAgent(ctx, cfg)
	} else {
		var rt *host.Runtime
		if rt, err = host.NewRuntime(ctx, host.RuntimeConfig{}); err == nil {
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
	// Joins run concurrently: the agent steps the joins waiting together in
	// one batch.
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for i := range *groups {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			name := groupName(i)
			_, err := ag.Join(ctx, core.Config{ID: *id, Group: name, Members: ids}, host.Callbacks{
				OnNewLeader: func(leader string, term uint64) {
					line(fmt.Sprintf("L %d %d %s %d", now(), i, leader, term))
				},
			})
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	line(fmt.Sprintf("ready %d", now()))

	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	flush := time.NewTicker(100 * time.Millisecond)
	defer flush.Stop()
	for {
		select {
		case <-done:
			mu.Lock()
			w.Flush()
			mu.Unlock()
			return nil
		case <-tick.C:
			st := ag.Stats()
			line(fmt.Sprintf("C %d %d %d %d", now(), st.MessagesIn, st.MessagesOut, st.Dropped))
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
