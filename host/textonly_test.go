package host

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/electcore/electcore/transport"
	"github.com/electcore/electcore/transport/mem"
	"github.com/electcore/electcore/transport/transporttest"
)

// recordingTransport records the topics subscribed to and published on,
// and says it carries only text when text is set.
type recordingTransport struct {
	transport.Transport
	text bool

	mu              sync.Mutex
	subscribed      []string
	published, peer int
}

func (r *recordingTransport) TextOnly() bool { return r.text }

func (r *recordingTransport) Subscribe(ctx context.Context, topic string, deliver func(transport.Message)) error {
	r.mu.Lock()
	r.subscribed = append(r.subscribed, topic)
	r.mu.Unlock()
	return r.Transport.Subscribe(ctx, topic, deliver)
}

func (r *recordingTransport) Publish(ctx context.Context, topic string, payload []byte) error {
	r.mu.Lock()
	r.published++
	if strings.HasPrefix(topic, PeersTopicPrefix) {
		r.peer++
	}
	r.mu.Unlock()
	return r.Transport.Publish(ctx, topic, payload)
}

func (r *recordingTransport) counts() (published, peer int, peerSubs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.subscribed {
		if strings.HasPrefix(t, PeersTopicPrefix) {
			peerSubs++
		}
	}
	return r.published, r.peer, peerSubs
}

// Over a transport that carries only text (pilot), agents in enough groups
// to coalesce neither read nor write peer topics (pilot would pass each
// envelope as a command-line argument, a process per publish). The same
// agents over a transport that carries bytes do both, so the test sees the
// traffic it forbids.
func TestTextOnlyTransportCarriesNoEnvelopes(t *testing.T) {
	for _, text := range []bool{false, true} {
		t.Run(fmt.Sprintf("text=%v", text), func(t *testing.T) {
			ctx := context.Background()
			bus := mem.NewBus(mem.Options{Seed: 9})
			ids := []string{"a", "b"}
			var trs []*recordingTransport
			for _, id := range ids {
				tr := &recordingTransport{Transport: bus.Transport(id), text: text}
				trs = append(trs, tr)
				ag, err := NewNativeAgent(ctx, AgentConfig{Transport: tr, Logger: discardLogger()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { ag.Close(ctx) })
				for g := range coalesceGroups {
					if _, err := ag.Join(ctx, fastConfig(id, fmt.Sprintf("g%02d", g), ids), Callbacks{}); err != nil {
						t.Fatal(err)
					}
				}
			}
			// A hello goes out as soon as an agent reads its peer topic,
			// and envelopes with the first heartbeats after: a few hundred
			// publishes cover both many times over.
			transporttest.WaitFor(t, "300 publishes by each agent", func() bool {
				for _, tr := range trs {
					if n, _, _ := tr.counts(); n < 300 {
						return false
					}
				}
				return true
			})
			for i, tr := range trs {
				_, peer, subs := tr.counts()
				if text && (peer != 0 || subs != 0) {
					t.Errorf("%s over a text-only transport: %d publishes on a peer topic, %d peer-topic subscriptions", ids[i], peer, subs)
				}
				if !text && (peer == 0 || subs == 0) {
					t.Errorf("%s over a byte transport: %d publishes on a peer topic, %d peer-topic subscriptions: the check sees nothing", ids[i], peer, subs)
				}
			}
		})
	}
}
