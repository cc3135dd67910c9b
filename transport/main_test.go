package transport

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor polls cond until it holds or the (generous) limit passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// collector gathers delivered messages.
type collector struct {
	ch chan Message
}

func newCollector() *collector { return &collector{ch: make(chan Message, 1024)} }

func (c *collector) deliver(m Message) { c.ch <- m }

func (c *collector) next(t *testing.T) Message {
	t.Helper()
	select {
	case m := <-c.ch:
		return m
	case <-time.After(15 * time.Second):
		t.Fatal("no message delivered")
		return Message{}
	}
}

// none asserts nothing is pending right now (no waiting: not a timing assertion).
func (c *collector) none(t *testing.T) {
	t.Helper()
	select {
	case m := <-c.ch:
		t.Fatalf("unexpected message %q on %q", m.Payload, m.Topic)
	default:
	}
}
