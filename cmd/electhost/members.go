package main

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
	"github.com/spf13/cobra"
)

// Membership changes through the local agent's control socket (quorum mode):
// POST /members asks for one change and answers once it is committed (or
// refused, or the wait is over); GET /members lists the configuration.

type membersRequest struct {
	Group     string `json:"group"`
	Op        string `json:"op"` // add or remove
	ID        string `json:"id"`
	Key       string `json:"key,omitempty"` // base64 ed25519 public key (add, with --auth ed25519)
	TimeoutMs int64  `json:"timeout_ms,omitempty"`
}

type membersReply struct {
	OK       bool   `json:"ok"`
	Error    string `json:"error,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"` // not seen committed within the timeout: it may still commit
	Group    string `json:"group"`
	Op       string `json:"op,omitempty"`
	Member   string `json:"member,omitempty"`
	TookMs   int64  `json:"took_ms,omitempty"`
	configJSON
}

// configJSON is the configuration as one agent holds it (members list, the
// configuration part of /status).
type configJSON struct {
	Via       string   `json:"via"` // the agent that answered
	Members   []string `json:"members"`
	ConfTerm  uint64   `json:"conf_term"`
	ConfIndex uint64   `json:"conf_index"`
	Committed bool     `json:"committed"`
	Voter     bool     `json:"voter"` // whether the answering agent is in it
	Leader    string   `json:"leader"`
}

func configOf(cs core.Status) configJSON {
	ids := make([]string, len(cs.Members))
	for i, m := range cs.Members {
		ids[i] = m.ID
	}
	return configJSON{Via: cs.ID, Members: ids, ConfTerm: cs.ConfTerm, ConfIndex: cs.ConfIndex,
		Committed: cs.ConfCommitted, Voter: cs.Voter, Leader: cs.Leader}
}

const (
	defaultMembersTimeout = 30 * time.Second
	maxMembersTimeout     = 10 * time.Minute
)

// changeMembers carries out one membership change and waits for its commit.
func (c *controller) changeMembers(ctx context.Context, req membersRequest) (membersReply, int) {
	rep := membersReply{Group: c.group, Op: req.Op, Member: req.ID}
	fail := func(code int, format string, args ...any) (membersReply, int) {
		rep.Error = fmt.Sprintf(format, args...)
		if el := c.el(); el != nil {
			rep.configJSON = configOf(el.Status())
		}
		return rep, code
	}
	el, code, why := c.election(req.Group)
	if el == nil {
		return fail(code, "%s", why)
	}
	cfg := el.Config()
	if cfg.Mode != core.ModeQuorum {
		return fail(http.StatusConflict, "%s runs in bully mode, which has no configuration to change: members join by running and leave by stopping", c.group)
	}
	if req.Op != "add" && req.Op != "remove" {
		return fail(http.StatusBadRequest, "op %q: want add or remove", req.Op)
	}
	var key []byte
	if req.Key != "" {
		var err error
		if key, err = decodeB64(req.Key); err != nil || len(key) != ed25519.PublicKeySize {
			return fail(http.StatusBadRequest, "--key: not a base64 ed25519 public key (%d bytes)", ed25519.PublicKeySize)
		}
	}
	switch {
	case req.Op == "add" && cfg.Auth == core.AuthEd25519 && key == nil:
		return fail(http.StatusBadRequest, "%s uses --auth ed25519: give %s's public key with --key FILE|BASE64 (electhost keygen --id %s printed it)", c.group, req.ID, req.ID)
	case key != nil && req.Op != "add":
		return fail(http.StatusBadRequest, "--key is only for members add")
	case key != nil && cfg.Auth != core.AuthEd25519:
		return fail(http.StatusBadRequest, "--key is only for groups that use --auth ed25519; %s does not", c.group)
	}
	timeout := defaultMembersTimeout
	if req.TimeoutMs > 0 {
		timeout = min(time.Duration(req.TimeoutMs)*time.Millisecond, maxMembersTimeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	var err error
	if req.Op == "add" {
		err = el.AddMember(ctx, req.ID, key)
	} else {
		err = el.RemoveMember(ctx, req.ID)
	}
	rep.TookMs = time.Since(t0).Milliseconds()
	switch {
	case errors.Is(err, host.ErrRefused):
		return fail(http.StatusConflict, "%s refused to %s %s: %s", c.id, req.Op, req.ID, refusalWords(err))
	case errors.Is(err, context.DeadlineExceeded):
		rep.TimedOut = true
		cs := el.Status()
		return fail(http.StatusGatewayTimeout, "%s %s: not committed within %v (leader %q; configuration %s, index %d, committed %v): it may still commit, or the leader refused it (see the leader's log); check with electhost members list and retry (a change already made is not asked for again)",
			req.Op, req.ID, timeout, cs.Leader, strings.Join(configOf(cs).Members, ","), cs.ConfIndex, cs.ConfCommitted)
	case err != nil:
		return fail(http.StatusInternalServerError, "%s %s: %s", req.Op, req.ID, userWords(err.Error()))
	}
	rep.OK = true
	rep.configJSON = configOf(el.Status())
	return rep, http.StatusOK
}

// refusalWords is the core's reason without the host's prefixes.
func refusalWords(err error) string {
	msg := userWords(err.Error())
	if _, after, ok := strings.Cut(msg, host.ErrRefused.Error()+": "); ok {
		msg = after
	}
	for _, p := range []string{"add-member: ", "remove-member: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// membersHandler serves POST /members (a change) and GET /members (the
// configuration) on the control socket.
func (c *controller) membersHandler() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			el, code, why := c.election(r.URL.Query().Get("group"))
			if el == nil {
				writeJSON(w, code, membersReply{Group: c.group, Error: why})
				return
			}
			writeJSON(w, http.StatusOK, membersReply{OK: true, Group: c.group, configJSON: configOf(el.Status())})
			return
		}
		var req membersRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, membersReply{Group: c.group, Error: "request body: " + err.Error()})
			return
		}
		rep, code := c.changeMembers(r.Context(), req)
		writeJSON(w, code, rep)
	}
}

// controlClient is an HTTP client for the agent's control socket.
func controlClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

func (r *membersReply) refusal() (bool, string) { return r.OK, r.Error }

// callControl sends req (JSON; nil: no body) with method to path on the
// agent's control socket and decodes the answer into rep, returning its
// HTTP status; what is the action, for controlError ("make it resign").
func callControl(ctx context.Context, sock, id, method, path string, req, rep any, what string) (int, error) {
	var rd io.Reader
	if req != nil {
		b, _ := json.Marshal(req)
		rd = strings.NewReader(string(b))
	}
	hr, _ := http.NewRequestWithContext(ctx, method, "http://electhost"+path, rd)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := controlClient(sock).Do(hr)
	if err != nil {
		return 0, controlError(err, sock, id, what)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(rep); err != nil {
		return 0, fmt.Errorf("control socket %s: unreadable answer (%s): %v", sock, resp.Status, err)
	}
	return resp.StatusCode, nil
}

// controlError says why the control socket could not be reached, in the
// operator's words; what is the action refused ("make it resign").
func controlError(err error, sock, id, what string) error {
	if errors.Is(err, os.ErrPermission) {
		return configErrorf("control socket %s: permission denied: only the agent's own user can %s", sock, what)
	}
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
		return configErrorf("no electhost run agent answers at %s (is it running with --id %s? give --id or --state-dir as it was started)", sock, id)
	}
	return configErrorf("control socket %s: %v", sock, err)
}

func newMembersCmd() *cobra.Command {
	var group, id, stateDir string
	var jsonOut bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "members add|remove|list",
		Short: "Change or list a quorum group's members through the running agent",
		Long: `members changes a quorum group's configuration (its member set) while it
runs, through the electhost run agent on this machine with --id ID (or
--state-dir DIR), over its control socket <state-dir>/control.sock (mode
0600: only the agent's user can use it). Any member's agent will do: a
follower forwards the change to the leader.

  electhost members add ID [--key FILE|BASE64]   add ID (start it first with electhost run --join)
  electhost members remove ID                    remove ID (the leader too: it hands off first)
  electhost members list                         the configuration as this agent holds it

One change at a time: add and remove wait until the change is committed (a
majority of the new configuration holds it), up to --timeout. With --auth
ed25519, add needs the new member's public key (--key: a file holding it, as
electhost keygen --id ID prints it, or the base64 key itself); the group then
accepts messages signed with it, and refuses a removed member's.

Exit status: 0 committed (list: listed); 1 refused (a change in flight, not a
member, no leader known, bully mode, ...); 2 bad flags or arguments; 3 no
agent runs with that state directory; 6 not committed within --timeout (it
may still commit: check with members list, then retry — a change already
made is not asked for again).`,
	}
	pf := c.PersistentFlags()
	pf.StringVar(&group, "group", "", "the group (required)")
	pf.StringVar(&id, "id", "", "the running agent's --id (default: the host name), which locates its state directory")
	pf.StringVar(&stateDir, "state-dir", "", "the running agent's --state-dir (default as for run)")
	pf.BoolVar(&jsonOut, "json", false, "print the agent's answer as JSON")

	call := func(cmd *cobra.Command, method string, body any, wait time.Duration) (membersReply, error) {
		var rep membersReply
		err := localCall{group: group, id: id, stateDir: stateDir, method: method, path: "/members?group=" + group,
			req: body, what: "change the members", wait: wait + 10*time.Second, jsonOut: jsonOut,
			refusedCode: func(status int) int {
				switch {
				case rep.TimedOut:
					return exitTimeout
				case status == http.StatusBadRequest:
					return exitUsage
				}
				return exitFailure
			}}.do(cmd, &rep)
		return rep, err
	}

	change := func(op string) *cobra.Command {
		var keyArg string
		sc := &cobra.Command{
			Use:  op + " ID",
			Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				member := args[0]
				if err := (core.Config{ID: member, Group: "g", Mode: core.ModeBully}).Validate(); err != nil {
					return nameInWords(err, "member")
				}
				if timeout <= 0 || timeout > maxMembersTimeout {
					return usageErrorf("--timeout %v: want more than 0, at most %v", timeout, maxMembersTimeout)
				}
				req := membersRequest{Group: group, Op: op, ID: member, TimeoutMs: timeout.Milliseconds()}
				if keyArg != "" {
					k, err := readPublicKey(keyArg, member)
					if err != nil {
						return err
					}
					req.Key = base64.StdEncoding.EncodeToString(k)
				}
				rep, err := call(cmd, http.MethodPost, req, timeout)
				if err != nil {
					return err
				}
				if !jsonOut {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s %s committed in %v; members %s (configuration %d, term %d)\n",
						rep.Group, map[string]string{"add": "added", "remove": "removed"}[op], member,
						time.Duration(rep.TookMs)*time.Millisecond, strings.Join(rep.Members, ","), rep.ConfIndex, rep.ConfTerm)
				}
				return nil
			},
		}
		if op == "add" {
			sc.Short = "Add member ID and wait until the change is committed"
			sc.Flags().StringVar(&keyArg, "key", "", "with --auth ed25519: ID's public key, a file (as electhost keygen --id ID prints it) or the base64 key")
		} else {
			sc.Short = "Remove member ID (the leader hands off first) and wait until the change is committed"
		}
		sc.Flags().DurationVar(&timeout, "timeout", defaultMembersTimeout, "how long to wait for the change to commit")
		return sc
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the configuration as the running agent holds it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := call(cmd, http.MethodGet, nil, 0)
			if err != nil || jsonOut {
				return err
			}
			state := "committed"
			if !rep.Committed {
				state = "not yet known to be committed (a change in flight)"
			}
			voter := "a member"
			if !rep.Voter {
				voter = "not a member (waiting to be added, or removed)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: configuration %d (term %d), %s; leader %q; seen by %s, %s\n",
				rep.Group, rep.ConfIndex, rep.ConfTerm, state, rep.Leader, rep.Via, voter)
			for _, m := range rep.Members {
				fmt.Fprintln(cmd.OutOrStdout(), m)
			}
			return nil
		},
	}
	c.AddCommand(change("add"), change("remove"), list)
	for _, sc := range c.Commands() {
		sc.SetFlagErrorFunc(flagError)
	}
	return c
}

// readPublicKey reads --key: a file holding a base64 public key (alone, or
// as the "ID KEY" line electhost keygen --id prints), or the key itself.
func readPublicKey(arg, member string) ([]byte, error) {
	text := arg
	if b, err := os.ReadFile(arg); err == nil {
		text = strings.TrimSpace(string(b))
		if strings.Contains(text, "PRIVATE KEY") {
			return nil, usageErrorf("--key %s is a private key: give the public key (electhost keygen printed it), never the private one", arg)
		}
		if f := strings.Fields(text); len(f) == 2 {
			if f[0] != member {
				return nil, usageErrorf("--key %s is the key of %q, not of %q", arg, f[0], member)
			}
			text = f[1]
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, usageErrorf("--key %s: %v", arg, err)
	}
	k, err := decodeB64(text)
	if err != nil || len(k) != ed25519.PublicKeySize {
		return nil, usageErrorf("--key %s: neither a file nor a base64 ed25519 public key (%d bytes; electhost keygen --id %s prints one)", arg, ed25519.PublicKeySize, member)
	}
	return k, nil
}

// inConfig reports whether id is in the configuration the status shows.
func inConfig(cs core.Status, id string) bool {
	return slices.ContainsFunc(cs.Members, func(m core.MemberStatus) bool { return m.ID == id })
}
