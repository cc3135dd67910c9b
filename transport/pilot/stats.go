package pilot

import (
	"sort"
	"sync/atomic"
	"time"
)

// BrokerStats are one broker's counters (monotonic) as seen by one
// transport.
type BrokerStats struct {
	Host                   string
	Publishing, Subscribed bool   // its role in this transport's layout
	Published              uint64 // publish processes that succeeded
	PublishErrors          uint64 // publish processes that failed or hit their deadline
	Dropped                uint64 // messages it never got: back-off, full queue, stale
	Received               uint64 // events read from its subscriptions, copies included
	Delivered              uint64 // events it delivered first (handed to the subscriber)
	Duplicates             uint64 // events dropped as copies of ones already delivered
	Restarts               uint64 // subscribe processes restarted (ended, reset or stalled)
	Stalls                 uint64 // subscriptions declared stalled and killed
	PublishLatency         LatencyHistogram
}

// LatencyHistogram is a cumulative histogram of successful publish process
// durations, in seconds (Prometheus's layout).
type LatencyHistogram struct {
	Bounds     []float64 // upper bounds, ascending
	Counts     []uint64  // Counts[i]: observations ≤ Bounds[i]
	Count      uint64
	SumSeconds float64
}

// PublishLatencyBounds are LatencyHistogram's bounds: around pilotctl's
// 55-85 ms process start, up to the 1 s default deadline and beyond.
var PublishLatencyBounds = []float64{0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5}

// BrokerStats returns each broker's counters: the publish brokers in order,
// then subscribe-only ones.
func (t *Transport) BrokerStats() []BrokerStats {
	out := make([]BrokerStats, len(t.brokers))
	for i, b := range t.brokers {
		out[i] = BrokerStats{
			Host: b.name, Publishing: b.publishing, Subscribed: b.subscribed,
			Published: b.published.Load(), PublishErrors: b.publishErrors.Load(), Dropped: b.dropped.Load(),
			Received: b.received.Load(), Delivered: b.delivered.Load(), Duplicates: b.duplicates.Load(),
			Restarts: b.restarts.Load(), Stalls: b.stalls.Load(),
			PublishLatency: b.latency.snapshot(),
		}
	}
	return out
}

type brokerStat struct {
	name                   string
	publishing, subscribed bool
	published, publishErrors, dropped,
	received, delivered, duplicates, restarts, stalls atomic.Uint64
	latency latencyHist
}

type latencyHist struct {
	counts [11]atomic.Uint64 // per bucket of PublishLatencyBounds, then +Inf
	sumNs  atomic.Int64
}

func (h *latencyHist) observe(d time.Duration) {
	s := d.Seconds()
	i := sort.SearchFloat64s(PublishLatencyBounds, s)
	h.counts[i].Add(1)
	h.sumNs.Add(int64(d))
}

func (h *latencyHist) snapshot() LatencyHistogram {
	out := LatencyHistogram{Bounds: PublishLatencyBounds, Counts: make([]uint64, len(PublishLatencyBounds))}
	for i := range h.counts {
		n := h.counts[i].Load()
		out.Count += n
		if i < len(out.Counts) {
			out.Counts[i] = out.Count
		}
	}
	out.SumSeconds = time.Duration(h.sumNs.Load()).Seconds()
	return out
}
