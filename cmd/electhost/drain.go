package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/statestore"
	"github.com/spf13/cobra"
)

// Drain: an operator keeps an agent from leading (maintenance), like
// kubectl cordon or consul maint. The agent records it in its state
// directory's store (statestore: atomic, fsynced, checked) under
// drainName before it applies a change, and joins drained after a restart
// (host.Agent.JoinDrained).

// drainName is the store entry of id's drain of group: "drain=" and the
// group's state name, which holds exactly one "=" (ids and group names have
// none), so no state name is ever a drain name.
func drainName(id, group string) string { return "drain=" + host.StateName(id, group) }

// loadDrained reports whether the operator drained id in group.
func loadDrained(store *statestore.Store, id, group string) (bool, error) {
	b, err := store.Load(drainName(id, group))
	if errors.Is(err, statestore.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("the drain record of %s in %s: %s", id, group, userWords(err.Error()))
	}
	return string(b) == "drained", nil
}

// saveDrained records the drain (on) or its end, durably: a drain must
// survive a crash right after the operator was told it holds.
func saveDrained(store *statestore.Store, id, group string, on bool) error {
	if !on {
		return store.Delete(drainName(id, group))
	}
	return store.Save(drainName(id, group), []byte("drained"))
}

type drainRequest struct {
	Group string `json:"group"`
	Drain bool   `json:"drain"`
}

type drainReply struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
	Group   string `json:"group"`
	ID      string `json:"id"`
	Drained bool   `json:"drained"`
	// A drained leader hands over: the successor, once heard (empty if not
	// within the wait), and how long that took.
	WasLeader bool   `json:"was_leader,omitempty"`
	Leader    string `json:"leader,omitempty"`
	Term      uint64 `json:"term,omitempty"`
	TookMs    int64  `json:"took_ms,omitempty"`
}

// drain persists and applies a drain or undrain; a drained leader's reply
// waits up to two election timeouts to name its successor.
func (c *controller) drain(ctx context.Context, req drainRequest) (drainReply, int) {
	rep := drainReply{Group: c.group, ID: c.id}
	el, code, why := c.election(req.Group)
	if el == nil {
		rep.Error = why
		return rep, code
	}
	if el.Config().Mode != core.ModeQuorum {
		rep.Error = c.group + " runs in bully mode, which has no hand-off to drain by: stop the agent instead"
		return rep, http.StatusConflict
	}
	if err := c.saveDrain(req.Drain); err != nil {
		rep.Error = "could not record the drain in the state directory: " + userWords(err.Error()) + " (nothing changed)"
		return rep, http.StatusInternalServerError
	}
	cs := el.Status()
	rep.WasLeader = req.Drain && cs.Role == core.RoleLeader
	t0 := time.Now()
	if err := c.gate.setOperator(ctx, req.Drain); err != nil {
		rep.Error = "the agent refused: " + userWords(err.Error())
		return rep, http.StatusConflict
	}
	rep.OK, rep.Drained = true, req.Drain
	if rep.WasLeader {
		rep.Leader, rep.Term = c.awaitSuccessor(ctx, cs.Term)
		rep.TookMs = time.Since(t0).Milliseconds()
	}
	return rep, http.StatusOK
}

// awaitSuccessor waits up to two election timeouts (at most 5 s) to hear a
// leader other than this agent in a term after term.
func (c *controller) awaitSuccessor(ctx context.Context, term uint64) (string, uint64) {
	deadline := time.Now().Add(min(2*c.et, 5*time.Second))
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c.st.mu.Lock()
		leader, t := c.st.leader, c.st.term
		c.st.mu.Unlock()
		if leader != "" && leader != c.id && t > term {
			return leader, t
		}
		time.Sleep(10 * time.Millisecond)
	}
	return "", 0
}

// drainHandler serves POST /drain on the control socket.
func (c *controller) drainHandler() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req drainRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, drainReply{Group: c.group, Error: "request body: " + err.Error()})
			return
		}
		rep, code := c.drain(r.Context(), req)
		writeJSON(w, code, rep)
	}
}

func (r *drainReply) refusal() (bool, string) { return r.OK, r.Error }

func newDrainCmd(on bool) *cobra.Command {
	var group, id, stateDir string
	var jsonOut bool
	use, short, long := "drain", "Keep the running agent from leading (maintenance); a leader hands over at once", `drain tells the electhost run agent on this machine with --id ID (or
--state-dir DIR) to stop leading group G, like kubectl cordon or consul
maint: it never campaigns nor accepts a hand-off, announces priority 0 so
that no leader hands over to it, and if it leads it hands leadership to the
best live member at once (its leader-only command is stopped first). It
keeps voting, so the group's majority is unchanged. The drain is saved in
the state directory before it is applied and survives restarts; /status,
/readyz and the electhost_drained metric show it. electhost undrain ends it.

Exit status: 0 drained (a leader's successor is printed once heard); 1
refused; 2 bad flags; 3 no agent runs with that state directory.`
	if !on {
		use, short, long = "undrain", "Let a drained agent lead again", `undrain ends electhost drain for group G at the agent on this machine with
--id ID (or --state-dir DIR): it campaigns and accepts hand-offs again, and
announces its priority. Leadership comes back to it by priority only after
a calm (ten election timeouts from its hand-off, if it was the best member
and led when drained), never at once.

Exit status: 0 undrained; 1 refused; 2 bad flags; 3 no agent runs with that
state directory.`
	}
	c := &cobra.Command{
		Use:   use + " --group G [--id ID | --state-dir DIR]",
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var rep drainReply
			if err := (localCall{group: group, id: id, stateDir: stateDir, method: http.MethodPost, path: "/drain",
				req: drainRequest{Group: group, Drain: on}, what: use + " it", wait: time.Minute, jsonOut: jsonOut}).do(cmd, &rep); err != nil {
				return err
			}
			if jsonOut {
				return nil
			}
			out := cmd.OutOrStdout()
			switch {
			case !on:
				fmt.Fprintf(out, "%s undrained in %s: it may lead again\n", rep.ID, rep.Group)
			case rep.WasLeader && rep.Leader != "":
				fmt.Fprintf(out, "%s drained in %s; it handed leadership to %s (term %d) in %d ms\n", rep.ID, rep.Group, rep.Leader, rep.Term, rep.TookMs)
			case rep.WasLeader:
				fmt.Fprintf(out, "%s drained in %s; it handed leadership over, no successor heard yet\n", rep.ID, rep.Group)
			default:
				fmt.Fprintf(out, "%s drained in %s: it will not lead until undrained\n", rep.ID, rep.Group)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&group, "group", "", "the group (required)")
	f.StringVar(&id, "id", "", "the running agent's --id (default: the host name), which locates its state directory")
	f.StringVar(&stateDir, "state-dir", "", "the running agent's --state-dir (default as for run)")
	f.BoolVar(&jsonOut, "json", false, "print the agent's answer as JSON")
	return c
}
