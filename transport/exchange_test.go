package transport

import (
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/electcore/electcore/internal/pilotstandin"
	"github.com/electcore/electcore/transport/natstest"
)

// exchange checks a multi-party round: every node publishes once and every
// node (the sender included) receives every message exactly once.
func exchange(t *testing.T, trs []Transport, live func()) {
	t.Helper()
	ctx := context.Background()
	const topic = "election:swarm"
	cs := make([]*collector, len(trs))
	for i, tr := range trs {
		cs[i] = newCollector()
		if err := tr.Subscribe(ctx, topic, cs[i].deliver); err != nil {
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
			got = append(got, string(c.next(t).Payload))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("node %d got %q", i, got)
		}
		c.none(t)
	}
}

func TestExchangeMem(t *testing.T) {
	b := NewMemBus(MemOptions{})
	defer b.Close()
	exchange(t, []Transport{b.Transport("n0"), b.Transport("n1"), b.Transport("n2")}, func() {})
}

func TestExchangeNATS(t *testing.T) {
	url, _ := natstest.Start(t)
	exchange(t, []Transport{newNATS(t, url), newNATS(t, url), newNATS(t, url)}, func() {})
}

func TestExchangePilot(t *testing.T) {
	d := pilotstandin.StartDaemon(t, pilotstandin.Options{Hosts: []string{"hub", "spare"}})
	hosts := []string{"hub", "spare"}
	var trs []Transport
	for range 3 {
		trs = append(trs, newPilot(t, d, PilotOptions{Hosts: hosts}))
	}
	exchange(t, trs, func() {
		waitLive(t, d, "hub", "election:swarm", 3)
		waitLive(t, d, "spare", "election:swarm", 3)
	})
}

func BenchmarkPilotPublish(b *testing.B) {
	d, err := pilotstandin.NewDaemon(pilotstandin.Options{Hosts: []string{"a"}})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	tr, err := NewPilotTransport(PilotOptions{Binary: pilotstandin.Build(b), Hosts: []string{"a"}, Env: d.Env()})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	c := newCollector()
	tr.Subscribe(context.Background(), "t", c.deliver)
	for d.Subscribers("a", "t") < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	b.ResetTimer()
	for range b.N {
		if err := tr.Publish(context.Background(), "t", []byte(`{"type":"heartbeat"}`)); err != nil {
			b.Fatal(err)
		}
		<-c.ch
	}
}

// BenchmarkPilotPublishCost: what a long-lived publisher could save. "exec"
// is the transport's way, one pilotctl process per publish; "in-process"
// sends the same request to the daemon from a process that is already
// running (the stand-in's CLI called as a function), which is what a
// persistent publisher would cost if pilotctl offered one (it does not).
func BenchmarkPilotPublishCost(b *testing.B) {
	d, err := pilotstandin.NewDaemon(pilotstandin.Options{Hosts: []string{"a"}})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	payload := `{"type":"heartbeat","leader":"a1","term":7,"seq":42}`
	b.Run("exec", func(b *testing.B) {
		tr, err := NewPilotTransport(PilotOptions{Binary: pilotstandin.Build(b), Hosts: []string{"a"}, Env: d.Env()})
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		for range b.N {
			if err := tr.Publish(context.Background(), "t", []byte(payload)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("in-process", func(b *testing.B) {
		b.Setenv(pilotstandin.EnvSocket, d.Socket())
		for range b.N {
			if code := pilotstandin.Main([]string{"--json", "publish", "a", "t", "--data=" + payload}, io.Discard, io.Discard); code != 0 {
				b.Fatal(code)
			}
		}
	})
}

func BenchmarkNATSPublish(b *testing.B) {
	url, _ := natstest.Start(b)
	tr, err := NewNATSTransport(NATSOptions{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	c := newCollector()
	tr.Subscribe(context.Background(), "t", c.deliver)
	b.ResetTimer()
	for range b.N {
		if err := tr.Publish(context.Background(), "t", []byte(`{"type":"heartbeat"}`)); err != nil {
			b.Fatal(err)
		}
		<-c.ch
	}
}
