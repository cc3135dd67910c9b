package mem

import (
	"context"
	"errors"
	"fmt"
	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/transporttest"
	"testing"
	"time"
)

func memNodes(t *testing.T, b *Bus, topic string, ids ...string) map[string]*transporttest.Collector {
	t.Helper()
	cs := map[string]*transporttest.Collector{}
	for _, id := range ids {
		c := transporttest.NewCollector()
		if err := b.Transport(id).Subscribe(context.Background(), topic, c.Deliver); err != nil {
			t.Fatal(err)
		}
		cs[id] = c
	}
	return cs
}

func TestMemDeliversToAllIncludingSelf(t *testing.T) {
	b := NewBus(Options{Seed: 1})
	defer b.Close()
	cs := memNodes(t, b, "election:g", "a", "b", "c")
	other := memNodes(t, b, "election:other", "c")
	if err := b.Transport("a").Publish(context.Background(), "election:g", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	for id, c := range cs {
		if m := c.Next(t); m.Topic != "election:g" || string(m.Payload) != "hi" {
			t.Fatalf("%s got %+v", id, m)
		}
	}
	other["c"].None(t)
	if s := b.Transport("a").Stats(); s.Published != 1 || s.Received != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestMemPartitions(t *testing.T) {
	b := NewBus(Options{Seed: 1})
	defer b.Close()
	cs := memNodes(t, b, "t", "a", "b", "c")
	ctx := context.Background()
	pub := func(from string) {
		t.Helper()
		if err := b.Transport(from).Publish(ctx, "t", []byte(from)); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(to string, from ...string) {
		t.Helper()
		for _, f := range from {
			if m := cs[to].Next(t); string(m.Payload) != f {
				t.Fatalf("%s got %q, want %q", to, m.Payload, f)
			}
		}
		cs[to].None(t)
	}

	b.Partition([]string{"a"}, []string{"b", "c"})
	pub("a")
	pub("b")
	// Delivery is synchronous to the queue; wait until each expected copy arrived.
	expect("a", "a")
	expect("b", "b")
	expect("c", "b")
	if s := b.Transport("b").Stats(); s.Dropped != 1 {
		t.Fatalf("b dropped %d, want 1", s.Dropped)
	}

	b.Heal()
	b.Block([]string{"a"}, []string{"b"}) // one way: a -> b only
	pub("a")
	pub("b")
	expect("a", "a", "b")
	expect("b", "b")
	expect("c", "a", "b")

	b.Unblock([]string{"a"}, []string{"b"})
	pub("a")
	expect("b", "a")
}

func TestMemLossIsSeededAndDuplicates(t *testing.T) {
	run := func(seed uint64) []int {
		b := NewBus(Options{Seed: seed, Loss: 0.5})
		defer b.Close()
		cs := memNodes(t, b, "t", "a", "b")
		for i := range 200 {
			b.Transport("a").Publish(context.Background(), "t", fmt.Appendf(nil, "%d", i))
		}
		var got []int
		sa, sb := b.Transport("a").Stats(), b.Transport("b").Stats()
		if sa.Received+sa.Dropped+sb.Received+sb.Dropped < 400 {
			// Received counts at delivery time: wait for the queues to drain.
			transporttest.WaitFor(t, "queues to drain", func() bool {
				sa, sb = b.Transport("a").Stats(), b.Transport("b").Stats()
				return sa.Received+sa.Dropped+sb.Received+sb.Dropped == 400
			})
		}
		for _, id := range []string{"a", "b"} {
			n := 0
			for range len(cs[id].C) {
				<-cs[id].C
				n++
			}
			got = append(got, n)
		}
		return got
	}
	x, y := run(7), run(7)
	if x[0] != y[0] || x[1] != y[1] {
		t.Fatalf("same seed, different losses: %v vs %v", x, y)
	}
	if x[0] < 50 || x[0] > 150 || x[1] < 50 || x[1] > 150 {
		t.Fatalf("loss 0.5 delivered %v of 200", x)
	}

	b := NewBus(Options{Seed: 1})
	defer b.Close()
	cs := memNodes(t, b, "t", "a")
	b.SetLoss(1)
	b.Transport("a").Publish(context.Background(), "t", []byte("lost"))
	b.SetLoss(0)
	b.SetDuplicate(1)
	b.Transport("a").Publish(context.Background(), "t", []byte("twice"))
	for range 2 {
		if m := cs["a"].Next(t); string(m.Payload) != "twice" {
			t.Fatalf("got %q", m.Payload)
		}
	}
	cs["a"].None(t)
}

func TestMemDelayReorders(t *testing.T) {
	b := NewBus(Options{Seed: 3, DelayMin: time.Millisecond, DelayMax: 20 * time.Millisecond})
	defer b.Close()
	cs := memNodes(t, b, "t", "a")
	const n = 50
	for i := range n {
		b.Transport("a").Publish(context.Background(), "t", fmt.Appendf(nil, "%d", i))
	}
	seen := map[string]bool{}
	for range n {
		seen[string(cs["a"].Next(t).Payload)] = true
	}
	if len(seen) != n {
		t.Fatalf("got %d distinct of %d", len(seen), n)
	}
}

func TestMemCloseAndCancel(t *testing.T) {
	b := NewBus(Options{})
	tr := b.Transport("a")
	ctx, cancel := context.WithCancel(context.Background())
	c := transporttest.NewCollector()
	if err := tr.Subscribe(ctx, "t", c.Deliver); err != nil {
		t.Fatal(err)
	}
	cancel()
	transporttest.WaitFor(t, "the cancelled subscription to go", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.subs["t"]) == 0
	})
	tr.Publish(context.Background(), "t", []byte("x"))
	c.None(t)
	tr.Close()
	if err := tr.Publish(context.Background(), "t", nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("publish after close: %v", err)
	}
	if err := tr.Subscribe(context.Background(), "t", c.Deliver); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("subscribe after close: %v", err)
	}
	if b.Transport("a") == tr {
		t.Fatal("a closed node should get a fresh transport")
	}
	b.Close()
	if err := b.Transport("z").Publish(context.Background(), "t", nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("publish on a closed bus: %v", err)
	}
}

func TestExchangeMem(t *testing.T) {
	b := NewBus(Options{})
	defer b.Close()
	transporttest.Exchange(t, []transport.Transport{b.Transport("n0"), b.Transport("n1"), b.Transport("n2")}, func() {})
}
