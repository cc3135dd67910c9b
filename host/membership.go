package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/electcore/electcore/core"
)

// ErrRefused is wrapped by the error of a join or command that the core
// refused (it echoed the request's id in an EventRejected), or that the
// group would ignore (a membership change asked of an agent outside the
// configuration): nothing changed.
var ErrRefused = errors.New("refused")

// ConfigChange is a quorum group's configuration as Callbacks.OnConfig
// reports it.
type ConfigChange struct {
	Members []string // sorted
	Index   uint64   // the configuration's index (its version's counter)
	// Committed: a majority of Members holds it, so the change is done.
	// Otherwise this leader proposed it, or this member learnt it and has
	// not yet heard that it committed.
	Committed bool
	Reason    string // the core's: "proposed add x", "adopted from y", "committed"
}

// confCommittedReason is the Reason of the EventConfig that reports a
// configuration committed (core.EventConfig's documented reasons).
const confCommittedReason = "committed"

// AddMember asks the group to add member id and waits until a committed
// configuration lists it, or ctx ends. key is id's ed25519 public key when
// the group uses ed25519 (nil otherwise). Any member may ask (a follower
// forwards the request to the leader); one change is made at a time. It
// returns at once if the committed configuration already lists id; an
// error wrapping ErrRefused if this member's core refuses the request, or
// this agent is outside the configuration; ctx's error if the change was
// not seen committed in time — it may still commit: Status tells. A request
// is not sent while the configuration already has the change, and is sent
// again when it may have been lost: an election timeout after a later
// leader is known (a forwarded request dies with its leader), or two
// election timeouts after it was sent (the leader refuses a change while
// another waits, and reports that in its own log only).
func (e *Election) AddMember(ctx context.Context, id string, key []byte) error {
	return e.changeMembers(ctx, core.CmdAddMember, id, key)
}

// RemoveMember asks the group to remove member id and waits until a
// committed configuration no longer lists it, as AddMember. Removing the
// leader first hands its leadership to another member, which then removes
// it. A removed agent keeps running as a non-voter: it never campaigns and
// is not counted, until a later change adds it back.
func (e *Election) RemoveMember(ctx context.Context, id string) error {
	return e.changeMembers(ctx, core.CmdRemoveMember, id, nil)
}

func (e *Election) changeMembers(ctx context.Context, kind core.CommandKind, id string, key []byte) error {
	wantIn := kind == core.CmdAddMember
	done := func(st core.Status) bool {
		return slices.ContainsFunc(st.Members, func(m core.MemberStatus) bool { return m.ID == id }) == wantIn
	}
	timing, _ := e.cfg.WithTimingDefaults() // Join validated it
	hb := time.Duration(timing.HeartbeatMs) * time.Millisecond
	et := time.Duration(timing.ElectionTimeoutMs) * time.Millisecond
	tick := time.NewTicker(hb)
	defer tick.Stop()
	left := func() error { return fmt.Errorf("host: group %q: left while asking to %s %s", e.cfg.Group, kind, id) }

	st := e.Status()
	if !done(st) && st.Mode == core.ModeQuorum && !st.Voter {
		// Its request would be forwarded, and the members refuse the
		// messages of an agent outside their configuration.
		return fmt.Errorf("host: %s %s %w: this agent (%s) is not in the configuration (waiting to be added, or removed): ask a member's agent",
			kind, id, ErrRefused, e.cfg.ID)
	}
	// A change already made, or already under way, is not asked for (again):
	// the leader would refuse it ("already a member"), and a retry after a
	// timeout must be safe.
	var sentTerm uint64
	var sentAt, laterLeader time.Time
	send := func() error {
		// Only a leader takes a change, and a member that knows none
		// refuses it: wait for one (an election in progress) first.
		for st.Mode == core.ModeQuorum && st.Leader == "" {
			select {
			case <-tick.C:
			case <-e.left:
				return left()
			case <-ctx.Done():
				return fmt.Errorf("host: %s %s: no leader known: %w", kind, id, ctx.Err())
			}
			st = e.Status()
		}
		select {
		case <-e.left:
			return left()
		default:
		}
		sentTerm, sentAt, laterLeader = st.Term, time.Now(), time.Time{}
		return e.a.submit(ctx, &request{cmd: &core.Command{Kind: kind, Group: e.cfg.Group, Target: id, Key: slices.Clone(key)}})
	}
	if !done(st) {
		if err := send(); err != nil {
			return err
		}
	}
	for {
		changed := e.confSignal()
		if st = e.Status(); st.ConfCommitted && done(st) {
			return nil
		}
		// A request forwarded to a leader that lost its leadership is
		// lost with it, and a leader refuses a change while another one
		// waits: ask again once a later leader had an election timeout to
		// settle, or after two election timeouts in one term.
		if !sentAt.IsZero() && !done(st) && st.Voter && st.Leader != "" {
			if st.Term > sentTerm && laterLeader.IsZero() {
				laterLeader = time.Now()
			}
			if !laterLeader.IsZero() && time.Since(laterLeader) >= et || time.Since(sentAt) >= 2*et {
				e.a.logger.Debug("membership change not seen yet; asking again", "group", e.cfg.Group, "op", kind.String(), "member", id, "leader", st.Leader, "term", st.Term)
				if err := send(); err != nil {
					return err
				}
			}
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-e.left:
			return left()
		case <-ctx.Done():
			return fmt.Errorf("host: %s %s: not seen committed (configuration %s, index %d, committed %v); it may still commit, or the leader refused it (its log says why): %w",
				kind, id, strings.Join(memberIDs(st), ","), st.ConfIndex, st.ConfCommitted, ctx.Err())
		}
	}
}

func memberIDs(st core.Status) []string {
	ids := make([]string, len(st.Members))
	for i, m := range st.Members {
		ids[i] = m.ID
	}
	return ids
}

// confSignal returns a channel closed at the next configuration event.
func (e *Election) confSignal() <-chan struct{} {
	e.confMu.Lock()
	defer e.confMu.Unlock()
	if e.confChanged == nil {
		e.confChanged = make(chan struct{})
	}
	return e.confChanged
}

// config handles an EventConfig (on the agent's loop).
func (e *Election) config(ev core.Event) {
	e.confMu.Lock()
	if e.confChanged != nil {
		close(e.confChanged)
		e.confChanged = nil
	}
	e.confMu.Unlock()
	c := ConfigChange{Members: slices.Clone(ev.Members), Index: ev.ConfIndex, Committed: ev.Reason == confCommittedReason, Reason: ev.Reason}
	e.a.logger.Info("configuration", "group", e.cfg.Group, "id", e.cfg.ID, "members", strings.Join(c.Members, ","),
		"conf_index", c.Index, "committed", c.Committed, "reason", c.Reason)
	if f := e.cb.OnConfig; f != nil {
		e.disp.do(func() { f(c) })
	}
}
