package host

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/mem"
	"github.com/electcore/electcore/transport/transporttest"
)

// confRecorder keeps what OnConfig reported.
type confRecorder struct {
	mu        sync.Mutex
	committed [][]string
}

func (r *confRecorder) onConfig(c ConfigChange) {
	if c.Committed {
		r.mu.Lock()
		r.committed = append(r.committed, c.Members)
		r.mu.Unlock()
	}
}

func (r *confRecorder) last() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.committed) == 0 {
		return nil
	}
	return r.committed[len(r.committed)-1]
}

// TestMembershipGrowShrink: three agents (native and wasm mixed) grow to
// five — two agents started with AwaitConfig, added one at a time, once
// through a follower and once through the leader — and shrink back to three,
// removing the leader on the way; every agent, the removed ones included,
// ends with the same committed configuration, and the removed ones are
// non-voters. Each agent's state is in a file store: a restart with the old
// flags comes back with the configuration it persisted.
func TestMembershipGrowShrink(t *testing.T) {
	ctx := context.Background()
	bus := mem.NewBus(mem.Options{Seed: 3, DelayMin: time.Millisecond, DelayMax: 3 * time.Millisecond})
	defer bus.Close()
	rt := testRuntime(t)
	founders := []string{"a", "b", "c"}
	type member struct {
		*testAgent
		conf  *confRecorder
		store *statestore.Store
		dir   string
	}
	all := map[string]*member{}
	var tas []*testAgent
	start := func(i int, id string, await bool) *member {
		t.Helper()
		m := all[id]
		if m == nil {
			m = &member{testAgent: &testAgent{id: id, tr: bus.Transport(id)}, dir: t.TempDir()}
			all[id] = m
			tas = append(tas, m.testAgent)
		}
		m.rec = &recorder{id: id, leading: map[uint64]bool{}}
		m.conf = &confRecorder{}
		var err error
		if m.store, err = statestore.Open(m.dir); err != nil {
			t.Fatal(err)
		}
		cfg := AgentConfig{Transport: m.tr, Store: m.store, Logger: discardLogger()}
		if i%2 == 0 {
			m.ag, err = NewNativeAgent(ctx, cfg)
		} else {
			m.ag, err = rt.NewAgent(ctx, cfg)
		}
		if err != nil {
			t.Fatal(err)
		}
		c := fastConfig(id, "g", founders)
		c.AwaitConfig = await
		cb := m.rec.callbacks()
		cb.OnConfig = m.conf.onConfig
		if m.el, err = m.ag.Join(ctx, c, cb); err != nil {
			t.Fatal(err)
		}
		return m
	}
	defer func() {
		for _, m := range all {
			m.ag.Close(ctx)
			m.store.Close()
		}
	}()
	for i, id := range founders {
		start(i, id, false)
	}
	start(3, "d", true)
	start(4, "e", true)
	if st := all["d"].el.Status(); st.Voter {
		t.Fatalf("d, waiting to be added, is a voter: %+v", st)
	}
	if err := all["d"].el.AddMember(ctx, "e", nil); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "not in the configuration") {
		t.Fatalf("a change asked of an agent outside the configuration: %v", err)
	}
	leader := waitLeader(t, tas, nil, "")
	var follower *testAgent
	for _, id := range founders {
		if id != leader.id {
			follower = all[id].testAgent
			break
		}
	}

	// change makes a change through via. A refusal for want of a leader
	// (at 20 ms / 100 ms a -race run on a loaded runner loses leases: a CI
	// pair at load 33 refused "no leader known") or of a live successor
	// for a leader removing itself (a CI pair at load 18: its followers'
	// acks of the configuration just committed were late) is retried once
	// the agents agree on a leader and its members hold its configuration,
	// committed; at most three times in all.
	gone := map[string]bool{} // removed: no longer asked who leads
	// A retry can also find the change it asked for still waiting at the
	// leader (a CI pair at load 31: "no leader known", then "another change
	// is waiting (remove a)"): the settle wait lets it commit, and the next
	// try returns at once.
	retryable := func(err error) bool {
		return errors.Is(err, ErrRefused) && (strings.Contains(err.Error(), "no leader known") ||
			strings.Contains(err.Error(), "no live member to hand leadership to") ||
			strings.Contains(err.Error(), "another change is waiting"))
	}
	settled := func() {
		t.Helper()
		transporttest.WaitForWithin(t, time.Minute, "every member to hold the leader's configuration, committed", func() bool {
			l := waitLeader(t, tas, gone, "").el.Status()
			for _, id := range memberIDs(l) {
				if st := all[id].el.Status(); st.ConfIndex != l.ConfIndex || !st.ConfCommitted {
					return false
				}
			}
			return true
		})
	}
	change := func(via *testAgent, add bool, id string) {
		t.Helper()
		t0 := time.Now()
		var err error
		for try := 1; ; try++ {
			// A give-up, not a bound: the change returns once committed.
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			if add {
				err = via.el.AddMember(cctx, id, nil)
			} else {
				err = via.el.RemoveMember(cctx, id)
			}
			cancel()
			if err == nil || !retryable(err) || try == 3 {
				break
			}
			t.Logf("change %s (add %v) via %s: %v; again once a leader is agreed and its configuration held", id, add, via.id, err)
			settled()
		}
		if err != nil {
			t.Fatalf("change %s (add %v) via %s: %v", id, add, via.id, err)
		}
		st := via.el.Status()
		t.Logf("add=%v %s via %s: committed in %v, configuration %v index %d", add, id, via.id, time.Since(t0).Round(time.Millisecond), memberIDs(st), st.ConfIndex)
	}
	change(follower, true, "d") // forwarded to the leader
	change(waitLeader(t, tas, nil, ""), true, "e")
	// The change returned once the leader saw it committed; d hears of it
	// from the leader's next message.
	transporttest.WaitForWithin(t, time.Minute, "d, added, to be a voter in a configuration of 5", func() bool {
		st := all["d"].el.Status()
		return st.Voter && len(st.Members) == 5
	})
	// Asking again for a change already made returns at once.
	if err := follower.el.AddMember(ctx, "d", nil); err != nil {
		t.Fatalf("adding d again: %v", err)
	}

	// Remove the leader (through itself: it hands off first), then another.
	leader = waitLeader(t, tas, nil, "")
	removed := []string{leader.id}
	change(leader, false, leader.id)
	gone[leader.id] = true
	next := waitLeader(t, tas, gone, leader.id)
	var other string
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if id != next.id && id != leader.id {
			other = id
			break
		}
	}
	removed = append(removed, other)
	// Ask d, the member added late, unless it is the leader just removed:
	// a removed agent refuses changes.
	via := all["d"].testAgent
	if slices.Contains(removed, "d") {
		via = next
	}
	change(via, false, other)

	want := []string{"a", "b", "c", "d", "e"}
	want = slices.DeleteFunc(want, func(id string) bool { return slices.Contains(removed, id) })
	for id, m := range all {
		var st core.Status
		transporttest.WaitForWithin(t, time.Minute, id+" to hold "+strings.Join(want, ",")+" committed, and report it", func() bool {
			st = m.el.Status()
			return st.ConfCommitted && slices.Equal(memberIDs(st), want) && slices.Equal(m.conf.last(), want)
		})
		if st.Voter == slices.Contains(removed, id) {
			t.Fatalf("%s: voter %v, removed %v", id, st.Voter, removed)
		}
	}
	if l := waitLeader(t, tas, map[string]bool{removed[0]: true, removed[1]: true}, ""); slices.Contains(removed, l.id) {
		t.Fatalf("removed member %s leads", l.id)
	}

	// A restart with the founders' flags comes back with the persisted
	// configuration.
	r := all[want[0]]
	if err := r.ag.Close(ctx); err != nil {
		t.Fatal(err)
	}
	r.store.Close()
	start(0, r.id, false)
	if st := r.el.Status(); !slices.Equal(memberIDs(st), want) || st.ConfIndex == 0 {
		t.Fatalf("%s restarted with configuration %v (index %d), want the persisted %v", r.id, memberIDs(st), st.ConfIndex, want)
	}
}

// TestMembershipRefusals: a request the core refuses fails at once with
// ErrRefused (matched by request id), and a change that cannot commit ends
// with ctx.
func TestMembershipRefusals(t *testing.T) {
	bus := mem.NewBus(mem.Options{})
	defer bus.Close()
	// forwarded receives the id of every agent that publishes a forwarded
	// change request.
	forwarded := make(chan string, 16)
	ids := []string{"a", "b", "c"}
	tas := startAgentsOn(t, func(id string) transport.Transport {
		return publishTap{bus.Transport(id), func(payload []byte) {
			if strings.Contains(string(payload), `"type":"change"`) {
				select {
				case forwarded <- id:
				default:
				}
			}
		}}
	}, ids, fastConfig("", "g", ids))
	leader := waitLeader(t, tas, nil, "")
	// A give-up for the whole test, not a timing: a -race run at load 30
	// spent more than 5 s before the bully's refusal (a CI proof pair).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name, id string
		key      []byte
		want     string
	}{
		{"key without ed25519", "x", make([]byte, 32), "a key is only for groups that use ed25519"},
		{"bad id", "", nil, "member"},
	} {
		err := leader.el.AddMember(ctx, tc.id, tc.key)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrRefused saying %q", tc.name, err, tc.want)
		}
	}
	if err := leader.el.RemoveMember(ctx, "nobody"); err != nil {
		t.Errorf("removing a non-member is already done: %v", err)
	}
	// A leader cut off from the others cannot commit a change. Its lease
	// (shorter than the 100 ms election timeout) may end before its loop steps
	// the request on a loaded runner: it then knows no leader and refuses
	// ("no leader known"), which is not the path under test; the cut is
	// made again under the next leader, at most three times in all.
	for try := 1; ; try++ {
		bus.Partition([]string{leader.id}, without(ids, leader.id))
		short, cancelShort := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := leader.el.AddMember(short, "z", nil)
		cancelShort()
		bus.Heal()
		if try < 3 && errors.Is(err, ErrRefused) && strings.Contains(err.Error(), "no leader known") {
			t.Logf("add without a quorum, try %d: %v (the cut-off leader's lease ended first); again", try, err)
			leader = waitLeader(t, tas, nil, "")
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrRefused) {
			t.Fatalf("add without a quorum: %v, want a deadline", err)
		}
		t.Logf("%v", err)
		break
	}

	// A forwarded request lost on the way (the asker cut off from the
	// leader) is asked again once the asker hears the group again.
	leader = waitLeader(t, tas, nil, "")
	var asker *testAgent
	for _, ta := range tas {
		if ta != leader {
			asker = ta
			break
		}
	}
	for len(forwarded) > 0 { // forget requests of the partition above
		<-forwarded
	}
	bus.Partition([]string{asker.id}, without(ids, asker.id))
	res := make(chan error, 1)
	go func() { res <- asker.el.AddMember(ctx, "y", nil) }()
	for from := ""; from != asker.id; {
		select {
		case from = <-forwarded: // the request went out, into the partition
		case err := <-res:
			t.Fatalf("a change asked while cut off from the leader ended before its request was published: %v", err)
		}
	}
	bus.Heal()
	if err := <-res; err != nil {
		t.Fatalf("a change whose request was lost: %v", err)
	}

	bully := startAgentsOn(t, func(id string) transport.Transport { return bus.Transport("bully-" + id) }, []string{"p"},
		core.Config{Group: "b", Mode: core.ModeBully, HeartbeatMs: 20, ElectionTimeoutMs: 100})
	if err := bully[0].el.AddMember(ctx, "q", nil); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "bully") {
		t.Fatalf("bully add: %v", err)
	}
}

// publishTap is a transport that shows every payload it published to seen.
type publishTap struct {
	transport.Transport
	seen func(payload []byte)
}

func (p publishTap) Publish(ctx context.Context, topic string, payload []byte) error {
	err := p.Transport.Publish(ctx, topic, payload)
	if err == nil {
		p.seen(payload)
	}
	return err
}
