package pilotstandin

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Options configures a Daemon. Zero values take the documented defaults.
type Options struct {
	// Socket is the unix socket path. Default: a fresh short temp path.
	Socket string
	// Hosts are the simulated nodes, each with a broker, all started. The
	// first is the default local node. Default: ["node-1"].
	Hosts []string
	// IdleDrop: a subscription that received nothing for this long is
	// dropped (CLI exits 1, connection_failed "recv: EOF"). Default 120 s;
	// the CLI's env PILOT_STANDIN_IDLE_DROP overrides it per subscription.
	IdleDrop time.Duration
	// LiveDelayMin/Max: a new subscription goes live after a uniformly random
	// delay in this range. Default 80 ms and 220 ms.
	LiveDelayMin, LiveDelayMax time.Duration
	// KillHang: how long publish/subscribe to a killed broker hang before
	// connection_failed. Default 29 s.
	KillHang time.Duration
	// DeadSubscriberWindow and DeadSubscriberBlock model a broker's fan-out
	// blocking behind a subscriber whose node was killed (KillNode): the
	// dead subscription absorbs this many events (its unacknowledged
	// window), then the broker delivers nothing to anyone until
	// DeadSubscriberBlock after the first of them (the dead connection is
	// reset then) or until the node restarts. Defaults 4 events and 30 s
	// (the group stalled for 28-45 s on real Pilot).
	DeadSubscriberWindow int
	DeadSubscriberBlock  time.Duration
	// ResetEvery, if set, ends every subscription with connection_failed
	// "recv: EOF" after a uniformly random time in [ResetEvery/2,
	// 3×ResetEvery/2], as broker-side "max retransmits exceeded" resets
	// do. Default off.
	ResetEvery time.Duration
	// EventsPerSec, if set, caps what one subscription connection carries;
	// the rest queues (up to 4096 events, then is dropped). Real pilot
	// carries about 25 small events/s per connection. Default off.
	EventsPerSec int
	// FloodDelayMax, if set, models daemons busy with Pilot's FIN-ACK loops
	// (docs/pilotctl.md, "Why the daemons flood"): every publish waits a
	// uniformly random time in [0, FloodDelayMax] before its event is fanned
	// out, so the publish process takes that much longer and the event
	// arrives that much later. Default off.
	FloodDelayMax time.Duration
	Seed          uint64
	Logger        *slog.Logger // nil: discard
}

type brokerState int

const (
	brokerUp brokerState = iota
	brokerStopped
	brokerKilled
)

type host struct {
	name         string
	nodeID       int
	address      string
	state        brokerState
	dead         bool          // the node's daemon was killed (KillNode)
	flooding     bool          // the node published to its own broker while subscribed to it
	subs         []*subscriber // in subscription order: the broker writes to them in turn
	blockedUntil time.Time     // fan-out blocked behind a dead subscriber until then
	// After RestartNodeStale: the nodes whose tunnel to this one is stale
	// (their daemons still hold its old endpoint and key), and whether this
	// node sending to one of them first re-keys that pair.
	staleFrom   map[*host]bool
	healsOnSend bool
	inbox       []map[string]any
	sent        uint64
	recv        uint64
}

type listenKey struct {
	node  *host
	topic string
}

// Spell is a span of time; To is zero while it lasts.
type Spell struct{ From, To time.Time }

// Request is one pilotctl run as the daemon received it, in arrival order.
type Request struct {
	At    time.Time
	Op    string // "publish", "subscribe", "info", ...
	Node  string // the node it ran on ("" unnamed)
	Host  string // the target broker, if any
	Topic string
	Data  string // a publish's payload
	// Refused: its node's daemon was killed, so it failed not_running.
	Refused bool
}

// Rekey is a restarted node (RestartNodeStale) re-keying its pair with a
// peer by sending to it first: from At on, the peer's traffic to Node
// gets through again.
type Rekey struct {
	Node, Peer string
	At         time.Time
}

type subscriber struct {
	topic string
	node  *host // the node it runs on; nil: unnamed (PILOT_STANDIN_NODE unset)
	ch    chan streamLine
	done  chan struct{}
	once  sync.Once
	// Once its node is killed: how many events it absorbed, and when the first.
	dead      bool
	absorbed  int
	firstLost time.Time
}

func (s *subscriber) close() { s.once.Do(func() { close(s.done) }) }

// Daemon is a fake pilot daemon simulating several nodes and their brokers.
type Daemon struct {
	opts    Options
	ln      net.Listener
	logger  *slog.Logger
	started time.Time
	tmpDir  string

	mu            sync.Mutex
	rng           *rand.Rand
	hosts         []*host
	closed        bool
	conns         map[net.Conn]*host // each client connection's node (nil: unnamed)
	selfPublishes int
	floodDelays   []time.Duration // drawn per publish (FloodDelayMax)
	// listening: each node's live subscriptions per topic, on any broker;
	// deaf: the spells when a node that had one had none.
	listening map[listenKey]int
	deaf      map[listenKey][]Spell
	requests  []Request
	rekeys    []Rekey
	quit      chan struct{}
	wg        sync.WaitGroup
}

// StartDaemon starts a Daemon for a test and stops it in t.Cleanup.
func StartDaemon(t TB, opts Options) *Daemon {
	t.Helper()
	d, err := NewDaemon(opts)
	if err != nil {
		t.Fatalf("pilotstandin: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// NewDaemon starts a Daemon listening on opts.Socket.
func NewDaemon(opts Options) (*Daemon, error) {
	if len(opts.Hosts) == 0 {
		opts.Hosts = []string{"node-1"}
	}
	if opts.IdleDrop <= 0 {
		opts.IdleDrop = 120 * time.Second
	}
	if opts.LiveDelayMin <= 0 && opts.LiveDelayMax <= 0 {
		opts.LiveDelayMin, opts.LiveDelayMax = 80*time.Millisecond, 220*time.Millisecond
	}
	if opts.LiveDelayMax < opts.LiveDelayMin {
		opts.LiveDelayMax = opts.LiveDelayMin
	}
	if opts.KillHang <= 0 {
		opts.KillHang = 29 * time.Second
	}
	if opts.DeadSubscriberWindow <= 0 {
		opts.DeadSubscriberWindow = 4
	}
	if opts.DeadSubscriberBlock <= 0 {
		opts.DeadSubscriberBlock = 30 * time.Second
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{
		opts:      opts,
		logger:    logger,
		started:   time.Now(),
		rng:       rand.New(rand.NewPCG(opts.Seed, 0x5eed)),
		conns:     map[net.Conn]*host{},
		quit:      make(chan struct{}),
		listening: map[listenKey]int{},
		deaf:      map[listenKey][]Spell{},
	}
	if d.opts.Socket == "" {
		// Unix socket paths are limited to ~108 bytes: keep it short.
		dir, err := os.MkdirTemp("", "pilot")
		if err != nil {
			return nil, err
		}
		d.tmpDir = dir
		d.opts.Socket = filepath.Join(dir, "pilot.sock")
	}
	for _, h := range opts.Hosts {
		d.addHostLocked(h)
	}
	ln, err := net.Listen("unix", d.opts.Socket)
	if err != nil {
		if d.tmpDir != "" {
			os.RemoveAll(d.tmpDir)
		}
		return nil, fmt.Errorf("listen on %s: %w", d.opts.Socket, err)
	}
	d.ln = ln
	d.wg.Add(1)
	go d.accept()
	return d, nil
}

func (d *Daemon) addHostLocked(name string) *host {
	for _, h := range d.hosts {
		if h.name == name {
			return h
		}
	}
	id := len(d.hosts) + 1
	h := &host{
		name:    name,
		nodeID:  id,
		address: fmt.Sprintf("0:0000.0000.%04X", id),
	}
	d.hosts = append(d.hosts, h)
	return h
}

// Socket returns the daemon's unix socket path.
func (d *Daemon) Socket() string { return d.opts.Socket }

// Env returns the environment a pilotctl process needs to reach this daemon
// ("PILOT_SOCKET=...").
func (d *Daemon) Env() []string { return []string{EnvSocket + "=" + d.opts.Socket} }

// Address returns the pilot address of host ("0:0000.0000.0001"), or "".
func (d *Daemon) Address(name string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h := d.findLocked(name); h != nil {
		return h.address
	}
	return ""
}

// findLocked resolves a host by name, address or node id.
func (d *Daemon) findLocked(ref string) *host {
	for _, h := range d.hosts {
		if h.name == ref || h.address == ref || strconv.Itoa(h.nodeID) == ref {
			return h
		}
	}
	return nil
}

// StopBroker stops host's broker cleanly: its subscribers see EOF at once;
// publish and subscribe to it fail with not_found until StartBroker.
func (d *Daemon) StopBroker(name string) { d.setState(name, brokerStopped, true) }

// KillBroker kills host's broker hard: its subscribers hear nothing (they are
// dropped by their idle timer), publish and subscribe to it hang for
// KillHang and then fail with connection_failed, until StartBroker.
func (d *Daemon) KillBroker(name string) { d.setState(name, brokerKilled, false) }

// StartBroker (re)starts host's broker, adding the host if it is new.
func (d *Daemon) StartBroker(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addHostLocked(name).state = brokerUp
}

func (d *Daemon) setState(name string, st brokerState, eof bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.findLocked(name)
	if h == nil {
		return
	}
	h.state = st
	for _, s := range h.subs {
		if eof {
			s.close()
		} // killed: orphaned, left to the idle timer
	}
	h.subs = nil
	h.blockedUntil = time.Time{}
}

// KillNode kills node name's daemon hard: its broker as KillBroker; its
// clients' connections end at once (their pilotctl exits with
// connection_failed) and new pilotctl runs on it fail with not_running; and
// its subscriptions to other brokers stay registered there, dead: each such
// broker's fan-out blocks behind them (Options.DeadSubscriberWindow and
// DeadSubscriberBlock), as Pilot's does. RestartNode brings it back.
func (d *Daemon) KillNode(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.findLocked(name)
	if n == nil {
		return
	}
	n.dead = true
	n.state = brokerKilled
	n.subs, n.blockedUntil = nil, time.Time{}
	for _, h := range d.hosts {
		for _, s := range h.subs {
			if s.node == n {
				s.dead = true
			}
		}
	}
	for c, node := range d.conns {
		if node == n {
			c.Close()
		}
	}
}

// RestartNode brings a killed node back: its daemon and broker run again,
// its dead subscriptions are gone from every broker (their fan-out resumes),
// a flooding broker is calm again, and it holds no stale tunnel to any
// restarted node (a fresh daemon keys every pair anew, which is also the
// fix for a peer that refuses a restarted node's key).
func (d *Daemon) RestartNode(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.findLocked(name)
	if n == nil {
		return
	}
	n.dead, n.flooding, n.state = false, false, brokerUp
	n.staleFrom = nil
	for _, h := range d.hosts {
		live := h.subs[:0]
		for _, s := range h.subs {
			if s.node != n || !s.dead {
				live = append(live, s)
			}
		}
		clear(h.subs[len(live):])
		h.subs = live
		h.blockedUntil = time.Time{}
		delete(h.staleFrom, n)
	}
}

// RestartNodeStale restarts a killed node as a real Pilot daemon comes back
// after kill -9: it runs (its own clients and broker work), but every other
// node's daemon still holds a tunnel to its old endpoint and key, so their
// publishes and subscriptions to it hang KillHang and fail. healsOnSend:
// the restarted node publishing or subscribing to a node first re-keys that
// pair, as with a persisted identity and no beacon relay; false: that node
// refuses its key for good (Pilot 4c54cc0 after relaying through the beacon:
// "Ed25519 pubkey mismatch with registry"), its traffic to it hangs too.
func (d *Daemon) RestartNodeStale(name string, healsOnSend bool) {
	d.RestartNode(name)
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.findLocked(name)
	if n == nil {
		return
	}
	n.staleFrom, n.healsOnSend = map[*host]bool{}, healsOnSend
	for _, h := range d.hosts {
		if h != n {
			n.staleFrom[h] = true
		}
	}
}

// listenLocked counts a node's live subscription on topic starting (+1)
// or ending (-1), and opens or closes its deaf spell.
func (d *Daemon) listenLocked(n *host, topic string, delta int) {
	if n == nil {
		return
	}
	k := listenKey{n, topic}
	d.listening[k] += delta
	spells := d.deaf[k]
	switch {
	case delta > 0 && d.listening[k] == 1 && len(spells) > 0 && spells[len(spells)-1].To.IsZero():
		spells[len(spells)-1].To = time.Now()
	case delta < 0 && d.listening[k] == 0:
		d.deaf[k] = append(spells, Spell{From: time.Now()})
	}
}

// DeafSpells returns the spells when node name, once subscribed to topic,
// had no live subscription to it on any broker (every one reset or ended
// at once): it heard nothing on topic then. The last one's To is zero
// while it lasts.
func (d *Daemon) DeafSpells(name, topic string) []Spell {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Spell(nil), d.deaf[listenKey{d.findLocked(name), topic}]...)
}

// StaleTunnels returns how many nodes still hold a stale tunnel to name.
func (d *Daemon) StaleTunnels(name string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h := d.findLocked(name); h != nil {
		return len(h.staleFrom)
	}
	return 0
}

// cutOffLocked reports whether traffic from node from (nil: unnamed) to
// node to is lost to a stale tunnel; a restarted node's own traffic heals
// the pair when it may.
func (d *Daemon) cutOffLocked(from, to *host) bool {
	if from == nil || to == nil || from == to {
		return false
	}
	if to.staleFrom[from] {
		return true
	}
	if from.staleFrom[to] {
		if !from.healsOnSend {
			return true
		}
		delete(from.staleFrom, to)
		d.rekeys = append(d.rekeys, Rekey{Node: from.name, Peer: to.name, At: time.Now()})
	}
	return false
}

// Requests returns every request received so far, in arrival order.
func (d *Daemon) Requests() []Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Request(nil), d.requests...)
}

// Rekeys returns the pairs re-keyed by a restarted node so far, in order.
func (d *Daemon) Rekeys() []Rekey {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Rekey(nil), d.rekeys...)
}

// SelfPublishes counts publishes from a node to its own broker while it
// was subscribed there: on real Pilot each sets the daemon flooding
// (~75,000 packets/s, 100 % CPU until restarted); here the broker stops
// delivering until RestartNode.
func (d *Daemon) SelfPublishes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.selfPublishes
}

// FloodDelays returns the delay drawn for each publish so far, in order
// (Options.FloodDelayMax).
func (d *Daemon) FloodDelays() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Duration(nil), d.floodDelays...)
}

// Blocked reports whether host's fan-out is blocked behind a dead subscriber.
func (d *Daemon) Blocked(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.findLocked(name)
	return h != nil && time.Now().Before(h.blockedUntil)
}

// BlockedUntil reports when host's fan-out, last blocked behind a dead
// subscriber, resumes (or resumed); zero if it has not blocked since the
// node was (re)started.
func (d *Daemon) BlockedUntil(name string) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h := d.findLocked(name); h != nil {
		return h.blockedUntil
	}
	return time.Time{}
}

// Subscribers returns how many live subscriptions host's broker has on
// topic (exact match; "" counts all). Tests use it to wait until a
// subscriber is live, since pilot itself gives no ready signal.
func (d *Daemon) Subscribers(name, topic string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.findLocked(name)
	if h == nil {
		return 0
	}
	n := 0
	for _, s := range h.subs {
		if !s.dead && (topic == "" || s.topic == topic) {
			n++
		}
	}
	return n
}

// InjectRaw writes line verbatim (it should not contain a newline) to every
// live NDJSON subscriber of topic on host, as if the stream were corrupted.
// It returns the number of subscribers reached.
func (d *Daemon) InjectRaw(name, topic, line string) int {
	return d.fanout(name, topic, streamLine{Raw: &line})
}

func (d *Daemon) fanout(name, topic string, l streamLine) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.findLocked(name)
	if h == nil || h.state != brokerUp || h.flooding {
		return 0
	}
	now := time.Now()
	if now.Before(h.blockedUntil) {
		return 0
	}
	n := 0
	for i, s := range h.subs {
		if s.topic != topic && s.topic != "*" {
			continue
		}
		if s.dead {
			if s.absorbed == 0 {
				s.firstLost = now
			}
			if s.absorbed++; s.absorbed <= d.opts.DeadSubscriberWindow {
				continue
			}
			// The write to the dead node blocks the broker until the
			// connection is reset; then the dead subscription is gone.
			h.blockedUntil = s.firstLost.Add(d.opts.DeadSubscriberBlock)
			h.subs = append(h.subs[:i:i], h.subs[i+1:]...)
			d.logger.Warn("pilotstandin: fan-out blocked behind a dead subscriber", "host", name, "until", h.blockedUntil)
			return n
		}
		select {
		case s.ch <- l:
			n++
		default:
			d.logger.Warn("pilotstandin: subscriber backlog full, event dropped", "host", name, "topic", topic)
		}
	}
	return n
}

// Close stops the daemon, closing every connection.
func (d *Daemon) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.quit)
	err := d.ln.Close()
	for c := range d.conns {
		c.Close()
	}
	for _, h := range d.hosts {
		for _, s := range h.subs {
			s.close()
		}
	}
	d.mu.Unlock()
	d.wg.Wait()
	if d.tmpDir != "" {
		os.RemoveAll(d.tmpDir)
	}
	return err
}

func (d *Daemon) accept() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		if d.closed {
			d.mu.Unlock()
			c.Close()
			return
		}
		d.conns[c] = nil
		d.wg.Add(1)
		d.mu.Unlock()
		go func() {
			defer d.wg.Done()
			defer func() {
				d.mu.Lock()
				delete(d.conns, c)
				d.mu.Unlock()
				c.Close()
			}()
			d.serve(c)
		}()
	}
}

func writeJSON(c net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.Write(append(b, '\n'))
	return err
}

func fail(code, msg, hint string) response {
	return response{Code: code, Message: msg, Hint: hint}
}

// sleepOrGone waits d, returning false if the daemon closes or the client hangs up.
func (d *Daemon) sleepOrGone(wait time.Duration, gone <-chan struct{}) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-d.quit:
		return false
	case <-gone:
		return false
	}
}

func (d *Daemon) serve(c net.Conn) {
	r := bufio.NewReaderSize(c, 64<<10)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return
	}
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		writeJSON(c, fail(CodeInvalidArgument, "bad request: "+err.Error(), ""))
		return
	}
	d.mu.Lock()
	rec := Request{At: time.Now(), Op: req.Op, Node: req.Node, Host: req.Host, Topic: req.Topic}
	if req.Op == "publish" {
		rec.Data = req.Data
	}
	if req.Node != "" {
		n := d.findLocked(req.Node)
		if n != nil && n.dead {
			rec.Refused = true
			d.requests = append(d.requests, rec)
			d.mu.Unlock()
			writeJSON(c, fail(CodeNotRunning, "daemon for node "+strconv.Quote(req.Node)+" is not running", "start the daemon: pilotctl daemon start"))
			return
		}
		if _, ok := d.conns[c]; ok {
			d.conns[c] = n
		}
	}
	d.requests = append(d.requests, rec)
	d.mu.Unlock()
	// gone closes when the client hangs up (it never sends more after the request).
	gone := make(chan struct{})
	go func() {
		var b [1]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				close(gone)
				return
			}
		}
	}()
	switch req.Op {
	case "info":
		writeJSON(c, d.info(req))
	case "publish":
		writeJSON(c, d.publish(req, gone))
	case "send-message":
		writeJSON(c, d.sendMessage(req))
	case "inbox":
		writeJSON(c, d.inbox(req))
	case "subscribe":
		d.subscribe(c, req, gone)
	case "find", "lookup":
		writeJSON(c, d.registry(req))
	default:
		writeJSON(c, fail(CodeInvalidArgument, "unknown command "+strconv.Quote(req.Op), ""))
	}
}

func (d *Daemon) localLocked(req request) (*host, *response) {
	if req.Node == "" {
		return d.hosts[0], nil
	}
	h := d.findLocked(req.Node)
	if h == nil {
		r := fail(CodeNotRunning, "daemon for node "+strconv.Quote(req.Node)+" is not running", "")
		return nil, &r
	}
	return h, nil
}

func (d *Daemon) info(req request) response {
	d.mu.Lock()
	defer d.mu.Unlock()
	me, errResp := d.localLocked(req)
	if errResp != nil {
		return *errResp
	}
	sum := sha256.Sum256([]byte(me.name))
	peers := []any{}
	for _, h := range d.hosts {
		if h != me && h.state == brokerUp {
			peers = append(peers, map[string]any{"node_id": h.nodeID, "address": h.address, "hostname": h.name})
		}
	}
	return response{OK: true, Data: map[string]any{
		"node_id":     me.nodeID,
		"address":     me.address,
		"hostname":    me.name,
		"public_key":  base64.StdEncoding.EncodeToString(sum[:]),
		"uptime_secs": int(time.Since(d.started).Seconds()),
		"peers":       len(peers),
		"peer_list":   peers,
		"conn_list":   []any{},
		"bytes_sent":  me.sent,
		"bytes_recv":  me.recv,
	}}
}

// target resolves a publish/subscribe target, applying broker state. It may
// hang (killed broker); ok=false means resp is the error to return.
func (d *Daemon) target(req request, gone <-chan struct{}) (*host, *response) {
	ref := req.Host
	d.mu.Lock()
	h := d.findLocked(ref)
	var st brokerState
	cut := false
	if h != nil {
		st = h.state
		if req.Node != "" {
			cut = d.cutOffLocked(d.findLocked(req.Node), h)
		}
	}
	d.mu.Unlock()
	switch {
	case h == nil || st == brokerStopped:
		r := fail(CodeNotFound, "node "+strconv.Quote(ref)+" not found", "check the address or hostname")
		return nil, &r
	case st == brokerKilled || cut:
		if !d.sleepOrGone(d.opts.KillHang, gone) {
			return nil, nil
		}
		r := fail(CodeConnectionFailed, "dial "+h.address+":1002: timeout", "")
		return nil, &r
	}
	return h, nil
}

func (d *Daemon) publish(req request, gone <-chan struct{}) response {
	if req.Topic == "" {
		return fail(CodeInvalidArgument, "topic is required", "")
	}
	h, errResp := d.target(req, gone)
	if errResp != nil {
		return *errResp
	}
	if h == nil {
		return fail(CodeInternal, "cancelled", "")
	}
	d.mu.Lock()
	if req.Node != "" && d.findLocked(req.Node) == h {
		for _, s := range h.subs {
			if s.node == h && (s.topic == req.Topic || s.topic == "*") {
				// Real pilot accepts it and then floods: flag it, and the
				// broker stops delivering until the node restarts.
				d.selfPublishes++
				h.flooding = true
				d.logger.Warn("pilotstandin: node published to its own broker while subscribed: flooding", "host", h.name)
				break
			}
		}
	}
	var busy time.Duration
	if d.opts.FloodDelayMax > 0 {
		busy = time.Duration(d.rng.Int64N(int64(d.opts.FloodDelayMax) + 1))
		d.floodDelays = append(d.floodDelays, busy)
	}
	d.mu.Unlock()
	if busy > 0 && !d.sleepOrGone(busy, gone) {
		return fail(CodeInternal, "cancelled", "")
	}
	d.fanout(h.name, req.Topic, streamLine{Event: &event{Topic: req.Topic, Data: req.Data, Bytes: len(req.Data)}})
	d.mu.Lock()
	h.recv += uint64(len(req.Data))
	addr := h.address
	d.mu.Unlock()
	return response{OK: true, Data: map[string]any{"target": addr, "topic": req.Topic, "bytes": len(req.Data)}}
}

func (d *Daemon) subscribe(c net.Conn, req request, gone <-chan struct{}) {
	h, errResp := d.target(req, gone)
	if errResp != nil {
		writeJSON(c, *errResp)
		return
	}
	if h == nil {
		return
	}
	d.mu.Lock()
	wait := d.opts.LiveDelayMin
	if span := d.opts.LiveDelayMax - d.opts.LiveDelayMin; span > 0 {
		wait += time.Duration(d.rng.Int64N(int64(span) + 1))
	}
	var reset time.Duration
	if d.opts.ResetEvery > 0 {
		reset = d.opts.ResetEvery/2 + time.Duration(d.rng.Int64N(int64(d.opts.ResetEvery)+1))
	}
	d.mu.Unlock()
	// No ready signal: nothing is written until the first event.
	if !d.sleepOrGone(wait, gone) {
		return
	}
	s := &subscriber{topic: req.Topic, ch: make(chan streamLine, 4096), done: make(chan struct{})}
	d.mu.Lock()
	if h.state != brokerUp || d.closed {
		d.mu.Unlock()
		return // EOF
	}
	if req.Node != "" {
		s.node = d.findLocked(req.Node)
	}
	h.subs = append(h.subs, s)
	d.listenLocked(s.node, req.Topic, +1)
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		if !s.dead { // a dead node's subscription stays until reset (fanout)
			for i, o := range h.subs {
				if o == s {
					h.subs = append(h.subs[:i:i], h.subs[i+1:]...)
					break
				}
			}
		}
		d.listenLocked(s.node, req.Topic, -1)
		d.mu.Unlock()
	}()
	idle := d.opts.IdleDrop
	if req.IdleDropMs > 0 {
		idle = time.Duration(req.IdleDropMs) * time.Millisecond
	}
	timer := time.NewTimer(idle)
	defer timer.Stop()
	var resetC <-chan time.Time
	if reset > 0 {
		rt := time.NewTimer(reset)
		defer rt.Stop()
		resetC = rt.C
	}
	var gap time.Duration // between two writes on this connection
	if d.opts.EventsPerSec > 0 {
		gap = time.Second / time.Duration(d.opts.EventsPerSec)
	}
	var lastWrite time.Time
	for {
		select {
		case l := <-s.ch:
			if wait := gap - time.Since(lastWrite); wait > 0 && !d.sleepOrGone(wait, gone) {
				return
			}
			if err := writeJSON(c, l); err != nil {
				return
			}
			lastWrite = time.Now()
			timer.Reset(idle)
		case <-timer.C:
			d.logger.Debug("pilotstandin: idle subscription dropped", "host", h.name, "topic", req.Topic)
			return
		case <-resetC:
			d.logger.Debug("pilotstandin: subscription reset", "host", h.name, "topic", req.Topic)
			return
		case <-s.done:
			// Broker stopped cleanly: what it had already sent still arrives, then EOF.
			for {
				select {
				case l := <-s.ch:
					if writeJSON(c, l) != nil {
						return
					}
				default:
					return
				}
			}
		case <-gone:
			return
		case <-d.quit:
			return
		}
	}
}

// registry answers find (by host name, through the local daemon) and lookup
// (by node id, from the registry): a node is registered unless its broker
// was stopped cleanly (a clean stop deregisters; a killed daemon stays
// registered until the registry reaps it, minutes later).
func (d *Daemon) registry(req request) response {
	d.mu.Lock()
	defer d.mu.Unlock()
	var h *host
	for _, o := range d.hosts {
		if (req.Op == "find" && o.name == req.Host) || (req.Op == "lookup" && strconv.Itoa(o.nodeID) == req.Host) {
			h = o
		}
	}
	if h == nil || h.state == brokerStopped {
		if req.Op == "find" {
			return fail(CodeNotFound, "cannot find "+strconv.Quote(req.Host)+" — hostname not found or no mutual trust", "")
		}
		return fail(CodeConnectionFailed, "lookup: node "+req.Host+": node not found", "")
	}
	data := map[string]any{"node_id": h.nodeID, "address": h.address, "hostname": h.name, "public": true}
	return response{OK: true, Data: data}
}

func (d *Daemon) sendMessage(req request) response {
	typ := req.Type
	if typ == "" {
		typ = "text"
	}
	var label string
	switch typ {
	case "text":
		label = "TEXT"
	case "json":
		label = "JSON"
		if !json.Valid([]byte(req.Data)) {
			return fail(CodeInvalidArgument, "data is not valid JSON", "use --type text")
		}
	case "binary":
		label = "BINARY"
	default:
		return fail(CodeInvalidArgument, "unknown message type "+strconv.Quote(typ), "use text, json or binary")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	me, errResp := d.localLocked(req)
	if errResp != nil {
		return *errResp
	}
	h := d.findLocked(req.Host)
	if h == nil || h.state == brokerStopped {
		return fail(CodeNotFound, "node "+strconv.Quote(req.Host)+" not found", "")
	}
	if h.state == brokerKilled {
		return fail(CodeConnectionFailed, "dial "+h.address+":1001: connection refused", "")
	}
	h.inbox = append(h.inbox, map[string]any{
		"type":        label,
		"from":        me.address,
		"data":        req.Data,
		"bytes":       len(req.Data),
		"received_at": time.Now().UTC().Format(time.RFC3339),
	})
	me.sent += uint64(len(req.Data))
	return response{OK: true, Data: map[string]any{"target": h.address, "type": typ, "bytes": len(req.Data), "ack": true}}
}

func (d *Daemon) inbox(req request) response {
	d.mu.Lock()
	defer d.mu.Unlock()
	me, errResp := d.localLocked(req)
	if errResp != nil {
		return *errResp
	}
	var msgs any // null when empty, as pilotctl prints it
	if len(me.inbox) > 0 {
		list := make([]any, len(me.inbox))
		for i, m := range me.inbox {
			list[i] = m
		}
		msgs = list
	}
	total := len(me.inbox)
	if req.Clear {
		me.inbox = nil
	}
	return response{OK: true, Data: map[string]any{
		"messages": msgs,
		"total":    total,
		"dir":      filepath.Join("/home", me.name, ".pilot", "inbox"),
	}}
}
