// Command runner is a skill runner's view of electcore: it loads the
// host-driven build of the module (-tags electcore_hostdriven) directly on
// wazero and grants it only five functions — now, publish, persist, event,
// log — and nothing else: no files, no network, no environment, a bounded
// memory and a deadline on every call. The runner owns the transport and the
// disk; the module only decides. It prints one JSON line per event.
//
//	go run ./wasm/build -hd -o electcore-hd.wasm
//	go run ./examples/skill/runner --wasm electcore-hd.wasm --transport mem --agents 3 --duration 5s
//	go run ./examples/skill/runner --wasm electcore-hd.wasm --transport nats \
//	    --broker nats://127.0.0.1:4222 --group jobs --id a --members a,b,c --state-dir /tmp/a
//
// See ../README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/electcore/electcore/core"
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
		fmt.Fprintln(os.Stderr, "runner:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags()
	if err := fs.parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	wasm, err := os.ReadFile(fs.wasm)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "runner: compiling %s (%.1f MB; about 1-2 s)\n", fs.wasm, float64(len(wasm))/1e6)
	mod, err := Load(ctx, wasm)
	if err != nil {
		return fmt.Errorf("%s: %w", fs.wasm, err)
	}
	defer mod.Close(context.Background())
	if fs.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, fs.duration)
		defer cancel()
	}

	var mu sync.Mutex
	enc := json.NewEncoder(stdout)
	print := func(id string) func(Event) {
		return func(ev Event) {
			if ev.Kind == core.EventLease.String() && !fs.leaseEvents {
				return // one per heartbeat while leading: noise unless asked for
			}
			mu.Lock()
			defer mu.Unlock()
			enc.Encode(struct {
				ID string `json:"id"`
				Event
			}{id, ev})
		}
	}
	start := func(id string, members []string, tr transport.Transport) (*Runner, error) {
		var store Store = statestore.NewMem()
		if fs.stateDir != "" {
			s, err := statestore.Open(fs.stateDir + "/" + id)
			if err != nil {
				return nil, err
			}
			go func() { <-ctx.Done(); time.Sleep(time.Second); s.Close() }()
			store = s
		}
		cfg := core.Config{ID: id, Group: fs.group, Members: members, Priority: uint32(fs.priority),
			HeartbeatMs: fs.heartbeat.Milliseconds(), ElectionTimeoutMs: fs.electionTimeout.Milliseconds()}
		return mod.Start(ctx, cfg, Options{Transport: tr, Store: store, OnEvent: print(id)})
	}

	var runners []*Runner
	switch fs.transport {
	case "nats":
		if fs.id == "" || fs.members == "" {
			return fmt.Errorf("--id and --members are required with --transport nats")
		}
		tr, err := nats.New(nats.Options{URL: fs.broker, Name: "skill-runner " + fs.id})
		if err != nil {
			return err
		}
		defer tr.Close()
		r, err := start(fs.id, strings.Split(fs.members, ","), tr)
		if err != nil {
			return err
		}
		runners = append(runners, r)
	case "mem":
		bus := mem.NewBus(mem.Options{})
		defer bus.Close()
		ids := make([]string, fs.agents)
		for i := range ids {
			ids[i] = fmt.Sprintf("r%d", i+1)
		}
		for _, id := range ids {
			r, err := start(id, ids, bus.Transport(id))
			if err != nil {
				return err
			}
			runners = append(runners, r)
		}
	default:
		return fmt.Errorf("--transport %q: want nats or mem", fs.transport)
	}
	for _, r := range runners {
		<-r.Done()
	}
	return nil
}
