package main

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/electcore/electcore/cmd/electhost/internal/metrics"
	"github.com/electcore/electcore/transport/pilot"
)

type fakeBrokers []pilot.BrokerStats

func (f fakeBrokers) BrokerStats() []pilot.BrokerStats { return f }

func TestPilotBrokerExposition(t *testing.T) {
	m := metrics.New("g1", "a", nil)
	addBrokerMetrics(m, fakeBrokers{{
		Host: "n2", Published: 7, PublishErrors: 2, Dropped: 3, Received: 11, Delivered: 6, Duplicates: 5, Restarts: 4, Stalls: 1,
		PublishLatency: pilot.LatencyHistogram{Bounds: []float64{0.05, 0.1}, Counts: []uint64{2, 6}, Count: 7, SumSeconds: 0.5},
	}})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	text := rec.Body.String()
	for _, want := range []string{
		`electcore_pilot_broker_publishes_total{broker="n2",group="g1",id="a"} 7`,
		`electcore_pilot_broker_publish_errors_total{broker="n2",group="g1",id="a"} 2`,
		`electcore_pilot_broker_drops_total{broker="n2",group="g1",id="a"} 3`,
		`electcore_pilot_broker_received_total{broker="n2",group="g1",id="a"} 11`,
		`electcore_pilot_broker_deliveries_total{broker="n2",group="g1",id="a"} 6`,
		`electcore_pilot_broker_duplicates_total{broker="n2",group="g1",id="a"} 5`,
		`electcore_pilot_broker_subscription_restarts_total{broker="n2",group="g1",id="a"} 4`,
		`electcore_pilot_broker_stalls_total{broker="n2",group="g1",id="a"} 1`,
		`electcore_pilot_broker_publish_seconds_bucket{broker="n2",group="g1",id="a",le="0.1"} 6`,
		`electcore_pilot_broker_publish_seconds_bucket{broker="n2",group="g1",id="a",le="+Inf"} 7`,
		`electcore_pilot_broker_publish_seconds_count{broker="n2",group="g1",id="a"} 7`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s", want)
		}
	}
}
