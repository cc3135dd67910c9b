package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/nats"
	"github.com/electcore/electcore/transport/natstest"
	"github.com/electcore/electcore/transport/transporttest"
)

// JoinAll over NATS makes every group's subscription (and the peer topic)
// known to the server with one round trip, not one per group, and each
// group is ready when it returns: a member joining later with Join
// elects a leader with it in every group.
func TestJoinAllOneRoundTrip(t *testing.T) {
	url, _ := natstest.Start(t)
	proxy := natstest.CountPings(t, url)
	ctx := context.Background()
	ids := []string{"a", "b"}
	const n = 200
	var agents []*Agent
	for _, id := range ids {
		u := url
		if id == "a" {
			u = proxy.URL
		}
		tr, err := nats.New(nats.Options{URL: u, Name: id, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ag, err := NewNativeAgent(ctx, AgentConfig{Transport: tr, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		agents = append(agents, ag)
		t.Cleanup(func() { ag.Close(ctx); tr.Close() })
	}
	cfg := func(id string, i int) core.Config {
		return core.Config{ID: id, Group: fmt.Sprintf("g%03d", i), Members: ids, HeartbeatMs: 100, ElectionTimeoutMs: 1000, Priority: map[string]uint32{"a": 1, "b": 2}[id]}
	}
	specs := make([]JoinSpec, n)
	for i := range specs {
		specs[i] = JoinSpec{Config: cfg("a", i)}
	}
	before := proxy.Pings()
	els, errs := agents[0].JoinAll(ctx, specs)
	if pings := proxy.Pings() - before; pings != 1 {
		t.Fatalf("JoinAll of %d groups took %d round trips to the server, want 1", n, pings)
	}
	for i, err := range errs {
		if err != nil || els[i] == nil {
			t.Fatalf("group %d: %v", i, err)
		}
	}
	for i := range n {
		if _, err := agents[1].Join(ctx, cfg("b", i), Callbacks{}); err != nil {
			t.Fatal(err)
		}
	}
	// 200 groups of two elect and hand over to b: under -race on a loaded
	// machine that takes many election timeouts, and leases lost to load
	// move some groups' leadership meanwhile, so all 200 led by b at one
	// instant may not come (a CI race lane at load ~36 did not see it
	// within 2 minutes). Each group counts once a knew b as its leader.
	ledByB := make([]bool, n)
	transporttest.WaitForWithin(t, 2*time.Minute, "every group led by b and known by a", func() bool {
		all := true
		for i, el := range els {
			ledByB[i] = ledByB[i] || el.Status().Leader == "b"
			all = all && ledByB[i]
		}
		return all
	})
}

// JoinAll answers each spec on its own: a bad config, a group already
// joined (also twice in one call) or a drained bully group fail alone,
// and the others join.
func TestJoinAllErrorsPerGroup(t *testing.T) {
	ctx := context.Background()
	tr := &quietTransport{}
	ag, err := NewNativeAgent(ctx, AgentConfig{Transport: tr, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close(ctx)
	if _, err := ag.Join(ctx, core.Config{ID: "a", Group: "old", Members: []string{"a", "b"}}, Callbacks{}); err != nil {
		t.Fatal(err)
	}
	ok := func(g string) JoinSpec {
		return JoinSpec{Config: core.Config{ID: "a", Group: g, Members: []string{"a", "b"}}}
	}
	specs := []JoinSpec{
		ok("g1"),
		{Config: core.Config{ID: "a", Group: "bad", Members: []string{"b"}}}, // not a member
		ok("old"),
		ok("g2"),
		ok("g2"),
		{Config: core.Config{ID: "a", Group: "bully", Members: []string{"a", "b"}, Mode: core.ModeBully}, Drained: true},
		{Config: core.Config{ID: "a", Group: "drained", Members: []string{"a", "b"}}, Drained: true},
	}
	els, errs := ag.JoinAll(ctx, specs)
	want := []string{"", "bad", "already joined", "", "already joined", "bully mode", ""}
	for i, w := range want {
		switch {
		case w == "" && (errs[i] != nil || els[i] == nil):
			t.Errorf("%s: %v, want joined", specs[i].Config.Group, errs[i])
		case w != "" && (errs[i] == nil || !strings.Contains(errs[i].Error(), w) || els[i] != nil):
			t.Errorf("%s: %v, want an error with %q", specs[i].Config.Group, errs[i], w)
		}
	}
	if !els[6].Drained() {
		t.Error("the group joined with Drained is not drained")
	}
	if st := ag.Stats(); st.Groups != 4 {
		t.Errorf("%d groups joined, want 4 (old, g1, g2, drained)", st.Groups)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, g := range []string{"g1", "g2", "drained"} {
		if tr.subs[core.Topic(g)] == nil {
			t.Errorf("%s not subscribed", g)
		}
	}
	if tr.subs[core.Topic("bully")] != nil {
		t.Error("a refused join left its subscription")
	}
}

// errTransport fails every subscription.
type errTransport struct{ quietTransport }

func (e *errTransport) Subscribe(ctx context.Context, topic string, deliver func(transport.Message)) error {
	return errors.New("no")
}

// A join whose subscription fails is undone: nothing of it stays.
func TestJoinAllSubscribeFails(t *testing.T) {
	ctx := context.Background()
	ag, err := NewNativeAgent(ctx, AgentConfig{Transport: &errTransport{}, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer ag.Close(ctx)
	els, errs := ag.JoinAll(ctx, []JoinSpec{{Config: core.Config{ID: "a", Group: "g", Members: []string{"a", "b"}}}})
	if els[0] != nil || errs[0] == nil || !strings.Contains(errs[0].Error(), "subscribe") {
		t.Fatalf("got %v, %v", els[0], errs[0])
	}
	if st := ag.Stats(); st.Groups != 0 {
		t.Fatalf("%d groups left behind", st.Groups)
	}
}
