// Package metrics exposes an electhost agent's election metrics in the
// Prometheus text format, on a registry of its own (never the global one).
//
// Counters that the agent already keeps (the core's elections and rejected
// messages, the transport's messages, the host's wasm traps) are read from a
// Snapshot function once per scrape; events only the CLI sees (leader
// changes, failover durations) are recorded through methods. A transport's
// own counters (Pilot's per broker) are registered by the CLI on Registry:
// this package knows no transport.
package metrics

import (
	"maps"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Snapshot is the agent's state at scrape time. Counter fields must never
// decrease for a given agent process.
type Snapshot struct {
	Elections    uint64 // campaigns this agent started
	Term         uint64 // current term
	IsLeader     bool   // this agent leads (holds a valid lease in quorum mode)
	MessagesIn   uint64 // messages received from the bus
	MessagesOut  uint64 // messages published
	Rejected     uint64 // messages refused (malformed, wrong group, stale term, ...) or unparseable on the transport
	PublishErrs  uint64 // publishes that failed
	Traps        uint64 // wasm traps recovered (instance re-created)
	DuplicateIDs uint64 // reports of an id spoken by two processes (this agent's or a member's)
	Dropped      uint64 // received messages dropped: too many waiting for the core
	// DroppedFromMembers: of Dropped, those in a known member's name (its
	// own queue was full: a flood in its name).
	DroppedFromMembers uint64
	TransportDropped   uint64 // messages the transport dropped (NATS: slow consumer)
	// Superseded: members' heartbeats and acks a newer one replaced while
	// the agent was behind; Thinned: acks addressed to another leader not
	// handed to the core (agents of 16 groups or more). host.Stats says more.
	Superseded, Thinned uint64
	CmdStarts           uint64 // leader-only command starts
	CmdKills            uint64 // leader-only command stops that needed SIGKILL
	// Quorum mode's configuration: its index, its size, whether it is known
	// to be committed, and whether this agent is in it.
	ConfIndex     uint64
	ConfMembers   int
	ConfCommitted bool
	Voter         bool
	// Drained: the operator drained this agent (electhost drain): it does
	// not lead. Checked: a health check is configured; Healthy: it passes.
	Drained, Checked, Healthy bool
	TermSpent                 bool // the term is core.MaxTerm: no election can be held
	// An agent of several groups (NewMany) counts its groups instead:
	// joined, led by it, ready (/readyz?group=G), drained, term spent.
	Groups, GroupsLed, GroupsReady, GroupsDrained, GroupsTermSpent int
}

// FailoverBuckets are the failover histogram's upper bounds, in seconds:
// from a fast hand-off (tens of ms) to a slow bus (tens of seconds).
var FailoverBuckets = []float64{0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 8, 13, 21, 34, 60}

// Metrics is one agent's metric set.
type Metrics struct {
	reg           *prometheus.Registry
	labels        prometheus.Labels
	leaderChanges prometheus.Counter
	failover      prometheus.Histogram
}

// New registers the agent's metrics, labelled group and id, on a fresh
// registry (with the Go runtime and process collectors). source is called
// once per scrape; nil reports zeros.
func New(group, id string, source func() Snapshot) *Metrics {
	return newMetrics(prometheus.Labels{"group": group, "id": id}, source, false)
}

func newMetrics(labels prometheus.Labels, source func() Snapshot, many bool) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg:    reg,
		labels: labels,
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "electcore", Name: "leader_changes_total",
			Help:        "Times this agent saw the group's leader change to another member (with several groups: in any of them).",
			ConstLabels: labels,
		}),
		failover: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "electcore", Name: "failover_seconds",
			Help:        "Time from the last message heard from a lost leader to a new leader being known.",
			ConstLabels: labels,
			Buckets:     FailoverBuckets,
		}),
	}
	if source == nil {
		source = func() Snapshot { return Snapshot{} }
	}
	reg.MustRegister(m.leaderChanges, m.failover, newSnapshotCollector(labels, source, many),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// NewMany registers the metrics of an agent of several groups, labelled id
// only: the same counters, summed over its groups, and gauges that count
// its groups by state (electcore_groups, _groups_led, _groups_ready,
// _groups_drained, _groups_term_spent) in place of the one group's gauges.
// The series do not grow with the number of groups.
func NewMany(id string, source func() Snapshot) *Metrics {
	return newMetrics(prometheus.Labels{"id": id}, source, true)
}

// Registry returns the metrics' own registry, where a transport's own
// collectors go (electhost registers Pilot's per-broker counters).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Labels returns a copy of the labels every metric carries (group, id).
func (m *Metrics) Labels() prometheus.Labels { return maps.Clone(m.labels) }

// LeaderChanged counts one change of the known leader.
func (m *Metrics) LeaderChanged() { m.leaderChanges.Inc() }

// ObserveFailover records one failover's duration.
func (m *Metrics) ObserveFailover(d time.Duration) { m.failover.Observe(d.Seconds()) }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError})
}

type snapshotMetric struct {
	desc  *prometheus.Desc
	vtype prometheus.ValueType
	value func(Snapshot) float64
}

type snapshotCollector struct {
	source  func() Snapshot
	metrics []snapshotMetric
}

func newSnapshotCollector(labels prometheus.Labels, source func() Snapshot, many bool) *snapshotCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("electcore_"+name, help, nil, labels)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	common := []snapshotMetric{
		{d("elections_total", "Elections (campaigns) this agent started (with several groups: in all of them)."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.Elections) }},
		{d("messages_received_total", "Messages received from the bus."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.MessagesIn) }},
		{d("messages_published_total", "Messages published to the bus."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.MessagesOut) }},
		{d("messages_rejected_total", "Messages refused: malformed, wrong group, stale term, unparseable."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.Rejected) }},
		{d("messages_dropped_total", "Received messages dropped unseen because too many were waiting for the core (a flood on the bus); members' messages have queues of their own."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.Dropped) }},
		{d("member_messages_dropped_total", "Of messages_dropped_total, those in a known member's name: its own queue was full (a flood in its name)."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.DroppedFromMembers) }},
		{d("messages_superseded_total", "Members' heartbeats and acks never handed to the core because a newer one of the same member and group replaced them while the agent was behind (short of CPU)."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.Superseded) }},
		{d("acks_thinned_total", "Acks not handed to the core (agents of 16 groups or more): those addressed to another leader beyond one per member and election timeout, and those addressed to this agent beyond what its lease and its view of the members need."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.Thinned) }},
		{d("transport_messages_dropped_total", "Messages the transport dropped before the agent saw them (NATS: a subscription's pending buffer full)."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.TransportDropped) }},
		{d("publish_errors_total", "Publishes that failed."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.PublishErrs) }},
		{d("wasm_traps_total", "WebAssembly traps recovered by re-instantiating the module."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.Traps) }},
		{d("duplicate_ids_total", "Reports of an agent id spoken by two processes at once (this agent's or a member's): two agents share an id."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.DuplicateIDs) }},
		{d("leader_command_starts_total", "Starts of the leader-only command."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.CmdStarts) }},
		{d("leader_command_kills_total", "Stops of the leader-only command that needed SIGKILL."), prometheus.CounterValue, func(s Snapshot) float64 { return float64(s.CmdKills) }},
	}
	if many {
		return &snapshotCollector{source: source, metrics: append(common,
			snapshotMetric{d("groups", "Groups this agent joined."), prometheus.GaugeValue, func(s Snapshot) float64 { return float64(s.Groups) }},
			snapshotMetric{d("groups_led", "Groups this agent leads."), prometheus.GaugeValue, func(s Snapshot) float64 { return float64(s.GroupsLed) }},
			snapshotMetric{d("groups_ready", "Groups with a current leader as this agent sees it (what /readyz?group=G answers)."), prometheus.GaugeValue, func(s Snapshot) float64 { return float64(s.GroupsReady) }},
			snapshotMetric{d("groups_drained", "Groups in which the operator drained this agent."), prometheus.GaugeValue, func(s Snapshot) float64 { return float64(s.GroupsDrained) }},
			snapshotMetric{d("groups_term_spent", "Groups whose term is the highest there is (MaxTerm): no election can be held in them until reset."), prometheus.GaugeValue, func(s Snapshot) float64 { return float64(s.GroupsTermSpent) }},
		)}
	}
	return &snapshotCollector{source: source, metrics: append(common, []snapshotMetric{
		{d("term", "The agent's current term (the leader's fencing token)."), prometheus.GaugeValue, func(s Snapshot) float64 { return float64(s.Term) }},
		{d("is_leader", "1 while this agent leads the group, else 0."), prometheus.GaugeValue, func(s Snapshot) float64 { return b2f(s.IsLeader) }},
		{d("config_index", "Index of the configuration (member set) this agent holds; grows with every change and every new leader (restarts at 1 only after a forged index near its bound)."), prometheus.GaugeValue, func(s Snapshot) float64 { return float64(s.ConfIndex) }},
		{d("config_members", "Members in the configuration this agent holds."), prometheus.GaugeValue, func(s Snapshot) float64 { return float64(s.ConfMembers) }},
		{d("config_committed", "1 when the configuration this agent holds is known to be committed, else 0 (a change in flight)."), prometheus.GaugeValue, func(s Snapshot) float64 { return b2f(s.ConfCommitted) }},
		{d("voter", "1 while this agent is in the configuration (votes, may lead), 0 when waiting to be added or removed."), prometheus.GaugeValue, func(s Snapshot) float64 { return b2f(s.Voter) }},
		{d("drained", "1 while the operator has drained this agent (it neither campaigns nor accepts a hand-off), else 0."), prometheus.GaugeValue, func(s Snapshot) float64 { return b2f(s.Drained) }},
		{d("unhealthy", "1 while this agent's health check (--check, --check-http) fails, so that it does not lead, else 0."), prometheus.GaugeValue, func(s Snapshot) float64 { return b2f(s.Checked && !s.Healthy) }},
		{d("term_spent", "1 while this agent's term is the highest there is (MaxTerm): it can hold no election until its state is reset."), prometheus.GaugeValue, func(s Snapshot) float64 { return b2f(s.TermSpent) }},
	}...)}
}

func (c *snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
}

func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.source()
	for _, m := range c.metrics {
		ch <- prometheus.MustNewConstMetric(m.desc, m.vtype, m.value(s))
	}
}
