package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/transport"
	"github.com/spf13/cobra"
)

func newStatusCmd() *cobra.Command {
	var (
		tf        transportFlags
		group     string
		heartbeat time.Duration
		wait      time.Duration
		jsonOut   bool
		watch     bool
		members   []string
	)
	c := &cobra.Command{
		Use:   "status --group G [--transport nats|pilot --broker ...]",
		Short: "Listen to a group for about two heartbeats; print its leader, term and members heard",
		Long: `status subscribes to the group's topic (election:<group>) for --wait (default
two heartbeat intervals plus 300 ms for the subscription to go live), then
prints the leader with the highest term heard, and every member heard with
its priority, message count and when it was last heard. It does not join the
group and publishes nothing.

With --watch it keeps listening (until SIGINT/SIGTERM, or for --wait if
given) and prints one line per change of leader or term as it is heard, and
"no leader" when the leader has been silent for 4 heartbeats; with --json
each change is one JSON object per line (NDJSON).

Agents in 16 groups or more send their heartbeats, acks and election
traffic in envelopes on the topic of the groups' member set, not on the
group's: with --members
(the group's members, as the agents were given them) status reads that
topic too.

Exit status: 0 if a leader was heard (--watch: always, on a signal or at the
end of --wait), 1 if none was (the status is printed anyway), 2 for bad
flags, 4 if the transport is unreachable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if group == "" {
				return usageErrorf("--group is required")
			}
			if err := (core.Config{ID: "status", Group: group, Mode: core.ModeBully}).Validate(); err != nil {
				return nameInWords(err, "--group")
			}
			if err := tf.validate(); err != nil {
				return err
			}
			if heartbeat <= 0 {
				return usageErrorf("--heartbeat must be positive")
			}
			if wait < 0 {
				return usageErrorf("--wait must not be negative")
			}
			if !cmd.Flags().Changed("wait") && !watch {
				wait = 2*heartbeat + 300*time.Millisecond
			}
			logger := newLogger(cmd.ErrOrStderr(), false, slog.LevelError)
			ctx := cmd.Context()
			t, err := tf.open(ctx, "electhost status", logger, heartbeat, true)
			if err != nil {
				return err
			}
			defer t.Close()
			obs := newObserver(group)
			var w *watcher
			if watch {
				w = &watcher{out: cmd.OutOrStdout(), json: jsonOut, group: group, lostAfter: 4 * heartbeat}
				obs.onLeader = w.leader
			}
			if err := t.Subscribe(ctx, core.Topic(group), obs.deliver); err != nil {
				return withCode(exitTransport, fmt.Errorf("subscribe %s: %v", core.Topic(group), err))
			}
			if len(members) > 0 {
				peers := host.PeersTopic(members)
				err := t.Subscribe(ctx, peers, func(m transport.Message) {
					payloads, err := host.EnvelopeFor(m.Payload, group)
					if err != nil {
						obs.reject()
						return
					}
					for _, p := range payloads {
						obs.deliver(transport.Message{Topic: core.Topic(group), Payload: p})
					}
				})
				if err != nil {
					return withCode(exitTransport, fmt.Errorf("subscribe %s: %v", peers, err))
				}
			}
			if watch {
				var end <-chan time.Time
				if cmd.Flags().Changed("wait") {
					end = time.After(wait)
				}
				tick := time.NewTicker(heartbeat)
				defer tick.Stop()
				for {
					select {
					case <-tick.C:
						obs.checkLost(w.lostAfter)
						continue
					case <-end:
					case <-ctx.Done():
					}
					return nil
				}
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
			rep := obs.report(wait)
			if jsonOut {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				enc.Encode(rep)
			} else {
				rep.print(cmd.OutOrStdout())
			}
			if rep.Leader == "" {
				return fmt.Errorf("no leader heard on %s within %v", core.Topic(group), wait)
			}
			return nil
		},
	}
	tf.register(c.Flags())
	c.Flags().StringVar(&group, "group", "", "group name (required)")
	c.Flags().DurationVar(&heartbeat, "heartbeat", time.Duration(core.DefaultHeartbeatMs)*time.Millisecond, "the group's heartbeat interval")
	c.Flags().DurationVar(&wait, "wait", 0, "how long to listen (default 2×heartbeat + 300ms; with --watch: until a signal)")
	c.Flags().BoolVar(&jsonOut, "json", false, "print JSON (with --watch: one object per line)")
	c.Flags().BoolVar(&watch, "watch", false, "keep listening and print each change of leader or term as it happens")
	c.Flags().StringSliceVar(&members, "members", nil, "the group's members (comma-separated): also read their coalesced heartbeats and elections, sent by agents in 16 groups or more")
	return c
}

// wireView is the part of a wire message status needs. It accepts the seed
// skill's three types and electcore's extensions.
type wireView struct {
	Type      string  `json:"type"`
	Group     string  `json:"group"`
	From      string  `json:"from"`
	Candidate string  `json:"candidate"`
	Leader    string  `json:"leader"`
	Priority  *uint32 `json:"priority"`
	Term      uint64  `json:"term"`
	// Quorum mode's configuration: its version on heartbeats (with
	// committed), the member set on config messages.
	ConfTerm  uint64   `json:"conf_term"`
	ConfIndex uint64   `json:"conf_index"`
	Committed bool     `json:"committed"`
	Members   []string `json:"members"`
	// The leader's value and its version in the leader's term.
	ValueVer uint64 `json:"value_ver"`
	Value    string `json:"value"`
}

type memberSeen struct {
	ID        string  `json:"id"`
	Priority  *uint32 `json:"priority,omitempty"`
	Messages  int     `json:"messages"`
	LastType  string  `json:"last_type"`
	Term      uint64  `json:"term"`
	lastHeard time.Time
	LastAgoMs int64 `json:"last_heard_ms_ago"`
}

type statusReport struct {
	Group  string `json:"group"`
	Leader string `json:"leader"`
	Term   uint64 `json:"term"`
	// Value is the leader's value (run --value, electhost proclaim) as its
	// heartbeats carry it: the newest version heard from that leader in
	// that term ("" if it announces none). A listener checks no signature:
	// an agent's /status shows the value it authenticated.
	Value      string        `json:"value"`
	ListenedMs int64         `json:"listened_ms"`
	Messages   int           `json:"messages"`
	Rejected   int           `json:"rejected"`
	Members    []*memberSeen `json:"members"`
	// Config is the quorum configuration the leader's heartbeats carry
	// (nil: none heard).
	Config *configSeen `json:"config,omitempty"`
}

// configSeen is a quorum group's configuration as a listener hears it: the
// version and whether it is committed from the leader's heartbeats; the
// member set only if a config message of that version was heard (leaders
// send it while a change is in flight, and to members found behind).
type configSeen struct {
	ConfTerm  uint64   `json:"conf_term"`
	ConfIndex uint64   `json:"conf_index"`
	Committed bool     `json:"committed"`
	Members   []string `json:"members,omitempty"`
}

// observer collects what a passive listener hears on a group's topic.
type observer struct {
	group string
	mu    sync.Mutex
	start time.Time
	rep   statusReport
	seen  map[string]*memberSeen
	// onLeader, if set, is called (under mu) when the leader, term or value
	// heard changes; leader "" when the leader fell silent (checkLost).
	onLeader    func(leader string, term uint64, value, lost string)
	leaderHeard time.Time
	valueVer    uint64 // the version of rep.Value in the leader's term
	// configs are the member sets of the config messages heard, by version.
	configs map[[2]uint64][]string
}

func newObserver(group string) *observer {
	return &observer{group: group, start: time.Now(), seen: map[string]*memberSeen{}, rep: statusReport{Group: group},
		configs: map[[2]uint64][]string{}}
}

// reject counts a message that could not be read.
func (o *observer) reject() {
	o.mu.Lock()
	o.rep.Rejected++
	o.mu.Unlock()
}

func (o *observer) deliver(m transport.Message) {
	var w wireView
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := json.Unmarshal(m.Payload, &w); err != nil || w.Type == "" || (w.Group != "" && w.Group != o.group) {
		o.rep.Rejected++
		return
	}
	o.rep.Messages++
	from := w.From
	if from == "" {
		from = w.Candidate
	}
	if from == "" {
		from = w.Leader
	}
	if from == "" {
		o.rep.Rejected++
		return
	}
	ms := o.seen[from]
	if ms == nil {
		ms = &memberSeen{ID: from}
		o.seen[from] = ms
	}
	ms.Messages++
	ms.LastType = w.Type
	ms.lastHeard = time.Now()
	ms.Term = max(ms.Term, w.Term)
	if w.Priority != nil {
		p := *w.Priority
		ms.Priority = &p
	}
	if w.Type == "config" && w.ConfIndex > 0 && len(w.Members) > 0 && len(o.configs) < 64 {
		o.configs[[2]uint64{w.ConfTerm, w.ConfIndex}] = w.Members
	}
	if (w.Type == "leader" || w.Type == "heartbeat") && w.Leader != "" && w.Term >= o.rep.Term {
		changed := w.Leader != o.rep.Leader || w.Term != o.rep.Term
		if changed {
			o.rep.Value, o.valueVer = "", 0 // a value belongs to one leader and term
		}
		if w.ValueVer > o.valueVer { // a late heartbeat carries an older version
			changed = changed || w.Value != o.rep.Value
			o.rep.Value, o.valueVer = w.Value, w.ValueVer
		}
		o.rep.Leader, o.rep.Term = w.Leader, w.Term
		if w.ConfIndex > 0 {
			o.rep.Config = &configSeen{ConfTerm: w.ConfTerm, ConfIndex: w.ConfIndex, Committed: w.Committed}
		}
		o.leaderHeard = time.Now()
		if changed && o.onLeader != nil {
			o.onLeader(w.Leader, w.Term, o.rep.Value, "")
		}
	}
}

// checkLost forgets a leader silent for longer than after (status --watch).
func (o *observer) checkLost(after time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.rep.Leader != "" && time.Since(o.leaderHeard) > after {
		lost := o.rep.Leader
		o.rep.Leader, o.rep.Value, o.valueVer = "", "", 0
		if o.onLeader != nil {
			o.onLeader("", o.rep.Term, "", lost)
		}
	}
}

// watcher prints status --watch's changes.
type watcher struct {
	out       io.Writer
	json      bool
	group     string
	lostAfter time.Duration
}

type watchEvent struct {
	Time   string `json:"time"`
	Group  string `json:"group"`
	Leader string `json:"leader"`         // "" when the leader fell silent
	Term   uint64 `json:"term"`           // the leader's term (the last known one when lost)
	Value  string `json:"value"`          // the leader's value (a proclaim prints a line with the same leader and term)
	Lost   string `json:"lost,omitempty"` // the leader that fell silent
}

func (w *watcher) leader(leader string, term uint64, value, lost string) {
	ev := watchEvent{Time: time.Now().UTC().Format(time.RFC3339Nano), Group: w.group, Leader: leader, Term: term, Value: value, Lost: lost}
	if w.json {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w.out, "%s\n", b)
		return
	}
	if leader == "" {
		fmt.Fprintf(w.out, "%s  %s  no leader: %s (term %d) silent for %v\n", ev.Time, w.group, lost, term, w.lostAfter)
		return
	}
	if value != "" {
		fmt.Fprintf(w.out, "%s  %s  leader %s  term %d  value %q\n", ev.Time, w.group, leader, term, value)
		return
	}
	fmt.Fprintf(w.out, "%s  %s  leader %s  term %d\n", ev.Time, w.group, leader, term)
}

func (o *observer) report(listened time.Duration) statusReport {
	o.mu.Lock()
	defer o.mu.Unlock()
	rep := o.rep
	rep.ListenedMs = listened.Milliseconds()
	if c := rep.Config; c != nil {
		cc := *c
		cc.Members = o.configs[[2]uint64{c.ConfTerm, c.ConfIndex}]
		rep.Config = &cc
	}
	now := time.Now()
	for _, m := range o.seen {
		c := *m
		c.LastAgoMs = now.Sub(m.lastHeard).Milliseconds()
		rep.Members = append(rep.Members, &c)
	}
	slices.SortFunc(rep.Members, func(a, b *memberSeen) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	if rep.Members == nil {
		rep.Members = []*memberSeen{}
	}
	return rep
}

func (r statusReport) print(w io.Writer) {
	leader := "(none heard)"
	if r.Leader != "" {
		leader = fmt.Sprintf("%s (term %d)", r.Leader, r.Term)
	}
	if r.Leader != "" && r.Value != "" {
		leader += fmt.Sprintf(", value %q", r.Value)
	}
	fmt.Fprintf(w, "group    %s\nleader   %s\nheard    %d members, %d messages in %v", r.Group, leader, len(r.Members), r.Messages, time.Duration(r.ListenedMs)*time.Millisecond)
	if r.Rejected > 0 {
		fmt.Fprintf(w, " (%d unreadable)", r.Rejected)
	}
	fmt.Fprintln(w)
	if c := r.Config; c != nil {
		state := "committed"
		if !c.Committed {
			state = "a change in flight"
		}
		members := "members not heard (a leader sends them only while a change is in flight; electhost members list asks an agent)"
		if c.Members != nil {
			members = "members " + strings.Join(c.Members, ",")
		}
		fmt.Fprintf(w, "config   %d (term %d), %s; %s\n", c.ConfIndex, c.ConfTerm, state, members)
	}
	if len(r.Members) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nMEMBER\tPRIORITY\tTERM\tMESSAGES\tLAST\tLAST HEARD")
	for _, m := range r.Members {
		prio := "-"
		if m.Priority != nil {
			prio = fmt.Sprint(*m.Priority)
		}
		if m.Priority != nil && *m.Priority == 0 && r.Config != nil {
			prio = "0 (drained)" // quorum: a drained member announces priority 0
		}
		role := m.LastType
		if m.ID == r.Leader {
			role += " *leader"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%dms ago\n", m.ID, prio, m.Term, m.Messages, role, m.LastAgoMs)
	}
	tw.Flush()
}
