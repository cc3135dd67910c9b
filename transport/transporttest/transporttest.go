// Package transporttest is for tests of Transport implementations: a
// collector of delivered messages, a poll with a generous limit, and
// Exchange, the round every transport must pass (each node receives every
// node's message once, its own included).
package transporttest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/electcore/electcore/transport"
)

// WaitFor polls cond until it holds, giving up after a minute. The limit
// is a give-up, not a bound: a passing test returns as soon as cond holds,
// and a -race run on a loaded runner (load 20-40) can take many seconds
// for what takes milliseconds on a quiet one.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitForWithin(t, time.Minute, what, cond)
}

// WaitForWithin is WaitFor with its own give-up, for a condition that needs
// many elections on a loaded machine.
func WaitForWithin(t testing.TB, giveUp time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(giveUp)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Collector gathers delivered messages in C.
type Collector struct {
	C chan transport.Message
}

// NewCollector returns a collector with room for 1024 messages.
func NewCollector() *Collector { return &Collector{C: make(chan transport.Message, 1024)} }

// Deliver is the deliver callback to subscribe with.
func (c *Collector) Deliver(m transport.Message) { c.C <- m }

// Next returns the next delivered message, failing the test if none comes
// within a minute (a give-up, as WaitFor's).
func (c *Collector) Next(t testing.TB) transport.Message {
	t.Helper()
	select {
	case m := <-c.C:
		return m
	case <-time.After(time.Minute):
		t.Fatal("no message delivered")
		return transport.Message{}
	}
}

// None asserts nothing is pending right now (no waiting: not a timing
// assertion).
func (c *Collector) None(t testing.TB) {
	t.Helper()
	select {
	case m := <-c.C:
		t.Fatalf("unexpected message %q on %q", m.Payload, m.Topic)
	default:
	}
}

// Exchange checks a multi-party round: every node publishes once and every
// node (the sender included) receives every message exactly once. live is
// called after subscribing, to wait until the subscriptions are live.
func Exchange(t *testing.T, trs []transport.Transport, live func()) {
	t.Helper()
	ctx := context.Background()
	const topic = "election:swarm"
	cs := make([]*Collector, len(trs))
	for i, tr := range trs {
		cs[i] = NewCollector()
		if err := tr.Subscribe(ctx, topic, cs[i].Deliver); err != nil {
			t.Fatal(err)
		}
	}
	live()
	var want []string
	for i, tr := range trs {
		p := fmt.Sprintf(`{"type":"election","candidate":"n%d","priority":%d,"term":1}`, i, i)
		want = append(want, p)
		if err := tr.Publish(ctx, topic, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	for i, c := range cs {
		var got []string
		for range trs {
			got = append(got, string(c.Next(t).Payload))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("node %d got %q", i, got)
		}
		c.None(t)
	}
}
