package main

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/electcore/electcore/cmd/electhost/internal/metrics"
	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/host"
)

// statusJSON is the body of GET /status.
type statusJSON struct {
	Group            string `json:"group"`
	ID               string `json:"id"`
	Mode             string `json:"mode"`
	Role             string `json:"role"`
	Leader           string `json:"leader"`
	Term             uint64 `json:"term"`
	Vote             string `json:"vote,omitempty"`
	Priority         uint32 `json:"priority"`
	LeaseRemainingMs int64  `json:"lease_remaining_ms"` // > 0 while this leader holds a lease
	// Value is the leader's value (its run --value, or its last proclaim),
	// as this agent last heard it from the leader of term; "" while none is
	// known. ValueVersion orders the values of that term.
	Value        string       `json:"value"`
	ValueVersion uint64       `json:"value_version,omitempty"`
	Members      []memberJSON `json:"members"`
	// The configuration (quorum mode): its version, whether it is known to
	// be committed, and whether this agent is in it (a voter).
	ConfTerm      uint64         `json:"conf_term"`
	ConfIndex     uint64         `json:"conf_index"`
	ConfCommitted bool           `json:"conf_committed"`
	Voter         bool           `json:"voter"`
	Drained       bool           `json:"drained"`          // electhost drain: this agent does not lead
	Health        *healthJSON    `json:"health,omitempty"` // with --check or --check-http
	Elections     uint64         `json:"elections"`
	Received      uint64         `json:"received"`
	Rejected      uint64         `json:"rejected"`
	Auth          *authJSON      `json:"auth,omitempty"` // with --auth: the refusals by reason (all in rejected)
	LeaderCommand *leaderCmdJSON `json:"leader_command,omitempty"`
	Ready         bool           `json:"ready"`         // what /readyz answers
	ReadyReason   string         `json:"ready_reason"`  // why (or why not)
	DuplicateIDs  uint64         `json:"duplicate_ids"` // reports of an id spoken by two processes
	// Received messages dropped unseen (too many waiting for the core), of
	// them those in a member's name (its own queue full), and those the
	// transport dropped before (NATS: slow consumer).
	Dropped            uint64 `json:"dropped"`
	DroppedFromMembers uint64 `json:"dropped_from_members"`
	TransportDropped   uint64 `json:"transport_dropped"`
	// Heartbeats and acks a newer one replaced while the agent was behind
	// (host.Stats.Superseded).
	Superseded      uint64 `json:"superseded"`
	LastDuplicateID string `json:"last_duplicate_id,omitempty"`
}

// healthJSON is the health check's verdict: unhealthy, the agent does not
// lead; reason is the last failure.
type healthJSON struct {
	Healthy bool   `json:"healthy"`
	Reason  string `json:"reason,omitempty"`
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
	// Containment: how the command's processes are found and stopped
	// (cgroup, subreaper or process-group); ContainmentDetail: the cgroup,
	// or why a better one is unavailable.
	Containment       string `json:"containment"`
	ContainmentDetail string `json:"containment_detail,omitempty"`
}

func toStatusJSON(cs core.Status, now int64, lead *leadership) statusJSON {
	s := statusJSON{
		Group: cs.Group, ID: cs.ID, Mode: string(cs.Mode), Role: cs.Role.String(), Leader: cs.Leader,
		Term: cs.Term, Vote: cs.Vote, Priority: cs.Priority,
		Elections: cs.Elections, Received: cs.Received, Rejected: cs.Rejected,
		Members:  make([]memberJSON, 0, len(cs.Members)),
		ConfTerm: cs.ConfTerm, ConfIndex: cs.ConfIndex, ConfCommitted: cs.ConfCommitted, Voter: cs.Voter,
		Value: cs.Value, ValueVersion: cs.ValueVersion,
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
		c, detail := lead.sup.Containment()
		s.LeaderCommand = &leaderCmdJSON{Running: running, Term: term, Containment: string(c), ContainmentDetail: detail}
	}
	return s
}

// drainedWords is what /readyz and /status add for a drained agent: it is
// still ready (a member that follows a current leader), but will not lead.
const drainedWords = "drained: this agent does not lead (electhost undrain ends it)"

// readiness is /readyz's judgement: joined, and a leader known whose
// leadership is current as far as this agent can tell. This agent leading:
// in quorum mode its lease must be running (bully has none). Another member
// leading: it must have been heard within the election timeout, the silence
// after which a follower stops trusting it and campaigns. An agent whose
// term is MaxTerm is never ready: it can hold no election. A leader merely
// remembered (a broker outage, a pre-candidate) is not ready. In quorum mode
// an agent outside the configuration (started with --join and not yet
// added, or removed) is not ready either: it takes no part in the group.
func readiness(cs core.Status, now int64, electionTimeoutMs int64) (bool, string) {
	switch {
	case cs.Term >= core.MaxTerm:
		return false, "the term space is spent (term " + strconv.FormatUint(cs.Term, 10) + "): this agent can hold no election; stop it and run electhost reset-state (terms, the fencing token, restart from 0)"
	case cs.Mode == core.ModeQuorum && !cs.Voter:
		return false, "not in the configuration (waiting to be added, or removed): a non-voter"
	case cs.Leader == "":
		return false, "no leader known"
	case cs.Leader == cs.ID && cs.Role == core.RoleLeader:
		if cs.Mode == core.ModeQuorum && cs.LeaseUntil <= now {
			return false, "leading term " + strconv.FormatUint(cs.Term, 10) + " without a current lease (no quorum heard)"
		}
		return true, "this agent leads term " + strconv.FormatUint(cs.Term, 10)
	}
	for _, m := range cs.Members {
		if m.ID != cs.Leader {
			continue
		}
		if m.LastHeard > 0 && now-m.LastHeard <= electionTimeoutMs {
			return true, "leader " + cs.Leader + " heard " + strconv.FormatInt(now-m.LastHeard, 10) + "ms ago"
		}
		if m.LastHeard <= 0 {
			return false, "leader " + cs.Leader + " never heard"
		}
		return false, "leader " + cs.Leader + " last heard " + strconv.FormatInt(now-m.LastHeard, 10) + "ms ago, over the election timeout (" + strconv.FormatInt(electionTimeoutMs, 10) + "ms)"
	}
	return false, "leader " + cs.Leader + " is not a known member"
}

// readiness is readiness, except that a recent report of another process
// speaking with this agent's id makes it not ready (dupGuard).
func (st *agentState) readiness(cs core.Status, now int64, electionTimeoutMs int64) (bool, string) {
	if st.dup != nil {
		if why := st.dup.unready(time.Now()); why != "" {
			return false, why
		}
	}
	ready, why := readiness(cs, now, electionTimeoutMs)
	return ready, why + st.authWords(time.Duration(electionTimeoutMs)*time.Millisecond)
}

// authWords is what /readyz adds while messages fail authentication (the
// last within two election timeouts): from whom, and the likely cause.
func (st *agentState) authWords(et time.Duration) string {
	if st.authFailure == nil {
		return ""
	}
	f, ok := st.authFailure()
	if !ok || time.Since(f.At) > 2*et {
		return ""
	}
	return "; messages from " + f.From + " fail authentication (" + f.Reason + "): " + f.Cause + "; check --key and --members-file on both"
}

// newHTTPHandler serves /healthz (the process is up and has not shut down),
// /readyz (joined and a current leader known: readiness), /status (JSON),
// /metrics and POST /resign (ctl, with its bearer token).
func newHTTPHandler(st *agentState, status func() (core.Status, bool), gt *gate, clock host.Clock, mets *metrics.Metrics, lead *leadership, ctl *controller) http.Handler {
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
		if !ok {
			http.Error(w, "not joined", http.StatusServiceUnavailable)
			return
		}
		ready, why := st.readiness(cs, clock.NowMs(), ctl.et.Milliseconds())
		why = gt.words(why)
		if !ready {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok: " + why + "\n"))
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
		now := clock.NowMs()
		sj := toStatusJSON(cs, now, lead)
		sj.Ready, sj.ReadyReason = st.readiness(cs, now, ctl.et.Milliseconds())
		sj.ReadyReason = gt.words(sj.ReadyReason)
		var checked, healthy bool
		var failure string
		sj.Drained, checked, healthy, failure = gt.state()
		if checked {
			sj.Health = &healthJSON{Healthy: healthy, Reason: failure}
		}
		st.mu.Lock()
		sj.DuplicateIDs, sj.LastDuplicateID = st.duplicates, st.lastDup
		stats := st.stats
		st.mu.Unlock()
		if stats != nil {
			as := stats()
			sj.Dropped, sj.DroppedFromMembers, sj.TransportDropped = as.Dropped, as.DroppedFromMembers, as.Transport.Dropped
			sj.Superseded = as.Superseded
		}
		enc.Encode(sj)
	})
	mux.Handle("GET /metrics", mets.Handler())
	mux.Handle("POST /resign", ctl.handler(true))
	mux.Handle("POST /proclaim", ctl.proclaimHandler(true))
	return http.TimeoutHandler(mux, 10*time.Second, "timeout\n")
}
