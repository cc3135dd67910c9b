package main

import (
	"github.com/electcore/electcore/cmd/electhost/internal/metrics"
	"github.com/electcore/electcore/transport/pilot"
	"github.com/prometheus/client_golang/prometheus"
)

// brokerStatser is a transport that keeps counters per broker (Pilot).
type brokerStatser interface {
	BrokerStats() []pilot.BrokerStats
}

// addBrokerMetrics exposes each broker's counters (labelled broker) and
// publish latency histogram on m, read from tr once per scrape, if tr
// keeps them.
func addBrokerMetrics(m *metrics.Metrics, tr any) {
	if bs, ok := tr.(brokerStatser); ok {
		m.Registry().MustRegister(newBrokerCollector(m.Labels(), bs.BrokerStats))
	}
}

type brokerCounter struct {
	desc  *prometheus.Desc
	value func(pilot.BrokerStats) uint64
}

type brokerCollector struct {
	source  func() []pilot.BrokerStats
	counts  []brokerCounter
	latency *prometheus.Desc
}

func newBrokerCollector(labels prometheus.Labels, source func() []pilot.BrokerStats) *brokerCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("electcore_pilot_broker_"+name, help, []string{"broker"}, labels)
	}
	return &brokerCollector{source: source, latency: d("publish_seconds", "Duration of successful pilotctl publish processes to this broker."),
		counts: []brokerCounter{
			{d("publishes_total", "Publishes this broker accepted."), func(s pilot.BrokerStats) uint64 { return s.Published }},
			{d("publish_errors_total", "Publishes to this broker that failed or hit their deadline."), func(s pilot.BrokerStats) uint64 { return s.PublishErrors }},
			{d("drops_total", "Messages this broker never got: skipped while it backed off, dropped from its full queue, or stale."), func(s pilot.BrokerStats) uint64 { return s.Dropped }},
			{d("received_total", "Events read from this broker's subscriptions, copies included."), func(s pilot.BrokerStats) uint64 { return s.Received }},
			{d("deliveries_total", "Events this broker delivered first (handed to the election)."), func(s pilot.BrokerStats) uint64 { return s.Delivered }},
			{d("duplicates_total", "Events from this broker dropped as copies of ones already delivered."), func(s pilot.BrokerStats) uint64 { return s.Duplicates }},
			{d("subscription_restarts_total", "Subscribe processes to this broker restarted (ended, reset or stalled)."), func(s pilot.BrokerStats) uint64 { return s.Restarts }},
			{d("stalls_total", "Subscriptions to this broker declared stalled (silent while others delivered) and restarted."), func(s pilot.BrokerStats) uint64 { return s.Stalls }},
		}}
}

func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.counts {
		ch <- m.desc
	}
	ch <- c.latency
}

func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range c.source() {
		for _, m := range c.counts {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.value(b)), b.Host)
		}
		h := b.PublishLatency
		buckets := make(map[float64]uint64, len(h.Bounds))
		for i, ub := range h.Bounds {
			buckets[ub] = h.Counts[i]
		}
		ch <- prometheus.MustNewConstHistogram(c.latency, h.Count, h.SumSeconds, buckets, b.Host)
	}
}
