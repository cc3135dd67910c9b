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
}

// controller carries out resign and transfer requests for one election.
type controller struct {
	group, id string
	et        time.Duration
	el        func() *host.Election
	st        *agentState
	token     string // "" when no token file could be written: POST over --http refused
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
			return fail(http.StatusConflict, "%s is not the leader of %s: %s is (term %d); run resign against %s's agent", c.id, c.group, cs.Leader, cs.Term, cs.Leader)
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
	var err error
	if req.To == "" {
		err = el.Resign(ctx)
	} else {
		err = el.TransferTo(ctx, req.To)
	}
	if err != nil {
		return fail(http.StatusConflict, "%s refused to resign %s: %s", c.id, c.group, userWords(err.Error()))
	}
	deadline := time.Now().Add(min(2*c.et, 5*time.Second))
	for time.Now().Before(deadline) && ctx.Err() == nil {
		c.st.mu.Lock()
		leader, term := c.st.leader, c.st.term
		c.st.mu.Unlock()
		if leader != "" && leader != c.id && term > rep.Term {
			rep.Leader, rep.NewTerm = leader, term
			break
		}
		time.Sleep(10 * time.Millisecond)
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
		if needToken {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if c.token == "" || !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(c.token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="electhost"`)
				writeJSON(w, http.StatusUnauthorized, resignReply{Group: c.group, Error: "POST /resign needs Authorization: Bearer <the agent's " + controlTokenName + ">"})
				return
			}
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
--state-dir DIR) to resign the leadership of group G: it stops its
leader-only command and hands leadership to the best live member, or to --to
ID, without a restart and without waiting out an election timeout. It talks
to the agent over the unix socket <state-dir>/control.sock (mode 0600: only
the agent's user can use it) and waits up to two election timeouts to hear
the successor.

The same request over the agent's --http address:
  curl -X POST -H "Authorization: Bearer $(cat <state-dir>/control.token)" \
       'http://ADDR/resign?group=G&to=ID'

Exit status: 0 resigned; 1 refused (this agent is not the leader, --to is not
a member, ...); 2 bad flags; 3 no agent runs with that state directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var err error
			if id, stateDir, err = localAgent(group, id, stateDir); err != nil {
				return err
			}
			sock := filepath.Join(stateDir, controlSocketName)
			body, _ := json.Marshal(resignRequest{Group: group, To: to})
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://electhost/resign", strings.NewReader(string(body)))
			req.Header.Set("Content-Type", "application/json")
			resp, err := controlClient(sock).Do(req)
			if err != nil {
				return controlError(err, sock, id, "make it resign")
			}
			defer resp.Body.Close()
			var rep resignReply
			if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
				return fmt.Errorf("control socket %s: unreadable answer: %v", sock, err)
			}
			if jsonOut {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.Encode(rep)
			}
			if !rep.OK {
				if jsonOut {
					return quietError{code: exitFailure}
				}
				return errors.New(rep.Error)
			}
			if !jsonOut {
				if rep.Leader != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "%s resigned %s term %d; %s leads term %d\n", rep.From, rep.Group, rep.Term, rep.Leader, rep.NewTerm)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "%s resigned %s term %d; no successor heard yet\n", rep.From, rep.Group, rep.Term)
				}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&group, "group", "", "the group whose leadership to hand over (required)")
	f.StringVar(&to, "to", "", "the member to hand it to (default: the best live member)")
	f.StringVar(&id, "id", "", "the running agent's --id (default: the host name), which locates its state directory")
	f.StringVar(&stateDir, "state-dir", "", "the running agent's --state-dir (default as for run)")
	f.BoolVar(&jsonOut, "json", false, "print the agent's answer as JSON")
	return c
}
