package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/nats"
	"github.com/electcore/electcore/transport/pilot"
	"github.com/spf13/pflag"
)

// DefaultNATSURL is the broker of --transport nats when --broker is not set
// (what `electhost broker` listens on by default).
const DefaultNATSURL = "nats://127.0.0.1:4222"

// defaultNATS is --broker's default for nats: $NATS_URL (as for the nats
// CLI) if set, else DefaultNATSURL.
func defaultNATS() string {
	if u := strings.TrimSpace(os.Getenv("NATS_URL")); u != "" {
		return u
	}
	return DefaultNATSURL
}

// transportFlags are the flags shared by run and status.
type transportFlags struct {
	kind     string
	broker   string
	pilotctl string
	fs       *pflag.FlagSet // to tell --broker '' from no --broker
}

func (f *transportFlags) register(fs *pflag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.kind, "transport", "nats", "pub/sub transport: nats or pilot")
	fs.StringVar(&f.broker, "broker", "", "NATS URL(s) for nats (default $NATS_URL, else "+DefaultNATSURL+"), or for pilot the pilot nodes whose brokers the group uses, comma-separated, the same on every member: best every member's own node (required)")
	fs.StringVar(&f.pilotctl, "pilotctl", "pilotctl", "pilotctl binary (name in PATH or path), for --transport pilot")
}

func (f *transportFlags) validate() error {
	switch f.kind {
	case "nats":
		if f.fs != nil && f.fs.Changed("broker") {
			return checkNATSURLs("--broker", f.broker)
		}
		if f.broker == "" {
			f.broker = defaultNATS()
			return checkNATSURLs("$NATS_URL", f.broker)
		}
	case "pilot":
		if strings.TrimSpace(f.broker) == "" {
			return usageErrorf("--transport pilot needs --broker NODE,NODE,... (best: every member's pilot node, the same list on every member)")
		}
	default:
		return usageErrorf("--transport %q: want nats or pilot", f.kind)
	}
	return nil
}

// checkNATSURLs refuses, before any connection is tried, a --broker that
// NATS could never connect to: empty, or a URL that is not a NATS server's
// (nats://, tls://, ws:// or wss://, a host, an optional port 1-65535, no
// path); a bare HOST:PORT is nats://HOST:PORT, as for the NATS client.
func checkNATSURLs(what, list string) error {
	want := "want nats://HOST:PORT (or tls://, ws://, wss://; several comma-separated), or no --broker for $NATS_URL or " + DefaultNATSURL
	var n int
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		n++
		raw := s
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		if err != nil {
			return usageErrorf("%s %q: %s", what, raw, want)
		}
		bad := u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != ""
		if !bad {
			switch u.Scheme {
			case "nats", "tls", "ws", "wss":
			default:
				bad = true
			}
		}
		if p := u.Port(); !bad && p != "" {
			if port, err := strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
				bad = true
			}
		}
		if bad {
			return usageErrorf("%s %q: %s", what, raw, want)
		}
	}
	if n == 0 {
		return usageErrorf("%s %q: no URL given; %s", what, list, want)
	}
	return nil
}

// open connects the transport and checks that its broker answers. Errors
// carry exitTransport (or exitUsage for malformed broker lists). heartbeat
// scales pilot's stall detection; listenOnly (electhost status, which
// never publishes) subscribes on every pilot broker, its own node's
// included, so as to hear every member.
func (f *transportFlags) open(ctx context.Context, name string, logger *slog.Logger, heartbeat time.Duration, listenOnly bool) (transport.Transport, error) {
	switch f.kind {
	case "nats":
		t, err := nats.New(nats.Options{
			URL:            f.broker,
			Name:           name,
			ConnectTimeout: 3 * time.Second,
			Logger:         logger,
			NoEcho:         true, // one agent, or a listener, per connection
		})
		if err != nil {
			return nil, withCode(exitTransport, err)
		}
		return t, nil
	case "pilot":
		return f.openPilot(ctx, logger, heartbeat, listenOnly)
	}
	return nil, usageErrorf("--transport %q: want nats or pilot", f.kind)
}

// pilotStallAfter is how long a pilot subscription may deliver nothing
// while others deliver before it is restarted: four heartbeats (every live
// group sends at least one message per heartbeat), and at least 1 s, above
// a restarted subscription's 80-220 ms without a ready signal plus a
// heartbeat, so that restarts never chase each other.
func pilotStallAfter(heartbeat time.Duration) time.Duration {
	return max(4*heartbeat, time.Second)
}

// pilotCutOffAfter is how long every publish to a broker must have failed
// before the transport asks the registry whether its node is registered
// (and, if so, says it is cut off, with the likely cause and the fix): ten
// heartbeats, and at least 5 s, past a publish deadline and two back-offs.
func pilotCutOffAfter(heartbeat time.Duration) time.Duration {
	return max(10*heartbeat, 5*time.Second)
}

// openPilot asks the local daemon which node this is (which also checks
// that it runs), lays the brokers out around it (pilot.Layout:
// never publish to our own node) and starts the transport.
func (f *transportFlags) openPilot(ctx context.Context, logger *slog.Logger, heartbeat time.Duration, listenOnly bool) (transport.Transport, error) {
	var brokers []string
	for _, h := range strings.Split(f.broker, ",") {
		if h = strings.TrimSpace(h); h != "" {
			brokers = append(brokers, h)
		}
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	self, err := pilot.LocalNode(ictx, pilot.Options{Binary: f.pilotctl})
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, withCode(exitTransport, fmt.Errorf("pilotctl not found (%q): install Pilot Protocol's pilotctl or pass --pilotctl PATH", f.pilotctl))
		}
		return nil, withCode(exitTransport, fmt.Errorf("pilot daemon unreachable: %v", err))
	}
	publish, subscribe, loopback, err := pilot.Layout(self, brokers)
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("--broker: %v", err))
	}
	// With our own node as the only subscribed broker, two subscriptions:
	// pilot resets connections one at a time, and the twin carries the
	// stream while the other restarts (80-220 ms with no ready signal).
	perHost := 1
	if loopback {
		perHost = 2
	}
	if listenOnly {
		subscribe, loopback, perHost = brokers, false, 1
	}
	t, err := pilot.New(pilot.Options{
		Binary:               f.pilotctl,
		Hosts:                publish,
		SubscribeHosts:       subscribe,
		Loopback:             loopback,
		SubscriptionsPerHost: perHost,
		StallAfter:           pilotStallAfter(heartbeat),
		CutOffAfter:          pilotCutOffAfter(heartbeat),
		Logger:               logger,
	})
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, withCode(exitTransport, fmt.Errorf("pilotctl not found (%q): install Pilot Protocol's pilotctl or pass --pilotctl PATH", f.pilotctl))
		}
		if errors.Is(err, transport.ErrInvalidArgument) {
			return nil, withCode(exitUsage, fmt.Errorf("--broker: %v", err))
		}
		return nil, withCode(exitTransport, err)
	}
	layout := "dedicated broker nodes: publish to and subscribe on each"
	if loopback {
		layout = "members' nodes: subscribe on our own, publish to the others"
	}
	logger.Info("pilot brokers", "node", self.Address, "layout", layout,
		"publish", strings.Join(publish, ","), "subscribe", strings.Join(subscribe, ","))
	if len(publish) == 1 {
		logger.Warn("one pilot broker to publish to: a single point of failure; list every member's node (or three dedicated broker nodes) in --broker, see docs/pilotctl.md", "broker", publish[0])
	}
	return t, nil
}
