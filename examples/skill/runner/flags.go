package main

import (
	"flag"
	"os"
	"time"
)

type flags struct {
	*flag.FlagSet
	wasm, transport, broker, group, id, members, stateDir string
	priority                                              uint
	agents                                                int
	heartbeat, electionTimeout, duration                  time.Duration
	leaseEvents                                           bool
}

func newFlags() *flags {
	f := &flags{FlagSet: flag.NewFlagSet("runner", flag.ContinueOnError)}
	f.StringVar(&f.wasm, "wasm", os.Getenv("ELECTCORE_HD_WASM"), "the host-driven module (default $ELECTCORE_HD_WASM)")
	f.StringVar(&f.transport, "transport", "mem", "mem (in-process agents) or nats")
	f.StringVar(&f.broker, "broker", "nats://127.0.0.1:4222", "NATS URL")
	f.StringVar(&f.group, "group", "jobs", "election group")
	f.StringVar(&f.id, "id", "", "this agent's id (nats)")
	f.StringVar(&f.members, "members", "", "every member's id, comma-separated (nats)")
	f.UintVar(&f.priority, "priority", 0, "priority (default: cksum of the id)")
	f.IntVar(&f.agents, "agents", 3, "agents in this process (mem)")
	f.StringVar(&f.stateDir, "state-dir", "", "persist term and vote here (default: memory)")
	f.DurationVar(&f.heartbeat, "heartbeat", 100*time.Millisecond, "heartbeat interval")
	f.DurationVar(&f.electionTimeout, "election-timeout", 600*time.Millisecond, "election timeout")
	f.DurationVar(&f.duration, "duration", 0, "stop after this long (default: on SIGINT/SIGTERM)")
	f.BoolVar(&f.leaseEvents, "lease-events", false, "also print lease events (one per heartbeat while leading)")
	return f
}

func (f *flags) parse(args []string) error { return f.Parse(args) }
