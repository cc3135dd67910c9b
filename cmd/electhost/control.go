package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/spf13/cobra"
)

// The control channel of a running agent (electhost resign, POST /resign).
//
// Locally it is a unix socket in the agent's state directory, mode 0600:
// only the agent's user (and root) may connect, which is the
// authentication. Over --http the same request needs the bearer token that
// the agent writes, mode 0600, to the state directory at start: anyone who
// can read it is already that user. Both files are recreated at each start
// (the state directory's lock says no other agent uses them).
const (
	controlSocketName = "control.sock"
	controlTokenName  = "control.token"
	// maxUnixPath is the longest socket path Linux binds (sun_path less its NUL).
	maxUnixPath = 107
)

// resignRequest and resignReply are the control channel's messages.
type resignRequest struct {
	Group string `json:"group"`
	To    string `json:"to,omitempty"`
}

type resignReply struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
	Group   string `json:"group"`
	From    string `json:"from,omitempty"`   // this agent, which led
	Term    uint64 `json:"term,omitempty"`   // the term it resigned
	Leader  string `json:"leader,omitempty"` // the successor, once known (empty if not heard within the wait)
	NewTerm uint64 `json:"new_term,omitempty"`
	TookMs  int64  `json:"took_ms,omitempty"` // from the request to hearing the successor
}

// controller carries out resign and transfer requests for one election.
type controller struct {
	group, id string
	et        time.Duration
	el        func() *host.Election
	st        *agentState
	saveDrain func(on bool) error // records a drain durably before it is applied
	gate      *gate               // the operator's drain and the health check
	token     string              // "" when no token file could be written: POST over --http refused
	// proclaimed, if set, hears every value proclaimed (the command's next
	// ELECT_VALUE).
	proclaimed func(value string)
}

// resign asks the core to resign (or transfer to req.To) and waits up to
// 2 election timeouts to hear the successor. Refusals come back in the
// operator's words, with what to do instead.
func (c *controller) resign(ctx context.Context, req resignRequest) (resignReply, int) {
	rep := resignReply{Group: c.group, From: c.id}
	fail := func(code int, format string, args ...any) (resignReply, int) {
		rep.Error = fmt.Sprintf(format, args...)
		return rep, code
	}
	el, code, why := c.election(req.Group)
	if el == nil {
		return fail(code, "%s", why)
	}
	cs := el.Status()
	if cs.Role != core.RoleLeader {
		if cs.Leader != "" {
			return fail(http.StatusConflict, "%s is not the leader of %s: %s is (term %d); run this on %s's machine (--id %s)", c.id, c.group, cs.Leader, cs.Term, cs.Leader, cs.Leader)
		}
		return fail(http.StatusConflict, "%s is not the leader of %s, and no leader is known (role %s, term %d)", c.id, c.group, cs.Role, cs.Term)
	}
	if req.To == c.id {
		return fail(http.StatusConflict, "--to %s is this agent, which already leads %s", req.To, c.group)
	}
	if req.To != "" && len(cs.Members) > 0 && !inConfig(cs, req.To) {
		return fail(http.StatusBadRequest, "--to %s is not a member of %s (members: %s)", req.To, c.group, strings.Join(configOf(cs).Members, ","))
	}
	rep.Term = cs.Term
	t0 := time.Now()
	var err error
	if req.To == "" {
		err = el.Resign(ctx)
	} else {
		err = el.TransferTo(ctx, req.To)
	}
	if err != nil {
		return fail(http.StatusConflict, "%s refused to resign %s: %s", c.id, c.group, userWords(err.Error()))
	}
	if rep.Leader, rep.NewTerm = c.awaitSuccessor(ctx, rep.Term); rep.Leader != "" {
		rep.TookMs = time.Since(t0).Milliseconds()
	}
	rep.OK = true
	return rep, http.StatusOK
}

// election is this agent's election of group, or nil with the HTTP status
// and the reason.
func (c *controller) election(group string) (*host.Election, int, string) {
	if group != c.group {
		return nil, http.StatusNotFound, fmt.Sprintf("this agent (--id %s) runs group %q, not %q", c.id, c.group, group)
	}
	el := c.el()
	if el == nil {
		return nil, http.StatusServiceUnavailable, fmt.Sprintf("the agent has not joined %s yet; try again", c.group)
	}
	return el, 0, ""
}

// handler serves POST /resign (JSON body or ?group=&to= query). With
// needToken it requires "Authorization: Bearer <control.token>".
func (c *controller) handler(needToken bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if needToken && !c.bearerOK(w, r) {
			writeJSON(w, http.StatusUnauthorized, resignReply{Group: c.group, Error: "POST /resign needs Authorization: Bearer <the agent's " + controlTokenName + ">"})
			return
		}
		req := resignRequest{Group: r.URL.Query().Get("group"), To: r.URL.Query().Get("to")}
		if r.ContentLength != 0 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
				writeJSON(w, http.StatusBadRequest, resignReply{Group: c.group, Error: "request body: " + err.Error()})
				return
			}
		}
		if req.Group == "" {
			req.Group = c.group
		}
		rep, code := c.resign(r.Context(), req)
		writeJSON(w, code, rep)
	}
}

// bearerOK reports whether r carries the control token (POST over --http);
// if not, it asks for it (WWW-Authenticate) and the caller answers 401.
func (c *controller) bearerOK(w http.ResponseWriter, r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if c.token == "" || !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(c.token)) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="electhost"`)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// listenControl creates the control socket (0600) and token file (0600) in
// stateDir. A socket path too long to bind is not fatal: the agent runs
// without it (logged) and POST /resign over --http still works.
func listenControl(stateDir string) (ln net.Listener, token string, err error) {
	b := make([]byte, 24)
	rand.Read(b)
	token = hex.EncodeToString(b)
	tokPath := filepath.Join(stateDir, controlTokenName)
	os.Remove(tokPath)
	if err := os.WriteFile(tokPath, []byte(token+"\n"), 0o600); err != nil {
		return nil, "", fmt.Errorf("--state-dir: control token: %v", err)
	}
	sock := filepath.Join(stateDir, controlSocketName)
	if len(sock) > maxUnixPath {
		return nil, token, fmt.Errorf("control socket path %s is longer than %d bytes: electhost resign cannot reach this agent (POST /resign over --http can); use a shorter --state-dir", sock, maxUnixPath)
	}
	os.Remove(sock) // a previous run's: the state directory's lock is ours
	ln, err = net.Listen("unix", sock)
	if err != nil {
		return nil, token, fmt.Errorf("control socket %s: %v", sock, err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, token, fmt.Errorf("control socket %s: %v", sock, err)
	}
	return ln, token, nil
}

func newResignCmd() *cobra.Command {
	var group, id, stateDir, to string
	var jsonOut bool
	c := &cobra.Command{
		Use:   "resign --group G [--to ID] [--id ID | --state-dir DIR]",
		Short: "Make the running agent hand its leadership over (to --to, or the best live member)",
		Long: `resign asks the electhost run agent on this machine with --id ID (or
--state-dir DIR), which must be the leader, to resign the leadership of
group G: it stops its leader-only command and hands leadership to the best
live member, or to --to ID (as electhost transfer does), without a restart
and without waiting out an election timeout. It talks to the agent over the
unix socket <state-dir>/control.sock (mode 0600: only the agent's user can
use it) and waits up to two election timeouts to hear the successor.

A resign moves leadership for a while: however good this agent's priority,
no priority hand-off gives leadership back to it until it has been heard
again for ten election timeouts (20 s at the defaults). To move it for
good, transfer it (it stays with the successor while that one leads) or
drain this agent (electhost drain).

The same request over the agent's --http address:
  curl -X POST -H "Authorization: Bearer $(cat <state-dir>/control.token)" \
       'http://ADDR/resign?group=G&to=ID'

Exit status: 0 resigned; 1 refused (this agent is not the leader, --to is not
a member, ...); 2 bad flags; 3 no agent runs with that state directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return resignVerb(cmd, group, id, stateDir, to, jsonOut, "resigned")
		},
	}
	f := c.Flags()
	f.StringVar(&group, "group", "", "the group whose leadership to hand over (required)")
	f.StringVar(&to, "to", "", "the member to hand it to, which keeps it (default: the best live member)")
	f.StringVar(&id, "id", "", "the running agent's --id (default: the host name), which locates its state directory")
	f.StringVar(&stateDir, "state-dir", "", "the running agent's --state-dir (default as for run)")
	f.BoolVar(&jsonOut, "json", false, "print the agent's answer as JSON")
	return c
}

func newTransferCmd() *cobra.Command {
	var group, id, stateDir, to string
	var jsonOut bool
	c := &cobra.Command{
		Use:   "transfer --group G --to ID [--id ID | --state-dir DIR]",
		Short: "Move the leadership to member --to, where it stays",
		Long: `transfer, run on the leader's machine (--id or --state-dir of the leading
agent, as for resign), hands the leadership of group G to member --to ID:
the leader stops its leader-only command and the successor is elected by the
followers' pushed votes, without waiting out an election timeout. The
leadership then stays with ID while it leads: the automatic priority
hand-off does not move it back to a better member. It moves on only if ID
fails, resigns, is drained or is transferred away.

Exit status: 0 transferred (the successor is printed once heard); 1 refused
(this agent is not the leader: the error names the one that is; ID is not a
member, or has not acknowledged the leader's configuration yet); 2 bad flags;
3 no agent runs with that state directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return usageErrorf("--to is required: the member to hand leadership to")
			}
			return resignVerb(cmd, group, id, stateDir, to, jsonOut, "transferred")
		},
	}
	f := c.Flags()
	f.StringVar(&group, "group", "", "the group whose leadership to move (required)")
	f.StringVar(&to, "to", "", "the member to move it to (required)")
	f.StringVar(&id, "id", "", "the leading agent's --id (default: the host name), which locates its state directory")
	f.StringVar(&stateDir, "state-dir", "", "the leading agent's --state-dir (default as for run)")
	f.BoolVar(&jsonOut, "json", false, "print the agent's answer as JSON")
	return c
}

// localCall is a verb the agent running on this machine carries out: the
// agent located by group, id and stateDir (localAgent), the request sent
// with method to path on its control socket, the answer decoded into rep
// and, with jsonOut, printed as JSON. wait bounds the call. A refusal
// (rep's "ok" false) exits with refusedCode(HTTP status), or 1 if that is
// nil; it is printed as the answer's error unless jsonOut printed it
// already. what is the action, for callControl ("make it resign").
type localCall struct {
	group, id, stateDir string
	method, path        string
	req                 any
	what                string
	wait                time.Duration
	jsonOut             bool
	refusedCode         func(status int) int
}

// do carries out c, the answer in rep (a pointer to a reply with "ok" and
// "error").
func (c localCall) do(cmd *cobra.Command, rep interface{ refusal() (bool, string) }) error {
	id, stateDir, err := localAgent(c.group, c.id, c.stateDir)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), c.wait)
	defer cancel()
	status, err := callControl(ctx, filepath.Join(stateDir, controlSocketName), id, c.method, c.path, c.req, rep, c.what)
	if err != nil {
		return err
	}
	if c.jsonOut {
		json.NewEncoder(cmd.OutOrStdout()).Encode(rep)
	}
	ok, msg := rep.refusal()
	if ok {
		return nil
	}
	code := exitFailure
	if c.refusedCode != nil {
		code = c.refusedCode(status)
	}
	if c.jsonOut {
		return quietError{code: code}
	}
	return &exitError{code: code, err: errors.New(msg)}
}

func (r *resignReply) refusal() (bool, string) { return r.OK, r.Error }

// resignVerb carries out resign and transfer through the local agent's
// control socket.
func resignVerb(cmd *cobra.Command, group, id, stateDir, to string, jsonOut bool, done string) error {
	var rep resignReply
	if err := (localCall{group: group, id: id, stateDir: stateDir, method: http.MethodPost, path: "/resign",
		req: resignRequest{Group: group, To: to}, what: "make it resign", wait: time.Minute, jsonOut: jsonOut}).do(cmd, &rep); err != nil {
		return err
	}
	if !jsonOut {
		if rep.Leader != "" {
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s %s term %d; %s leads term %d (%d ms)\n", rep.From, done, rep.Group, rep.Term, rep.Leader, rep.NewTerm, rep.TookMs)
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s %s term %d; no successor heard yet\n", rep.From, done, rep.Group, rep.Term)
		}
	}
	return nil
}
