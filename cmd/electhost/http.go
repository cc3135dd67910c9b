package main

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/hostfuncs"
	"github.com/electcore/electcore/internal/metrics"
)

// statusJSON is the body of GET /status.
type statusJSON struct {
	Group            string         `json:"group"`
	ID               string         `json:"id"`
	Mode             string         `json:"mode"`
	Role             string         `json:"role"`
	Leader           string         `json:"leader"`
	Term             uint64         `json:"term"`
	Vote             string         `json:"vote,omitempty"`
	Priority         uint32         `json:"priority"`
	LeaseRemainingMs int64          `json:"lease_remaining_ms"` // > 0 while this leader holds a lease
	Members          []memberJSON   `json:"members"`
	Elections        uint64         `json:"elections"`
	Received         uint64         `json:"received"`
	Rejected         uint64         `json:"rejected"`
	Auth             *authJSON      `json:"auth,omitempty"` // with --auth: the refusals by reason (all in rejected)
	LeaderCommand    *leaderCmdJSON `json:"leader_command,omitempty"`
}

type authJSON struct {
	Mode     string `json:"mode"`
	Epoch    uint64 `json:"epoch"`
	Unsigned uint64 `json:"unsigned"`
	Forged   uint64 `json:"forged"`
	Replayed uint64 `json:"replayed"`
}

type memberJSON struct {
	ID       string `json:"id"`
	Priority uint32 `json:"priority"`
	// LastHeardMsAgo is -1 for a member never heard.
	LastHeardMsAgo int64 `json:"last_heard_ms_ago"`
}

type leaderCmdJSON struct {
	Running bool   `json:"running"`
	Term    uint64 `json:"term,omitempty"`
}

func toStatusJSON(cs core.Status, now int64, lead *leadership) statusJSON {
	s := statusJSON{
		Group: cs.Group, ID: cs.ID, Mode: string(cs.Mode), Role: cs.Role.String(), Leader: cs.Leader,
		Term: cs.Term, Vote: cs.Vote, Priority: cs.Priority,
		Elections: cs.Elections, Received: cs.Received, Rejected: cs.Rejected,
		Members: make([]memberJSON, 0, len(cs.Members)),
	}
	if cs.Auth != "" && cs.Auth != core.AuthOff {
		s.Auth = &authJSON{Mode: string(cs.Auth), Epoch: cs.Epoch, Unsigned: cs.Unsigned, Forged: cs.Forged, Replayed: cs.Replayed}
	}
	if cs.Role == core.RoleLeader && cs.LeaseUntil > now {
		s.LeaseRemainingMs = cs.LeaseUntil - now
	}
	for _, m := range cs.Members {
		ago := int64(-1)
		if m.LastHeard > 0 {
			ago = max(0, now-m.LastHeard)
		}
		s.Members = append(s.Members, memberJSON{ID: m.ID, Priority: m.Priority, LastHeardMsAgo: ago})
	}
	if lead != nil && lead.sup != nil {
		term, running := lead.running()
		s.LeaderCommand = &leaderCmdJSON{Running: running, Term: term}
	}
	return s
}

// newHTTPHandler serves /healthz (the process is up and has not shut down),
// /readyz (joined and a leader is known), /status (JSON) and /metrics.
func newHTTPHandler(st *agentState, status func() (core.Status, bool), clock hostfuncs.Clock, mets *metrics.Metrics, lead *leadership) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		st.mu.Lock()
		closed := st.closed
		st.mu.Unlock()
		if closed {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		st.mu.Lock()
		joined, closed := st.joined, st.closed
		st.mu.Unlock()
		if !joined || closed {
			http.Error(w, "not joined", http.StatusServiceUnavailable)
			return
		}
		cs, ok := status()
		if !ok || cs.Leader == "" {
			http.Error(w, "no leader known", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok: leader " + cs.Leader + "\n"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		cs, ok := status()
		if !ok {
			http.Error(w, "not joined", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(toStatusJSON(cs, clock.NowMs(), lead))
	})
	mux.Handle("GET /metrics", mets.Handler())
	return http.TimeoutHandler(mux, 10*time.Second, "timeout\n")
}
