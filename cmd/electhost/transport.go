package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"time"

	"github.com/electcore/electcore/hostfuncs"
	"github.com/spf13/pflag"
)

// DefaultNATSURL is the broker of --transport nats when --broker is not set
// (what `electhost broker` listens on by default).
const DefaultNATSURL = "nats://127.0.0.1:4222"

// transportFlags are the flags shared by run and status.
type transportFlags struct {
	kind     string
	broker   string
	pilotctl string
}

func (f *transportFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.kind, "transport", "nats", "pub/sub transport: nats or pilot")
	fs.StringVar(&f.broker, "broker", "", "NATS URL(s) for nats (default "+DefaultNATSURL+"), or pilot broker host(s), comma-separated, for pilot (required)")
	fs.StringVar(&f.pilotctl, "pilotctl", "pilotctl", "pilotctl binary (name in PATH or path), for --transport pilot")
}

func (f *transportFlags) validate() error {
	switch f.kind {
	case "nats":
		if f.broker == "" {
			f.broker = DefaultNATSURL
		}
	case "pilot":
		if strings.TrimSpace(f.broker) == "" {
			return usageErrorf("--transport pilot needs --broker HOST[,HOST...] (the pilot node(s) whose event broker the group uses)")
		}
	default:
		return usageErrorf("--transport %q: want nats or pilot", f.kind)
	}
	return nil
}

// open connects the transport and checks that its broker answers. Errors
// carry exitTransport (or exitUsage for malformed broker lists).
func (f *transportFlags) open(ctx context.Context, name string, logger *slog.Logger) (hostfuncs.Transport, error) {
	switch f.kind {
	case "nats":
		t, err := hostfuncs.NewNATSTransport(hostfuncs.NATSOptions{
			URL:            f.broker,
			Name:           name,
			ConnectTimeout: 3 * time.Second,
			Logger:         logger,
		})
		if err != nil {
			return nil, withCode(exitTransport, err)
		}
		return t, nil
	case "pilot":
		var hosts []string
		for _, h := range strings.Split(f.broker, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hosts = append(hosts, h)
			}
		}
		t, err := hostfuncs.NewPilotTransport(hostfuncs.PilotOptions{
			Binary: f.pilotctl,
			Hosts:  hosts,
			Logger: logger,
		})
		if err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return nil, withCode(exitTransport, fmt.Errorf("pilotctl not found (%q): install Pilot Protocol's pilotctl or pass --pilotctl PATH", f.pilotctl))
			}
			if errors.Is(err, hostfuncs.ErrInvalidArgument) {
				return nil, withCode(exitUsage, err)
			}
			return nil, withCode(exitTransport, err)
		}
		// pilotctl is there; is its daemon?
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := t.Info(ictx); err != nil {
			t.Close()
			return nil, withCode(exitTransport, fmt.Errorf("pilot daemon unreachable: %v", err))
		}
		return t, nil
	}
	return nil, usageErrorf("--transport %q: want nats or pilot", f.kind)
}
