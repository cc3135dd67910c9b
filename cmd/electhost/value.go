package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/spf13/cobra"
)

// The leader value: run --value announces it with this agent's leadership,
// electhost proclaim changes it at the running leader through its control
// socket (as resign and drain do), and followers show it in /status and
// electhost status.

type proclaimRequest struct {
	Group string `json:"group"`
	Value string `json:"value"`
}

type proclaimReply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	Group string `json:"group"`
	ID    string `json:"id"`
	Term  uint64 `json:"term,omitempty"` // the term it leads, unchanged by the proclaim
	Value string `json:"value"`
	// Version is the value's version in that term (1 for the value it
	// started leading with).
	Version uint64 `json:"version,omitempty"`
}

// proclaim makes req.Value this leader's value. Refusals name the leader
// when it is another agent, as resign's do.
func (c *controller) proclaim(ctx context.Context, req proclaimRequest) (proclaimReply, int) {
	rep := proclaimReply{Group: c.group, ID: c.id, Value: req.Value}
	el, code, why := c.election(req.Group)
	if el == nil {
		rep.Error = why
		return rep, code
	}
	if err := core.CheckValue(req.Value); err != nil {
		rep.Error = "--value: " + strings.TrimPrefix(err.Error(), "value: ")
		return rep, http.StatusBadRequest
	}
	cs := el.Status()
	if cs.Role != core.RoleLeader {
		if cs.Leader != "" {
			rep.Error = fmt.Sprintf("%s is not the leader of %s: %s is (term %d); run this on %s's machine (--id %s)", c.id, c.group, cs.Leader, cs.Term, cs.Leader, cs.Leader)
		} else {
			rep.Error = fmt.Sprintf("%s is not the leader of %s, and no leader is known (role %s, term %d)", c.id, c.group, cs.Role, cs.Term)
		}
		return rep, http.StatusConflict
	}
	if err := el.Proclaim(ctx, req.Value); err != nil {
		rep.Error = fmt.Sprintf("%s refused to proclaim in %s: %s", c.id, c.group, userWords(err.Error()))
		return rep, http.StatusConflict
	}
	if c.proclaimed != nil {
		c.proclaimed(req.Value)
	}
	cs = el.Status()
	rep.OK, rep.Term, rep.Version = true, cs.Term, cs.ValueVersion
	return rep, http.StatusOK
}

// proclaimHandler serves POST /proclaim (a JSON body); with needToken (over
// --http) it requires the control token, as POST /resign does.
func (c *controller) proclaimHandler(needToken bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if needToken && !c.bearerOK(w, r) {
			writeJSON(w, http.StatusUnauthorized, proclaimReply{Group: c.group, ID: c.id, Error: "POST /proclaim needs Authorization: Bearer <the agent's " + controlTokenName + ">"})
			return
		}
		var req proclaimRequest
		// A value is at most MaxValueLen bytes, escaped at most 6× in JSON.
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8*core.MaxValueLen)).Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, proclaimReply{Group: c.group, ID: c.id, Error: "request body: " + err.Error()})
			return
		}
		if req.Group == "" {
			req.Group = c.group
		}
		rep, code := c.proclaim(r.Context(), req)
		writeJSON(w, code, rep)
	}
}

func (r *proclaimReply) refusal() (bool, string) { return r.OK, r.Error }

func newProclaimCmd() *cobra.Command {
	var group, id, stateDir, value string
	var jsonOut bool
	c := &cobra.Command{
		Use:   "proclaim --group G --value V [--id ID | --state-dir DIR]",
		Short: "Change the leader's value (run --value) without an election",
		Long: `proclaim, run on the leader's machine (--id or --state-dir of the leading
agent, as for resign), makes V the value the leader of group G announces
(run --value: say, the address where it serves), like etcd's Proclaim: the
leader sends it at once with its next heartbeat, every follower takes it
(their /status, electhost status, OnValue) in the same term, and no
election is held. A heartbeat that left before the proclaim cannot bring the
old value back (values carry a version within the term).

The value stays this agent's for its later leaderships until it restarts
(then --value applies again). A leader-only command already running keeps
the ELECT_VALUE it started with; the next start gets the new value.

V: at most 1024 bytes of UTF-8 without control characters ("" announces
none).

The same request over the agent's --http address:
  curl -X POST -H "Authorization: Bearer $(cat <state-dir>/control.token)" \
       -d '{"group":"G","value":"V"}' http://ADDR/proclaim

Exit status: 0 proclaimed; 1 refused (this agent is not the leader: the
error names the one that is); 2 bad flags or value; 3 no agent runs with
that state directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("value") {
				return usageErrorf("--value is required: the value to announce (\"\" for none)")
			}
			if err := core.CheckValue(value); err != nil {
				return usageErrorf("--value: %s", strings.TrimPrefix(err.Error(), "value: "))
			}
			var rep proclaimReply
			if err := (localCall{group: group, id: id, stateDir: stateDir, method: http.MethodPost, path: "/proclaim",
				req: proclaimRequest{Group: group, Value: value}, what: "make it proclaim", wait: time.Minute, jsonOut: jsonOut}).do(cmd, &rep); err != nil {
				return err
			}
			if !jsonOut {
				fmt.Fprintf(cmd.OutOrStdout(), "%s proclaimed %q in %s (term %d, version %d)\n", rep.ID, rep.Value, rep.Group, rep.Term, rep.Version)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&group, "group", "", "the group (required)")
	f.StringVar(&value, "value", "", "the new value (required; \"\" announces none)")
	f.StringVar(&id, "id", "", "the leading agent's --id (default: the host name), which locates its state directory")
	f.StringVar(&stateDir, "state-dir", "", "the leading agent's --state-dir (default as for run)")
	f.BoolVar(&jsonOut, "json", false, "print the agent's answer as JSON")
	return c
}
