package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/hostfuncs"
	"github.com/spf13/cobra"
)

func newStatusCmd() *cobra.Command {
	var (
		tf        transportFlags
		group     string
		heartbeat time.Duration
		wait      time.Duration
		jsonOut   bool
	)
	c := &cobra.Command{
		Use:   "status --group G [--transport nats|pilot --broker ...]",
		Short: "Listen to a group for about two heartbeats; print its leader, term and members heard",
		Long: `status subscribes to the group's topic (election:<group>) for --wait (default
two heartbeat intervals plus 300 ms for the subscription to go live), then
prints the leader with the highest term heard, and every member heard with
its priority, message count and when it was last heard. It does not join the
group and publishes nothing.

Exit status: 0 if a leader was heard, 1 if none was (the status is printed
anyway), 2 for bad flags, 4 if the transport is unreachable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if group == "" {
				return usageErrorf("--group is required")
			}
			if err := (core.Config{ID: "status", Group: group, Mode: core.ModeBully}).Validate(); err != nil {
				return usageErrorf("--group: %v", err)
			}
			if err := tf.validate(); err != nil {
				return err
			}
			if heartbeat <= 0 {
				return usageErrorf("--heartbeat must be positive")
			}
			if wait == 0 {
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
			if err := t.Subscribe(ctx, core.Topic(group), obs.deliver); err != nil {
				return withCode(exitTransport, fmt.Errorf("subscribe %s: %v", core.Topic(group), err))
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
	c.Flags().DurationVar(&wait, "wait", 0, "how long to listen (default 2×heartbeat + 300ms)")
	c.Flags().BoolVar(&jsonOut, "json", false, "print JSON")
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
	Group      string        `json:"group"`
	Leader     string        `json:"leader"`
	Term       uint64        `json:"term"`
	ListenedMs int64         `json:"listened_ms"`
	Messages   int           `json:"messages"`
	Rejected   int           `json:"rejected"`
	Members    []*memberSeen `json:"members"`
}

// observer collects what a passive listener hears on a group's topic.
type observer struct {
	group string
	mu    sync.Mutex
	start time.Time
	rep   statusReport
	seen  map[string]*memberSeen
}

func newObserver(group string) *observer {
	return &observer{group: group, start: time.Now(), seen: map[string]*memberSeen{}, rep: statusReport{Group: group}}
}

func (o *observer) deliver(m hostfuncs.Message) {
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
	if (w.Type == "leader" || w.Type == "heartbeat") && w.Leader != "" && w.Term >= o.rep.Term {
		o.rep.Leader, o.rep.Term = w.Leader, w.Term
	}
}

func (o *observer) report(listened time.Duration) statusReport {
	o.mu.Lock()
	defer o.mu.Unlock()
	rep := o.rep
	rep.ListenedMs = listened.Milliseconds()
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
	fmt.Fprintf(w, "group    %s\nleader   %s\nheard    %d members, %d messages in %v", r.Group, leader, len(r.Members), r.Messages, time.Duration(r.ListenedMs)*time.Millisecond)
	if r.Rejected > 0 {
		fmt.Fprintf(w, " (%d unreadable)", r.Rejected)
	}
	fmt.Fprintln(w)
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
		role := m.LastType
		if m.ID == r.Leader {
			role += " *leader"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%dms ago\n", m.ID, prio, m.Term, m.Messages, role, m.LastAgoMs)
	}
	tw.Flush()
}
