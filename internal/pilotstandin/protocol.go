// Package pilotstandin is a test stand-in for Pilot Protocol's pilotctl and
// its daemon, faithful to the contract measured against real pilotctl and
// summarised in docs/pilotctl.md. It has two halves:
//
//   - Daemon (StartDaemon in tests, NewDaemon otherwise): an in-process fake
//     pilot daemon listening on a unix socket (PILOT_SOCKET semantics) that
//     simulates several nodes ("hosts"), each with an event-stream broker that
//     can be stopped cleanly, killed hard and restarted, plus inboxes. A CLI
//     runs on the node named by PILOT_STANDIN_NODE (unset: an unnamed client;
//     info reports the first host).
//   - The pilotctl CLI (Main, built by Build or from ./cmd/pilotctl): the
//     commands info, publish, subscribe, send-message, inbox, find and
//     lookup, with --json
//     anywhere, --k v / --k=v flags, sorted-key JSON on stdout (exit 0) or
//     stderr (exit 1).
//
// Faithful details: no ready signal (a subscription goes live 80-220 ms after
// it is requested), nothing stored for late subscribers, quiet subscriptions
// dropped after an idle timer (120 s; env PILOT_STANDIN_IDLE_DROP shortens
// it per subscription), EOF at once when a broker stops cleanly, a 29 s hang
// then connection_failed when it was killed, not_found for unknown or
// cleanly stopped hosts, published events never in the inbox.
//
// The faults of real Pilot networks, each scalable for fast tests:
//
//   - KillNode: a node's daemon dies hard. Brokers it was subscribed to
//     block their whole fan-out behind its dead subscription
//     (Options.DeadSubscriberWindow/DeadSubscriberBlock, default 30 s);
//     publishes to it hang Options.KillHang (29 s) then fail.
//   - Options.ResetEvery: subscriptions end with connection_failed
//     "recv: EOF" at random, as broker-side resets end them.
//   - Self-publish: a named node publishing to its own broker while
//     subscribed there is counted (SelfPublishes) and that broker stops
//     delivering until RestartNode, as the real daemon floods.
//   - Options.EventsPerSec: the per-connection ceiling (real: ~25/s).
//   - Options.FloodDelayMax: daemons busy with Pilot's endless FIN-ACK
//     loops; each publish (and its event) is delayed at random.
//   - RestartNodeStale: a node restarted after kill -9 stays cut off: the
//     others still hold a tunnel to its old endpoint and key, so their
//     traffic to it hangs and fails until it sends to them first (or, as on
//     Pilot 4c54cc0 after a beacon relay, for good). find and lookup say it
//     is registered meanwhile.
//
// Not modelled: trust/handshakes (all nodes are public), the ~40 ms write
// batching, inbox overwrite races, events delivered late after a blocked
// fan-out resumes (here they are lost).
package pilotstandin

// Wire protocol between the CLI and the daemon: one JSON request line, then
// JSON response lines.

type request struct {
	Op         string `json:"op"`
	Node       string `json:"node,omitempty"` // local node (PILOT_STANDIN_NODE); default: the daemon's first host
	Host       string `json:"host,omitempty"`
	Topic      string `json:"topic,omitempty"`
	Data       string `json:"data,omitempty"`
	Type       string `json:"type,omitempty"`
	Clear      bool   `json:"clear,omitempty"`
	IdleDropMs int64  `json:"idle_drop_ms,omitempty"`
}

type response struct {
	OK      bool           `json:"ok"`
	Data    map[string]any `json:"data,omitempty"`
	Code    string         `json:"code,omitempty"`
	Message string         `json:"message,omitempty"`
	Hint    string         `json:"hint,omitempty"`
}

// streamLine is one line of a subscription stream.
type streamLine struct {
	Event *event  `json:"ev,omitempty"`
	Raw   *string `json:"raw,omitempty"` // test-only garbage, printed verbatim
}

type event struct {
	Topic string `json:"topic"`
	Data  string `json:"data"`
	Bytes int    `json:"bytes"`
}

// Env vars read by the CLI.
const (
	EnvSocket   = "PILOT_SOCKET"
	EnvIdleDrop = "PILOT_STANDIN_IDLE_DROP" // Go duration, e.g. "2s"
	EnvNode     = "PILOT_STANDIN_NODE"      // which simulated node this CLI runs on
	DefaultSock = "/tmp/pilot.sock"
)

// Error codes, as pilotctl prints them.
const (
	CodeInvalidArgument  = "invalid_argument"
	CodeNotFound         = "not_found"
	CodeAlreadyExists    = "already_exists"
	CodeNotRunning       = "not_running"
	CodeConnectionFailed = "connection_failed"
	CodeTimeout          = "timeout"
	CodeInternal         = "internal"
)
