package nats

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/natstest"
	"github.com/electcore/electcore/transport/transporttest"
)

func newNATS(t *testing.T, url string) *Transport {
	t.Helper()
	tr, err := New(Options{URL: url, ReconnectWait: 20 * time.Millisecond, ReconnectJitter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func TestNATSSubjectMapping(t *testing.T) {
	for topic, want := range map[string]string{
		"election:g1":     "election:g1",
		"a.b-c_d":         "a.b-c_d",
		"*":               "electcore.enc.Kg",
		"a b":             "electcore.enc.YSBi",
		"a..b":            "electcore.enc.YS4uYg",
		"$SYS.x":          "electcore.enc.JFNZUy54",
		"electcore.enc.x": "electcore.enc.ZWxlY3Rjb3JlLmVuYy54",
	} {
		if got := Subject(topic); got != want {
			t.Errorf("Subject(%q) = %q, want %q", topic, got, want)
		}
	}
}

func TestNATSPublishSubscribe(t *testing.T) {
	url, _ := natstest.Start(t)
	alice, bob := newNATS(t, url), newNATS(t, url)
	ctx := context.Background()
	ca, cb, cw := transporttest.NewCollector(), transporttest.NewCollector(), transporttest.NewCollector()
	for _, s := range []struct {
		tr    *Transport
		topic string
		c     *transporttest.Collector
	}{{alice, "election:g1", ca}, {bob, "election:g1", cb}, {bob, "weird topic *", cw}} {
		if err := s.tr.Subscribe(ctx, s.topic, s.c.Deliver); err != nil {
			t.Fatal(err)
		}
	}
	payload := `{"type":"election","candidate":"alice","priority":7,"term":1}`
	if err := alice.Publish(ctx, "election:g1", []byte(payload)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*transporttest.Collector{ca, cb} { // alice hears herself (echo)
		if m := c.Next(t); m.Topic != "election:g1" || string(m.Payload) != payload {
			t.Fatalf("got %+v", m)
		}
	}
	if err := alice.Publish(ctx, "weird topic *", []byte("w")); err != nil {
		t.Fatal(err)
	}
	if m := cw.Next(t); m.Topic != "weird topic *" || string(m.Payload) != "w" {
		t.Fatalf("got %+v", m)
	}
	ca.None(t)
	if s := alice.Stats(); s.Published != 2 || s.Received != 1 {
		t.Fatalf("stats %+v", s)
	}

	// A cancelled subscription stops delivering.
	sctx, cancel := context.WithCancel(ctx)
	cc := transporttest.NewCollector()
	if err := bob.Subscribe(sctx, "t2", cc.Deliver); err != nil {
		t.Fatal(err)
	}
	cancel()
	transporttest.WaitFor(t, "unsubscribe", func() bool { return bob.Conn().NumSubscriptions() == 2 })
	alice.Publish(ctx, "t2", []byte("x"))
	bob.Publish(ctx, "election:g1", []byte("sync")) // same-connection order: t2 would have come first
	cb.Next(t)
	cc.None(t)

	alice.Close()
	if err := alice.Publish(ctx, "t", nil); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestNATSSubscriptionSurvivesServerRestart(t *testing.T) {
	url, stop := natstest.Start(t)
	sub, pub := newNATS(t, url), newNATS(t, url)
	ctx := context.Background()
	c := transporttest.NewCollector()
	if err := sub.Subscribe(ctx, "election:g", c.Deliver); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, "election:g", []byte("before")); err != nil {
		t.Fatal(err)
	}
	if m := c.Next(t); string(m.Payload) != "before" {
		t.Fatalf("got %q", m.Payload)
	}

	stop()
	transporttest.WaitFor(t, "the disconnect", func() bool { return sub.Stats().Disconnects >= 1 && pub.Stats().Disconnects >= 1 })
	if err := pub.Publish(ctx, "election:g", []byte("during")); !errors.Is(err, transport.ErrConnectionFailed) {
		t.Fatalf("publish while down: %v", err)
	}
	natstest.Restart(t, url)
	transporttest.WaitFor(t, "the resubscribe", func() bool {
		return sub.Stats().Resubscribes >= 1 && pub.Conn().IsConnected()
	})
	// The other connection's SUB may still be in flight: publish until heard
	// (giving up after a minute).
	giveUp := time.Now().Add(time.Minute)
	for i := 0; ; i++ {
		if err := pub.Publish(ctx, "election:g", fmt.Appendf(nil, "after-%d", i)); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-c.C:
			if !strings.HasPrefix(string(m.Payload), "after-") {
				t.Fatalf("got %q", m.Payload)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(giveUp) {
			t.Fatalf("no message after the restart (%d published)", i+1)
		}
	}
}

func TestNATSUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	ln.Close()
	start := time.Now()
	_, err = New(Options{URL: url, ConnectTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "cannot reach NATS at "+url) || !errors.Is(err, transport.ErrConnectionFailed) {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("initial connect not bounded: %v", d)
	}
	_, err = New(Options{URL: "nats://user:secret@" + ln.Addr().String()})
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("credentials must be redacted: %v", err)
	}
}

func TestExchangeNATS(t *testing.T) {
	url, _ := natstest.Start(t)
	transporttest.Exchange(t, []transport.Transport{newNATS(t, url), newNATS(t, url), newNATS(t, url)}, func() {})
}

func BenchmarkNATSPublish(b *testing.B) {
	url, _ := natstest.Start(b)
	tr, err := New(Options{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	c := transporttest.NewCollector()
	tr.Subscribe(context.Background(), "t", c.Deliver)
	b.ResetTimer()
	for range b.N {
		if err := tr.Publish(context.Background(), "t", []byte(`{"type":"heartbeat"}`)); err != nil {
			b.Fatal(err)
		}
		<-c.C
	}
}

// PublishBatch sends every message in order and counts them as Publish
// would; after Close it fails and sends nothing.
func TestNATSPublishBatch(t *testing.T) {
	url, _ := natstest.Start(t)
	pub, sub := newNATS(t, url), newNATS(t, url)
	ctx := context.Background()
	c := transporttest.NewCollector()
	if err := sub.Subscribe(ctx, "batch", c.Deliver); err != nil {
		t.Fatal(err)
	}
	var ms []transport.Message
	for i := range 50 {
		ms = append(ms, transport.Message{Topic: "batch", Payload: []byte(fmt.Sprint(i))})
	}
	if n, err := pub.PublishBatch(ctx, ms); n != len(ms) || err != nil {
		t.Fatalf("PublishBatch = %d, %v", n, err)
	}
	for i := range ms {
		if m := c.Next(t); string(m.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d: got %q", i, m.Payload)
		}
	}
	if s := pub.Stats(); s.Published != uint64(len(ms)) {
		t.Fatalf("stats %+v", s)
	}
	pub.Close()
	if n, err := pub.PublishBatch(ctx, ms); n != 0 || !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("after close: %d, %v", n, err)
	}
}

// Many subscriptions cost no goroutine each (ten thousand groups per
// agent), and each still gets only its own messages.
func TestNATSSubscriptionsShareOneGoroutine(t *testing.T) {
	url, _ := natstest.Start(t)
	tr := newNATS(t, url)
	ctx := context.Background()
	base := runtime.NumGoroutine()
	const n = 300
	cs := make([]*transporttest.Collector, n)
	for i := range cs {
		cs[i] = transporttest.NewCollector()
		if err := tr.Subscribe(ctx, fmt.Sprintf("s%d", i), cs[i].Deliver); err != nil {
			t.Fatal(err)
		}
	}
	if g := runtime.NumGoroutine(); g > base+n/10 {
		t.Fatalf("%d goroutines with %d subscriptions (%d before)", g, n, base)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		tr.Publish(ctx, fmt.Sprintf("s%d", i), []byte(fmt.Sprint(i)))
		if m := cs[i].Next(t); string(m.Payload) != fmt.Sprint(i) {
			t.Fatalf("s%d got %q", i, m.Payload)
		}
	}
	cs[1].None(t)
}

// SubscribeBatch makes every subscription known to the server with one
// round trip, and each is live when it returns: a message published on any
// of the topics right after reaches it.
func TestNATSSubscribeBatchOneRoundTrip(t *testing.T) {
	url, _ := natstest.Start(t)
	proxy := natstest.CountPings(t, url)
	sub, pub := newNATS(t, proxy.URL), newNATS(t, url)
	ctx := context.Background()
	const n = 300
	c := transporttest.NewCollector()
	subs := make([]transport.Subscription, n)
	for i := range subs {
		subs[i] = transport.Subscription{Ctx: ctx, Topic: fmt.Sprintf("election:g%d", i), Deliver: c.Deliver}
	}
	subs = append(subs, transport.Subscription{Ctx: ctx, Topic: "", Deliver: c.Deliver})
	before := proxy.Pings()
	errs := sub.SubscribeBatch(ctx, subs)
	if pings := proxy.Pings() - before; pings != 1 {
		t.Fatalf("%d round trips to subscribe to %d topics, want 1", pings, n)
	}
	for i, err := range errs[:n] {
		if err != nil {
			t.Fatalf("topic %d: %v", i, err)
		}
	}
	if !errors.Is(errs[n], transport.ErrInvalidArgument) {
		t.Fatalf("empty topic: %v, want ErrInvalidArgument", errs[n])
	}
	for i := range n {
		if err := pub.Publish(ctx, fmt.Sprintf("election:g%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]bool{}
	for range n {
		got[c.Next(t).Topic] = true
	}
	if len(got) != n {
		t.Fatalf("%d topics delivered, want %d", len(got), n)
	}
}

// Close may run while subscriptions end by their own contexts: both touch
// the transport's list of subscriptions, so the race detector (make test
// runs this package under -race) sees any access outside the lock.
func TestNATSCloseWhileSubscriptionsEnd(t *testing.T) {
	url, _ := natstest.Start(t)
	for range 20 {
		tr := newNATS(t, url)
		ctx, cancel := context.WithCancel(context.Background())
		for i := range 50 {
			if err := tr.Subscribe(ctx, fmt.Sprintf("s%d", i), func(transport.Message) {}); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			cancel()
		}()
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
		<-done
	}
}

// With NoEcho a transport hears the others, not itself.
func TestNATSNoEcho(t *testing.T) {
	url, _ := natstest.Start(t)
	alice, err := New(Options{URL: url, NoEcho: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { alice.Close() })
	bob := newNATS(t, url)
	ctx := context.Background()
	ca, cb := transporttest.NewCollector(), transporttest.NewCollector()
	if err := alice.Subscribe(ctx, "election:g1", ca.Deliver); err != nil {
		t.Fatal(err)
	}
	if err := bob.Subscribe(ctx, "election:g1", cb.Deliver); err != nil {
		t.Fatal(err)
	}
	if err := alice.Publish(ctx, "election:g1", []byte("from alice")); err != nil {
		t.Fatal(err)
	}
	if m := cb.Next(t); string(m.Payload) != "from alice" {
		t.Fatalf("bob got %q", m.Payload)
	}
	// The server wrote alice's echo, had there been one, to her connection
	// when it wrote the message to bob's: before anything bob sends now.
	if err := bob.Publish(ctx, "election:g1", []byte("from bob")); err != nil {
		t.Fatal(err)
	}
	if m := ca.Next(t); string(m.Payload) != "from bob" {
		t.Fatalf("alice got %q", m.Payload)
	}
	ca.None(t)
}
