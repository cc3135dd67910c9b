// Command go-embed is the smallest useful program on electcore's Go API
// (package host): it joins an election group, prints every leadership change,
// and does its "work" only while it leads, tagging each action with the term
// (the fencing token).
//
//	go run ./examples/go-embed --transport nats --broker nats://127.0.0.1:4222 \
//	    --group jobs --id a --members a,b,c
//	go run ./examples/go-embed --transport mem --agents 3     # 3 agents in one process
//
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/host/wasmrt"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/mem"
	"github.com/electcore/electcore/transport/nats"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // --help: the usage is printed, a success
		}
		fmt.Fprintln(os.Stderr, "go-embed:", err)
		os.Exit(1)
	}
}

type options struct {
	transport, broker, group, id, members, stateDir, wasm string
	agents                                                int
	heartbeat, electionTimeout, duration                  time.Duration
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	var o options
	fs := flag.NewFlagSet("go-embed", flag.ContinueOnError)
	fs.StringVar(&o.transport, "transport", "nats", "nats or mem")
	fs.StringVar(&o.broker, "broker", "nats://127.0.0.1:4222", "NATS URL")
	fs.StringVar(&o.group, "group", "embed-demo", "election group")
	fs.StringVar(&o.id, "id", "", "this agent's id (nats)")
	fs.StringVar(&o.members, "members", "", "every member's id, comma-separated (nats)")
	fs.IntVar(&o.agents, "agents", 3, "agents to run in this process (mem)")
	fs.StringVar(&o.stateDir, "state-dir", "", "where to persist term and vote (default: memory only)")
	fs.StringVar(&o.wasm, "wasm", "", "a module file instead of the one built into the program (default $ELECTCORE_WASM)")
	fs.DurationVar(&o.heartbeat, "heartbeat", 100*time.Millisecond, "leader heartbeat interval")
	fs.DurationVar(&o.electionTimeout, "election-timeout", 600*time.Millisecond, "election timeout")
	fs.DurationVar(&o.duration, "duration", 0, "stop after this long (default: on SIGINT/SIGTERM)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// 1. One Runtime per process: loads and compiles electcore.wasm.
	rt, err := wasmrt.NewRuntime(ctx, wasmrt.Config{WasmPath: o.wasm, Logger: quiet})
	if err != nil {
		return err
	}
	defer rt.Close(context.Background())

	out := &lines{w: stdout}
	switch o.transport {
	case "nats":
		if o.id == "" || o.members == "" {
			return fmt.Errorf("--id and --members are required with --transport nats")
		}
		tr, err := nats.New(nats.Options{URL: o.broker, Name: "go-embed " + o.id, Logger: quiet})
		if err != nil {
			return err
		}
		defer tr.Close()
		return agent(ctx, rt, tr, o, o.id, strings.Split(o.members, ","), out)
	case "mem":
		bus := mem.NewBus(mem.Options{Logger: quiet})
		defer bus.Close()
		ids := make([]string, o.agents)
		for i := range ids {
			ids[i] = fmt.Sprintf("a%d", i+1)
		}
		var wg sync.WaitGroup
		errs := make(chan error, len(ids))
		for _, id := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- agent(ctx, rt, bus.Transport(id), o, id, ids, out)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("--transport %q: want nats or mem", o.transport)
}

// agent runs one member until ctx ends, then resigns and leaves.
func agent(ctx context.Context, rt *wasmrt.Runtime, tr transport.Transport, o options, id string, members []string, out *lines) error {
	var store *statestore.Store
	if o.stateDir != "" {
		var err error
		if store, err = statestore.Open(o.stateDir + "/" + id); err != nil {
			return err
		}
		defer store.Close()
	}
	// 2. An Agent: one module instance, any number of groups, over a transport.
	ag, err := rt.NewAgent(ctx, host.AgentConfig{Transport: tr, Store: store})
	if err != nil {
		return err
	}
	defer ag.Close(context.Background()) // resigns what it leads, then leaves

	// 3. Join a group with callbacks.
	_, err = ag.Join(ctx, core.Config{
		ID: id, Group: o.group, Members: members,
		HeartbeatMs: o.heartbeat.Milliseconds(), ElectionTimeoutMs: o.electionTimeout.Milliseconds(),
	}, host.Callbacks{
		OnNewLeader: func(leader string, term uint64) {
			out.printf("%s: leader %s (term %d)", id, leader, term)
		},
		// Runs in its own goroutine while this agent leads (in quorum mode:
		// while it holds a lease); ctx ends the moment that stops.
		OnStartedLeading: func(ctx context.Context, term uint64) {
			out.printf("%s: leading term %d", id, term)
			work(ctx, id, term, o.heartbeat, out)
		},
		OnStoppedLeading: func(term uint64, reason string) {
			out.printf("%s: stopped leading term %d (%s)", id, term, reason)
		},
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// work is the leader-only job: each action carries the term, so a resource
// that has already seen a higher term can refuse a deposed leader.
func work(ctx context.Context, id string, term uint64, every time.Duration, out *lines) {
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			out.printf("%s: work #%d under term %d", id, n, term)
		}
	}
}

// lines serialises output lines from several goroutines.
type lines struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lines) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
}
