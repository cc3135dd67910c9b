package pilot

import (
	"log/slog"
	"time"
)

// Options configures New.
type Options struct {
	// Binary is the pilotctl executable: a name looked up in PATH or a path.
	// Default "pilotctl".
	Binary string
	// Hosts are the brokers (pilot host name, address or node id) every
	// message is published to, each in parallel with its own deadline,
	// queue and back-off. At least one, at most 32. Never this node's own:
	// a node publishing to its own broker while subscribed floods its
	// daemon (docs/pilotctl.md); Layout splits a broker list safely.
	Hosts []string
	// SubscribeHosts are the brokers subscribed to. Default: Hosts. Copies
	// of one message arriving from several are delivered once.
	SubscribeHosts []string
	// SubscriptionsPerHost is how many long-lived subscribe processes run
	// per subscribed broker (default 1). Two keep a lone broker's stream
	// going while one is reset and restarting: pilot resets connections
	// one at a time.
	SubscriptionsPerHost int
	// Loopback delivers this transport's own publishes to its own matching
	// subscriptions, for layouts in which no subscribed broker echoes them
	// (Layout says when).
	Loopback bool
	// Env is appended to this process's environment for every pilotctl run
	// (e.g. "PILOT_SOCKET=/run/pilot.sock", "HOME=/var/lib/agent").
	Env []string
	// PublishTimeout bounds one publish process to one broker (a killed
	// broker holds a publish for ~29 s). Default 1 s: ten times the median
	// publish-to-delivery latency; a later election message is stale.
	PublishTimeout time.Duration
	// PublishWorkers is how many publish processes may run at once per
	// broker; PublishQueue how many messages wait per broker. When a slow
	// broker's queue is full its oldest message is dropped and counted.
	// Defaults 2 and 16.
	PublishWorkers, PublishQueue int
	// PublishBackoffMin/Max bound the jittered exponential back-off during
	// which a broker whose publish failed gets no messages (each is dropped
	// and counted) but one probe per back-off, counted from the start of
	// the failed publish. So a broker that answers again is tried again
	// within max(PublishTimeout, PublishBackoffMax) of it, given a message
	// to send: under an election timeout at electhost's defaults, so that
	// the group is not partitioned longer than the network is. Defaults
	// 250 ms and 1 s.
	PublishBackoffMin, PublishBackoffMax time.Duration
	// BackoffMin/BackoffMax bound the jittered exponential back-off between
	// restarts of a subscribe process that failed without delivering.
	// Defaults 200 ms and 2 s. One that failed because our own daemon is not
	// running waits instead until the daemon answers, asked every
	// BackoffMin (once for the whole transport).
	BackoffMin, BackoffMax time.Duration
	// StableAfter: a subscribe process that ran at least this long, or that
	// delivered an event, restarts at once and resets the back-off (resets
	// and the ~120 s idle drop end working subscriptions). Default 5 s.
	StableAfter time.Duration
	// StallAfter: a subscription that delivered nothing for this long while
	// another subscription delivered (or that is the only one) is declared
	// stalled, killed and restarted; the threshold doubles with each
	// consecutive stall of that broker, up to 16×. Default 2 s; electhost
	// passes 4 heartbeats, at least 1 s.
	StallAfter time.Duration
	// DedupWindow and DedupSize bound de-duplication: a copy of a payload
	// already delivered from another source is dropped if it arrives within
	// the window and among the last DedupSize distinct payloads. Defaults
	// 10 s and 1024.
	DedupWindow time.Duration
	DedupSize   int
	// MaxLineBytes: longer NDJSON lines are rejected. Default 1 MiB.
	MaxLineBytes int
	// PayloadMustBeJSON rejects (counts in Rejected) payloads that are not
	// valid JSON. Default false: the core validates payloads itself.
	PayloadMustBeJSON bool
	// CutOffAfter: when every publish to a broker failed for this long, the
	// transport asks the registry once whether the broker's node is still
	// registered and, if so, logs once (until the broker answers again)
	// that it answers nothing while registered, with the likely cause (a
	// restarted daemon that its peers' daemons still hold an old tunnel
	// to) and the fix (docs/pilotctl.md). Default 15 s.
	CutOffAfter time.Duration
	// OnGap, if set, is called (from the subscription's goroutine) each time a
	// subscribe process ended and will be restarted: messages may have been
	// missed between err and the restart going live.
	OnGap  func(topic, host string, err error)
	Logger *slog.Logger // nil: silent
}
