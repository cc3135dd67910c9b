package host

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/transport/nats"
	"github.com/electcore/electcore/transport/natstest"
	"github.com/electcore/electcore/transport/transporttest"
)

// multiAgent is one agent in many groups over its own NATS connection.
type multiAgent struct {
	id  string
	tr  *nats.Transport
	ag  *Agent
	els []*Election
}

func startMultiAgents(t *testing.T, url string, ids []string, groups map[string][]string, old map[string]bool) []*multiAgent {
	t.Helper()
	ctx := context.Background()
	var mas []*multiAgent
	for _, id := range ids {
		tr, err := nats.New(nats.Options{URL: url, Name: id, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ag, err := NewNativeAgent(ctx, AgentConfig{Transport: tr, Logger: discardLogger(), NoCoalescing: old[id]})
		if err != nil {
			t.Fatal(err)
		}
		ma := &multiAgent{id: id, tr: tr, ag: ag}
		for g := 0; g < len(groups); g++ {
			name := fmt.Sprintf("g%02d", g)
			members := groups[name]
			if !slices.Contains(members, id) {
				continue
			}
			// Slower than fastConfig: sixty memberships in one test
			// process on a loaded machine.
			el, err := ag.Join(ctx, core.Config{ID: id, Group: name, Members: members, HeartbeatMs: 50, ElectionTimeoutMs: 500}, Callbacks{})
			if err != nil {
				t.Fatal(err)
			}
			ma.els = append(ma.els, el)
		}
		mas = append(mas, ma)
		t.Cleanup(func() { ag.Close(ctx); tr.Close() })
	}
	return mas
}

// allLed waits until every group of the live agents has a leader every
// live member of it knows, none of them dead.
func allLed(t *testing.T, mas []*multiAgent, dead string) map[string]int {
	t.Helper()
	var leaders map[string]int
	transporttest.WaitFor(t, "every group led and known", func() bool {
		known := map[string]string{}
		leaders = map[string]int{}
		for _, ma := range mas {
			if ma.id == dead {
				continue
			}
			for _, el := range ma.els {
				st := el.Status()
				if st.Leader == "" || st.Leader == dead {
					return false
				}
				if l, ok := known[st.Group]; ok && l != st.Leader {
					return false
				}
				known[st.Group] = st.Leader
			}
		}
		for _, l := range known {
			leaders[l]++
		}
		return true
	})
	return leaders
}

// Over a real NATS server, three agents in twenty groups (more than
// alignGroups) settle, then send their heartbeats and acks in envelopes;
// when the agent leading the most groups is cut off, the two others lead
// every group again.
func TestCoalescedGroupsOverNATS(t *testing.T) {
	url, _ := natstest.Start(t)
	ids := []string{"a", "b", "c"}
	groups := map[string][]string{}
	for g := range 20 {
		groups[fmt.Sprintf("g%02d", g)] = ids
	}
	mas := startMultiAgents(t, url, ids, groups, nil)
	leaders := allLed(t, mas, "")
	for _, ma := range mas {
		before := ma.ag.Stats()
		transporttest.WaitFor(t, ma.id+" sends and receives envelopes", func() bool {
			st := ma.ag.Stats()
			return st.Coalesced > before.Coalesced && st.CoalescedIn > before.CoalescedIn
		})
	}
	// Every group has two followers, each hearing the other's acks: at
	// least two agents follow a group and thin those acks.
	transporttest.WaitFor(t, "two agents thin the other follower's acks", func() bool {
		n := 0
		for _, ma := range mas {
			if ma.ag.Stats().Thinned > 0 {
				n++
			}
		}
		return n >= 2
	})
	busiest := mas[0]
	for _, ma := range mas {
		if leaders[ma.id] > leaders[busiest.id] {
			busiest = ma
		}
	}
	t.Logf("leaders %v; cutting %s off", leaders, busiest.id)
	busiest.tr.Close() // as a crash: nothing more from it, no hand-off
	after := allLed(t, mas, busiest.id)
	t.Logf("leaders after: %v", after)
}

// An older agent (one that reads no envelope) in a group keeps every
// message of that group on the group's topic; groups the others share
// without it are coalesced, and every group is led and known.
func TestCoalescingLeavesAnOldPeersGroupsAlone(t *testing.T) {
	url, _ := natstest.Start(t)
	ids := []string{"a", "b", "c"}
	groups := map[string][]string{}
	for g := range 20 {
		if g%2 == 0 {
			groups[fmt.Sprintf("g%02d", g)] = ids
		} else {
			groups[fmt.Sprintf("g%02d", g)] = []string{"a", "b"}
		}
	}
	mas := startMultiAgents(t, url, ids, groups, map[string]bool{"c": true})
	allLed(t, mas, "")
	a := mas[0]
	before := a.ag.Stats()
	transporttest.WaitFor(t, "a and b coalesce their own groups", func() bool {
		st := a.ag.Stats()
		return st.Coalesced > before.Coalesced && st.CoalescedIn > before.CoalescedIn
	})
	if st := mas[2].ag.Stats(); st.Coalesced != 0 || st.CoalescedIn != 0 {
		t.Fatalf("the old agent coalesced: %+v", st)
	}
	// Every group with c still hears the others at c, leader or follower:
	// over five election timeouts of c's time both are heard on and on,
	// and nobody campaigns.
	c := mas[2]
	// First the hand-offs to the best member by priority, if any.
	transporttest.WaitFor(t, "each of c's groups led by its best member", func() bool {
		for _, el := range c.els {
			st := el.Status()
			best := st.Members[0]
			for _, m := range st.Members {
				if m.Priority > best.Priority {
					best = m
				}
			}
			if st.Leader != best.ID {
				return false
			}
		}
		return true
	})
	st0 := make([]core.Status, len(c.els))
	for i, el := range c.els {
		st0[i] = el.Status()
	}
	heardSince := func(st, was core.Status) bool {
		for j, m := range st.Members {
			if m.ID != "c" && m.LastHeard < was.Members[j].LastHeard+2500 {
				return false
			}
		}
		return true
	}
	transporttest.WaitFor(t, "c hears the others for five election timeouts", func() bool {
		for i, el := range c.els {
			if !heardSince(el.Status(), st0[i]) {
				return false
			}
		}
		return true
	})
	for i, el := range c.els {
		if st := el.Status(); st.Elections != st0[i].Elections || st.Term != st0[i].Term || st.Leader != st0[i].Leader {
			t.Errorf("%s at c: %s term %d, %d campaigns; was %s term %d, %d", st.Group, st.Leader, st.Term, st.Elections, st0[i].Leader, st0[i].Term, st0[i].Elections)
		}
	}
}
