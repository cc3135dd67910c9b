package transport

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/electcore/electcore/internal/backoff"
)

// PilotOptions configures NewPilotTransport.
type PilotOptions struct {
	// Binary is the pilotctl executable: a name looked up in PATH or a path.
	// Default "pilotctl".
	Binary string
	// Hosts are the brokers (pilot host name, address or node id) every
	// message is published to, each in parallel with its own deadline,
	// queue and back-off. At least one, at most 32. Never this node's own:
	// a node publishing to its own broker while subscribed floods its
	// daemon (docs/pilotctl.md); PilotLayout splits a broker list safely.
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
	// (PilotLayout says when).
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
	// and counted) but one probe per back-off. Defaults 250 ms and 5 s.
	PublishBackoffMin, PublishBackoffMax time.Duration
	// BackoffMin/BackoffMax bound the jittered exponential back-off between
	// restarts of a subscribe process that failed without delivering.
	// Defaults 200 ms and 2 s.
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

// PilotTransport is a Transport over the pilotctl CLI (Pilot Protocol's
// event-stream broker), following the contract in docs/pilotctl.md:
//
//   - Receiving: one long-lived `pilotctl --json subscribe <host> <topic>`
//     process per subscribed broker, reading NDJSON, restarted with back-off
//     whenever it exits or stalls (delivers nothing while others deliver).
//     Copies of a payload from several brokers are delivered once.
//   - Sending: one `pilotctl --json publish <host> <topic> --data=<payload>`
//     process per message and broker. Each broker has its own bounded queue
//     (oldest dropped when full), a fixed number of workers, a deadline per
//     publish and a back-off after failures, so a dead, hanging or slow
//     broker never delays the others or the next message.
//
// pilotctl is always run with an argument vector, never a shell.
//
// Payloads must be UTF-8 text without NUL bytes (pilot carries data as a
// string); JSON always is. Topics and hosts must not start with "--".
type PilotTransport struct {
	bin     string
	opts    PilotOptions
	logger  *slog.Logger
	c       counters
	pubs    []*brokerPub  // one per Hosts entry
	brokers []*brokerStat // by name: Hosts then SubscribeHosts, each once

	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc
	pending atomic.Int64  // queued or in-flight (message, broker) publishes
	drained chan struct{} // signalled when pending drops to 0
	mu      sync.Mutex
	closed  bool
	subs    map[*pilotSub]struct{} // for Loopback
	wg      sync.WaitGroup
}

var _ Transport = (*PilotTransport)(nil)

// NewPilotTransport checks the options and that the pilotctl binary exists,
// and starts the per-broker publish workers (Close stops them).
// A missing binary gives an error naming it that matches exec.ErrNotFound.
func NewPilotTransport(opts PilotOptions) (*PilotTransport, error) {
	if opts.Binary == "" {
		opts.Binary = "pilotctl"
	}
	if opts.SubscribeHosts == nil {
		opts.SubscribeHosts = opts.Hosts
	}
	for _, list := range []struct {
		what  string
		hosts []string
	}{{"publish", opts.Hosts}, {"subscribe", opts.SubscribeHosts}} {
		if len(list.hosts) == 0 {
			return nil, fmt.Errorf("transport: pilot transport needs at least one broker host to %s: %w", list.what, ErrInvalidArgument)
		}
		if len(list.hosts) > 32 {
			return nil, fmt.Errorf("transport: pilot transport supports at most 32 broker hosts: %w", ErrInvalidArgument)
		}
		seen := map[string]bool{}
		for _, h := range list.hosts {
			if err := checkArg("host", h); err != nil {
				return nil, err
			}
			if seen[h] {
				return nil, fmt.Errorf("transport: pilot broker host %q listed twice: %w", h, ErrInvalidArgument)
			}
			seen[h] = true
		}
	}
	defDur := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defDur(&opts.PublishTimeout, time.Second)
	defDur(&opts.PublishBackoffMin, 250*time.Millisecond)
	if opts.PublishBackoffMax < opts.PublishBackoffMin {
		opts.PublishBackoffMax = max(5*time.Second, opts.PublishBackoffMin)
	}
	if opts.PublishWorkers <= 0 {
		opts.PublishWorkers = 2
	}
	if opts.PublishQueue <= 0 {
		opts.PublishQueue = 16
	}
	if opts.SubscriptionsPerHost <= 0 {
		opts.SubscriptionsPerHost = 1
	}
	if n := len(opts.SubscribeHosts) * opts.SubscriptionsPerHost; n > 32 {
		return nil, fmt.Errorf("transport: %d subscriptions per topic, at most 32: %w", n, ErrInvalidArgument)
	}
	defDur(&opts.BackoffMin, 200*time.Millisecond)
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = max(2*time.Second, opts.BackoffMin)
	}
	defDur(&opts.StableAfter, 5*time.Second)
	defDur(&opts.StallAfter, 2*time.Second)
	defDur(&opts.DedupWindow, 10*time.Second)
	defDur(&opts.CutOffAfter, 15*time.Second)
	if opts.DedupSize <= 0 {
		opts.DedupSize = 1024
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = 1 << 20
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	bin, err := exec.LookPath(opts.Binary)
	if err != nil {
		return nil, missingBinary(opts.Binary, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &PilotTransport{
		bin:     bin,
		opts:    opts,
		logger:  logger.With("transport", "pilot"),
		ctx:     ctx,
		cancel:  cancel,
		subs:    map[*pilotSub]struct{}{},
		drained: make(chan struct{}, 1),
	}
	for _, h := range opts.Hosts {
		b := t.broker(h)
		b.publishing = true
		p := &brokerPub{t: t, stat: b, wake: make(chan struct{}, 1), backoff: backoff.New(opts.PublishBackoffMin, opts.PublishBackoffMax)}
		t.pubs = append(t.pubs, p)
		for range opts.PublishWorkers {
			t.wg.Go(p.work)
		}
	}
	for _, h := range opts.SubscribeHosts {
		t.broker(h).subscribed = true
	}
	return t, nil
}

// broker returns the stats of broker host, adding it if new.
func (t *PilotTransport) broker(host string) *brokerStat {
	for _, b := range t.brokers {
		if b.name == host {
			return b
		}
	}
	b := &brokerStat{name: host}
	t.brokers = append(t.brokers, b)
	return b
}

func missingBinary(bin string, err error) error {
	return fmt.Errorf("transport: pilotctl binary %q not found (install Pilot Protocol's pilotctl or set the binary path): %v: %w", bin, err, exec.ErrNotFound)
}

func checkArg(what, v string) error {
	if v == "" || strings.HasPrefix(v, "--") || strings.ContainsRune(v, 0) {
		return fmt.Errorf("transport: pilot %s %q is empty, starts with \"--\" or contains NUL: %w", what, v, ErrInvalidArgument)
	}
	return nil
}

func (t *PilotTransport) command(ctx context.Context, args ...string) *exec.Cmd {
	return pilotCommand(ctx, t.bin, t.opts.Env, args...)
}

func pilotCommand(ctx context.Context, bin string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = pilotProcAttr()
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// enter registers an operation with the WaitGroup unless the transport is closed.
func (t *PilotTransport) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

func (t *PilotTransport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Publish hands the message to every broker's queue and returns as soon as
// one broker accepted it (the others carry on in the background, each up to
// its own deadline), or with every broker's error joined when all failed,
// or when ctx ends. Errors match ErrTimeout (deadline hit), ErrBackoff (the
// broker is backing off after failures, or its queue dropped the message),
// the *PilotError sentinels (ErrConnectionFailed, ErrNotFound, ...),
// ctx.Err() or ErrClosed. Per-broker outcomes are in BrokerStats.
func (t *PilotTransport) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := t.publishCheck(ctx, topic, payload); err != nil {
		t.c.publishErrors.Add(1)
		return err
	}
	if !t.enter() {
		t.c.publishErrors.Add(1)
		return ErrClosed
	}
	defer t.wg.Done()
	payload = bytes.Clone(payload) // the queues outlive this call
	if t.opts.Loopback {
		t.loopback(topic, payload)
	}
	job := &pubJob{topic: topic, payload: payload, queued: time.Now(), result: make(chan error, len(t.pubs))}
	for _, p := range t.pubs {
		p.enqueue(job)
	}
	var errs []error
	for range t.pubs {
		select {
		case err := <-job.result:
			if err == nil {
				t.c.published.Add(1)
				return nil
			}
			errs = append(errs, err)
		case <-ctx.Done():
			t.c.publishErrors.Add(1)
			return fmt.Errorf("pilotctl publish: no broker accepted the message in time: %w", ctx.Err())
		case <-t.ctx.Done():
			t.c.publishErrors.Add(1)
			return ErrClosed
		}
	}
	t.c.publishErrors.Add(1)
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

func (t *PilotTransport) publishCheck(ctx context.Context, topic string, payload []byte) error {
	if t.isClosed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkArg("topic", topic); err != nil {
		return err
	}
	if bytes.IndexByte(payload, 0) >= 0 || !utf8.Valid(payload) {
		return fmt.Errorf("transport: pilot payloads must be UTF-8 text without NUL: %w", ErrInvalidArgument)
	}
	return nil
}

// loopback hands a publish to this transport's own matching subscriptions.
func (t *PilotTransport) loopback(topic string, payload []byte) {
	t.mu.Lock()
	subs := make([]*pilotSub, 0, len(t.subs))
	for s := range t.subs {
		if s.topic == topic || s.topic == "*" {
			subs = append(subs, s)
		}
	}
	t.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- pilotLine{host: len(s.hosts), topic: topic, payload: payload}:
		case <-s.ctx.Done():
		}
	}
}

// ErrBackoff: a broker did not get a message because it is backing off
// after failures, or because its queue was full (the oldest is dropped) or
// the message waited longer than the publish deadline.
var ErrBackoff = errors.New("broker backing off or saturated: message dropped")

// pubJob is one message on its way to every publish broker; each sends
// exactly one result.
type pubJob struct {
	topic   string
	payload []byte
	queued  time.Time
	result  chan error // capacity: the number of brokers
}

// brokerPub is one broker's publishing side: a bounded queue served by a
// fixed number of workers, and a back-off that keeps a failing broker from
// holding workers and processes.
type brokerPub struct {
	t    *PilotTransport
	stat *brokerStat
	wake chan struct{}

	mu       sync.Mutex
	q        []*pubJob
	failures int // consecutive failed publishes
	backoff  *backoff.Backoff
	retryAt  time.Time // while failing: no message before this
	probing  bool      // while failing: one message is in flight to test the broker
	lastErr  error
	// failingSince: the first failure since the last success; checked:
	// the registry was asked about this failing spell; cutOff: the spell
	// was reported as a registered node answering nothing.
	failingSince    time.Time
	checked, cutOff bool
}

func (p *brokerPub) drop(j *pubJob, why string) {
	p.stat.dropped.Add(1)
	j.result <- fmt.Errorf("pilotctl publish %s: %s: %w", p.stat.name, why, ErrBackoff)
}

// finish gives a queued job its result for this broker.
func (p *brokerPub) finish(j *pubJob, err error) {
	j.result <- err
	if p.t.pending.Add(-1) == 0 {
		select {
		case p.t.drained <- struct{}{}:
		default:
		}
	}
}

// dropQueued drops a job that was queued.
func (p *brokerPub) dropQueued(j *pubJob, why string) {
	p.stat.dropped.Add(1)
	p.finish(j, fmt.Errorf("pilotctl publish %s: %s: %w", p.stat.name, why, ErrBackoff))
}

func (p *brokerPub) enqueue(j *pubJob) {
	p.mu.Lock()
	if p.failures > 0 {
		if p.probing || time.Now().Before(p.retryAt) {
			failures, last := p.failures, p.lastErr
			p.mu.Unlock()
			p.drop(j, fmt.Sprintf("skipped while backing off after %d failure(s), the last: %v", failures, last))
			return
		}
		p.probing = true
	}
	var old *pubJob
	if len(p.q) >= p.t.opts.PublishQueue {
		old, p.q = p.q[0], p.q[1:]
	}
	p.t.pending.Add(1)
	p.q = append(p.q, j)
	p.mu.Unlock()
	if old != nil {
		p.dropQueued(old, "queue full, oldest message dropped")
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *brokerPub) pop() *pubJob {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.q) == 0 {
		return nil
	}
	j := p.q[0]
	p.q[0] = nil
	p.q = p.q[1:]
	if len(p.q) > 0 { // another worker may be idle
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	return j
}

// work is one publish worker of the broker, until Close.
func (p *brokerPub) work() {
	for {
		select {
		case <-p.t.ctx.Done():
			return
		case <-p.wake:
		}
		for j := p.pop(); j != nil; j = p.pop() {
			if time.Since(j.queued) > p.t.opts.PublishTimeout {
				p.dropQueued(j, "waited longer than the publish deadline")
				p.settle(nil, true)
				continue
			}
			start := time.Now()
			err := p.t.publishOne(p.stat.name, j.topic, j.payload)
			if errors.Is(err, ErrClosed) {
				p.finish(j, err)
				return
			}
			if err == nil {
				p.stat.published.Add(1)
				p.stat.latency.observe(time.Since(start))
			} else {
				p.stat.publishErrors.Add(1)
			}
			p.settle(err, false)
			p.finish(j, err)
		}
	}
}

// settle records a publish outcome for the back-off; skipped: the message
// never reached pilotctl (a probe that was dropped ends the probe). After a
// failure the queued messages are dropped: they would wait for a broker
// that just failed.
func (p *brokerPub) settle(err error, skipped bool) {
	p.mu.Lock()
	p.probing = false
	if skipped {
		p.mu.Unlock()
		return
	}
	if err == nil {
		if p.failures > 0 {
			args := []any{"host", p.stat.name, "after_failures", p.failures}
			if p.cutOff {
				args = append(args, "cut_off_for", time.Since(p.failingSince).Round(time.Second))
			}
			p.t.logger.Info("pilot broker publishes again", args...)
		}
		p.failures = 0
		p.backoff.Reset()
		p.failingSince, p.checked, p.cutOff = time.Time{}, false, false
		p.mu.Unlock()
		return
	}
	p.failures++
	p.lastErr = err
	now := time.Now()
	if p.failingSince.IsZero() {
		p.failingSince = now
	}
	if !p.checked && now.Sub(p.failingSince) >= p.t.opts.CutOffAfter && !errors.Is(err, ErrClosed) {
		p.checked = true
		since := p.failingSince
		p.t.wg.Go(func() { p.checkCutOff(since) })
	}
	wait := p.backoff.Next()
	p.retryAt = time.Now().Add(wait)
	queued := p.q
	p.q = nil
	failures := p.failures
	p.mu.Unlock()
	p.t.logger.Warn("pilot publish failed; backing off this broker", "host", p.stat.name, "err", err, "failures", failures, "backoff", wait.Round(time.Millisecond))
	for _, j := range queued {
		p.dropQueued(j, "broker failed while the message waited")
	}
}

// checkCutOff asks the registry whether the node of a broker that answered
// nothing since since is registered, and says what that means, once.
func (p *brokerPub) checkCutOff(since time.Time) {
	host := p.stat.name
	ctx, cancel := context.WithTimeout(p.t.ctx, max(p.t.opts.PublishTimeout, 5*time.Second))
	defer cancel()
	registered, err := p.t.registered(ctx, host)
	log := p.t.logger
	switch {
	case err != nil:
		if p.t.ctx.Err() == nil {
			log.Info("pilot broker answers nothing; cannot ask the registry about its node", "host", host, "since", since.Format(time.RFC3339Nano), "err", err)
		}
	case !registered:
		log.Warn("pilot broker answers nothing and its node is not registered: its daemon is down or was stopped", "host", host, "since", since.Format(time.RFC3339Nano))
	default:
		p.mu.Lock()
		p.cutOff = p.failures > 0 && p.failingSince.Equal(since) // still the same spell
		report := p.cutOff
		p.mu.Unlock()
		if report {
			log.Warn("pilot broker answers nothing while its node is registered", "host", host, "since", since.Format(time.RFC3339Nano),
				"likely_cause", "its daemon was restarted (kill -9, crash) and this node's daemon still holds the tunnel to its old endpoint and key: Pilot re-keys only when the restarted node sends first, and after a relay through the beacon refuses its key for good ('Ed25519 pubkey mismatch with registry' in this node's daemon log); or its daemon is down and the registry has not dropped it yet (minutes after a hard kill)",
				"fix", "on that node run 'pilotctl ping' to this node (an agent there re-keys by publishing); run the daemons with -identity FILE so that a restart keeps the node's key, and on a network without NAT with -beacon= (no relay); if this node's daemon logs the pubkey mismatch, restart it (docs/pilotctl.md)")
		}
	}
}

// registered asks the registry whether host (a node id, an address
// "N:XXXX.XXXX.XXXX" or a host name) is a registered node.
func (t *PilotTransport) registered(ctx context.Context, host string) (bool, error) {
	args := []string{"--json", "find", host}
	if id, ok := pilotNodeID(host); ok {
		args = []string{"--json", "lookup", strconv.FormatUint(uint64(id), 10)}
	}
	cmd := t.command(ctx, args...)
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = 64<<10, 64<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return true, nil
	}
	if ctx.Err() != nil {
		return false, t.ctxError(ctx, args[1], host)
	}
	var pe *PilotError
	if errors.As(parsePilotError(args[1], host, stderr.Bytes(), err), &pe) &&
		(pe.Code == "not_found" || strings.Contains(pe.Message, "not found")) {
		return false, nil
	}
	return false, parsePilotError(args[1], host, stderr.Bytes(), err)
}

// pilotNodeID reads a node id given as a number or an address
// ("0:0000.0000.0005": the node is the last 8 hex digits).
func pilotNodeID(host string) (uint32, bool) {
	if id, err := strconv.ParseUint(host, 10, 32); err == nil {
		return uint32(id), true
	}
	net, rest, ok := strings.Cut(host, ":")
	if !ok || net == "" || len(rest) != 14 || rest[4] != '.' || rest[9] != '.' {
		return 0, false
	}
	id, err := strconv.ParseUint(rest[5:9]+rest[10:14], 16, 32)
	if err != nil {
		return 0, false
	}
	return uint32(id), true
}

// publishOne runs one publish process, bounded by PublishTimeout and Close.
func (t *PilotTransport) publishOne(host, topic string, payload []byte) error {
	ctx, cancel := context.WithTimeout(t.ctx, t.opts.PublishTimeout)
	defer cancel()
	cmd := t.command(ctx, "--json", "publish", host, topic, "--data="+string(payload))
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = 64<<10, 64<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		var env struct {
			Status string `json:"status"`
		}
		if jerr := json.Unmarshal(stdout.Bytes(), &env); jerr != nil || env.Status != "ok" {
			t.logger.Warn("pilot publish: exit 0 but unexpected output", "host", host, "stdout", truncate(stdout.Bytes(), 200))
		}
		return nil
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
		return missingBinary(t.opts.Binary, err)
	}
	if ctx.Err() != nil {
		return t.ctxError(ctx, "publish", host)
	}
	return parsePilotError("publish", host, stderr.Bytes(), err)
}

// ctxError explains why ctx (a child of the transport's, with a deadline) ended.
func (t *PilotTransport) ctxError(ctx context.Context, op, host string) error {
	if t.ctx.Err() != nil {
		return ErrClosed
	}
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return fmt.Errorf("pilotctl %s %s: no answer in time: %w (%w)", op, host, ErrTimeout, context.DeadlineExceeded)
	}
	return fmt.Errorf("pilotctl %s %s: %w", op, host, ctx.Err())
}

// parsePilotError maps pilotctl's stderr JSON to a *PilotError.
func parsePilotError(op, host string, stderr []byte, runErr error) error {
	// The error JSON is the last JSON line on stderr.
	lines := bytes.Split(bytes.TrimSpace(stderr), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var e struct {
			Status  string `json:"status"`
			Code    string `json:"code"`
			Message string `json:"message"`
			Hint    string `json:"hint"`
		}
		if json.Unmarshal(lines[i], &e) == nil && e.Code != "" {
			return &PilotError{Op: op, Host: host, Code: e.Code, Message: e.Message, Hint: e.Hint}
		}
	}
	msg := strings.TrimSpace(string(truncate(stderr, 500)))
	if msg == "" {
		msg = runErr.Error()
	}
	return &PilotError{Op: op, Host: host, Code: "internal", Message: msg}
}

// Info runs `pilotctl --json info` and returns its data object (node_id,
// address, hostname, ...). Handy to check the daemon is up at start-up.
func (t *PilotTransport) Info(ctx context.Context) (map[string]any, error) {
	if t.isClosed() {
		return nil, ErrClosed
	}
	return pilotInfo(ctx, t.bin, t.opts.Binary, t.opts.Env, t.opts.PublishTimeout)
}

func pilotInfo(ctx context.Context, bin, name string, env []string, timeout time.Duration) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := pilotCommand(ctx, bin, env, "--json", "info")
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = 1<<20, 64<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return nil, missingBinary(name, err)
		}
		if ctx.Err() != nil {
			if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				return nil, fmt.Errorf("pilotctl info: no answer in time: %w (%w)", ErrTimeout, context.DeadlineExceeded)
			}
			return nil, fmt.Errorf("pilotctl info: %w", ctx.Err())
		}
		return nil, parsePilotError("info", "", stderr.Bytes(), err)
	}
	var envl struct {
		Status string         `json:"status"`
		Data   map[string]any `json:"data"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &envl); err != nil || envl.Status != "ok" {
		return nil, fmt.Errorf("pilotctl info: unexpected output %q: %w", truncate(stdout.Bytes(), 200), ErrInternal)
	}
	return envl.Data, nil
}

// PilotNode is the local pilot node, as `pilotctl --json info` reports it.
type PilotNode struct {
	NodeID   int64
	Address  string // "0:0000.0000.0005"
	Hostname string
}

// PilotLocalNode asks the local daemon (through opts.Binary and opts.Env)
// which node it is.
func PilotLocalNode(ctx context.Context, opts PilotOptions) (PilotNode, error) {
	name := cmp.Or(opts.Binary, "pilotctl")
	bin, err := exec.LookPath(name)
	if err != nil {
		return PilotNode{}, missingBinary(name, err)
	}
	info, err := pilotInfo(ctx, bin, name, opts.Env, cmp.Or(opts.PublishTimeout, 5*time.Second))
	if err != nil {
		return PilotNode{}, err
	}
	return ParsePilotNode(info)
}

// ParsePilotNode reads the node from info's data object: node_id (a
// number), address and hostname (strings; hostname may be empty).
func ParsePilotNode(info map[string]any) (PilotNode, error) {
	id, ok := info["node_id"].(float64)
	addr, _ := info["address"].(string)
	if !ok || id < 0 || id != float64(int64(id)) || addr == "" {
		return PilotNode{}, fmt.Errorf("pilotctl info: no numeric node_id and address in %v: %w", info, ErrInternal)
	}
	host, _ := info["hostname"].(string)
	return PilotNode{NodeID: int64(id), Address: addr, Hostname: host}, nil
}

// Is reports whether ref (a broker as given on the command line: host
// name, address or node id) names this node.
func (n PilotNode) Is(ref string) bool {
	if id, err := strconv.ParseInt(ref, 10, 64); err == nil {
		return id == n.NodeID
	}
	return strings.EqualFold(ref, n.Address) || (n.Hostname != "" && strings.EqualFold(ref, n.Hostname))
}

// PilotLayout decides, for the node self, which of brokers it publishes to
// and subscribes on (docs/pilotctl.md explains the layouts):
//
//   - self is not among brokers (dedicated broker nodes): publish to and
//     subscribe on every broker.
//   - self is among them (brokers are the members' own nodes): subscribe on
//     its own broker only and publish to every other one, never to its own
//     (a node publishing to its own broker while subscribed floods its
//     daemon); its own messages are looped back locally. A node that dies
//     then takes only its own broker with it.
//
// It fails if self is the only broker, or if the list names self twice.
func PilotLayout(self PilotNode, brokers []string) (publish, subscribe []string, loopback bool, err error) {
	var own []string
	for _, b := range brokers {
		if self.Is(b) {
			own = append(own, b)
		} else {
			publish = append(publish, b)
		}
	}
	switch {
	case len(own) == 0:
		return publish, publish, false, nil
	case len(own) > 1:
		return nil, nil, false, fmt.Errorf("transport: brokers %s all name this node (%s): list it once: %w", strings.Join(own, ", "), self.Address, ErrInvalidArgument)
	case len(publish) == 0:
		return nil, nil, false, fmt.Errorf("transport: the only broker, %s, is this node (%s): publishing to your own broker floods the pilot daemon; list the other members' nodes (or dedicated broker nodes) too: %w", own[0], self.Address, ErrInvalidArgument)
	}
	return publish, own, true, nil
}

// Subscribe starts one `pilotctl --json subscribe <host> <topic>` per
// subscribed broker (topic "*" is pilot's only wildcard: every topic, each
// Message carrying its own) and returns once they are started (pilot gives
// no ready signal: the subscription goes live 80-220 ms later, and anything
// published before is lost). The processes are restarted with back-off
// whenever they exit or stall; each restart is counted in Resubscribes and
// per broker (and reported to OnGap). It fails at once only for a bad
// topic, a closed transport or a missing binary.
func (t *PilotTransport) Subscribe(ctx context.Context, topic string, deliver func(Message)) error {
	if err := checkArg("topic", topic); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !t.enter() { // held until every goroutine of this subscription is started
		return ErrClosed
	}
	defer t.wg.Done()

	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(t.ctx, cancel)
	s := &pilotSub{t: t, topic: topic, ctx: ctx, ch: make(chan pilotLine, 64)}
	for _, h := range t.opts.SubscribeHosts {
		for range t.opts.SubscriptionsPerHost {
			s.hosts = append(s.hosts, &subHost{stat: t.broker(h)})
		}
	}
	cmds := make([]*pilotProc, len(s.hosts))
	for i, h := range s.hosts {
		p, err := s.start(ctx, h)
		if err != nil {
			cancel()
			stop()
			for _, p := range cmds[:i] {
				p.wait()
			}
			return err
		}
		cmds[i] = p
	}
	t.mu.Lock()
	t.subs[s] = struct{}{}
	t.mu.Unlock()
	var readers sync.WaitGroup
	for i, h := range s.hosts {
		readers.Add(1)
		t.wg.Go(func() {
			defer readers.Done()
			s.loop(ctx, i, h, cmds[i])
		})
	}
	t.wg.Go(func() { s.watchStalls(ctx) })
	t.wg.Go(func() {
		defer stop()
		defer cancel()
		s.deliverLoop(ctx, deliver)
		readers.Wait()
		t.mu.Lock()
		delete(t.subs, s)
		t.mu.Unlock()
	})
	return nil
}

// Stats returns the transport's counters.
func (t *PilotTransport) Stats() Stats { return t.c.snapshot() }

// PilotBrokerStats are one broker's counters (monotonic) as seen by one
// transport.
type PilotBrokerStats struct {
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
func (t *PilotTransport) BrokerStats() []PilotBrokerStats {
	out := make([]PilotBrokerStats, len(t.brokers))
	for i, b := range t.brokers {
		out[i] = PilotBrokerStats{
			Host: b.name, Publishing: b.publishing, Subscribed: b.subscribed,
			Published: b.published.Load(), PublishErrors: b.publishErrors.Load(), Dropped: b.dropped.Load(),
			Received: b.received.Load(), Delivered: b.delivered.Load(), Duplicates: b.duplicates.Load(),
			Restarts: b.restarts.Load(), Stalls: b.stalls.Load(),
			PublishLatency: b.latency.snapshot(),
		}
	}
	return out
}

// Close refuses new publishes, lets the queued and running ones finish
// (at most PublishTimeout + 0.5 s: a resign published just before Close must
// reach every broker, not only the first that accepted it), then kills
// every pilotctl process of this transport and waits for its goroutines.
// Idempotent.
func (t *PilotTransport) Close() error {
	t.mu.Lock()
	already := t.closed
	t.closed = true
	t.mu.Unlock()
	if !already {
		// The deadline, plus time to kill and reap a process that hit it.
		timer := time.NewTimer(t.opts.PublishTimeout + 500*time.Millisecond)
		for t.pending.Load() > 0 {
			select {
			case <-t.drained:
				continue
			case <-timer.C:
			}
			break
		}
		timer.Stop()
	}
	t.cancel()
	t.wg.Wait()
	for _, p := range t.pubs { // what the stopped workers left
		p.mu.Lock()
		q := p.q
		p.q = nil
		p.mu.Unlock()
		for _, j := range q {
			p.finish(j, ErrClosed)
		}
	}
	return nil
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

type pilotLine struct {
	host    int // index in pilotSub.hosts; len(hosts): the local loopback
	topic   string
	payload []byte
}

type pilotSub struct {
	t     *PilotTransport
	topic string
	ctx   context.Context
	ch    chan pilotLine
	hosts []*subHost
}

// subHost is one subscribed broker of a subscription.
type subHost struct {
	stat      *brokerStat
	lastEvent atomic.Int64 // unix ns of the last event read; 0: none yet
	since     atomic.Int64 // unix ns the current process started

	mu      sync.Mutex
	proc    *pilotProc // the running process; nil while backing off
	stalls  int        // consecutive stalls, reset by an event
	stalled bool       // the current process was killed as stalled
}

type pilotProc struct {
	cmd    *exec.Cmd
	stdout io.ReadCloser
	stderr *limitedBuffer
}

func (p *pilotProc) wait() error {
	io.Copy(io.Discard, p.stdout)
	return p.cmd.Wait()
}

func (s *pilotSub) start(ctx context.Context, h *subHost) (*pilotProc, error) {
	host := h.stat.name
	cmd := s.t.command(ctx, "--json", "subscribe", host, s.topic)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr := &limitedBuffer{max: 64 << 10}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return nil, missingBinary(s.t.opts.Binary, err)
		}
		return nil, fmt.Errorf("transport: starting pilotctl subscribe %s %s: %w", host, s.topic, err)
	}
	p := &pilotProc{cmd: cmd, stdout: stdout, stderr: stderr}
	h.mu.Lock()
	h.proc, h.stalled = p, false
	h.since.Store(time.Now().UnixNano())
	h.mu.Unlock()
	return p, nil
}

// loop reads one broker's subscribe process and restarts it until ctx ends.
func (s *pilotSub) loop(ctx context.Context, idx int, h *subHost, p *pilotProc) {
	t := s.t
	host := h.stat.name
	log := t.logger.With("host", host, "topic", s.topic)
	bo := backoff.New(t.opts.BackoffMin, t.opts.BackoffMax)
	for {
		started := time.Now()
		wait := time.Duration(0)
		if p != nil {
			readLines(bufio.NewReaderSize(p.stdout, 64<<10), t.opts.MaxLineBytes, func(line []byte, tooLong bool) bool {
				topic, payload, err := s.parse(line, tooLong)
				if err != nil {
					if n := t.c.rejected.Add(1); n <= 10 || n%100 == 0 { // bounded log volume
						log.Warn("pilot subscribe: rejected line", "err", err, "line", string(truncate(line, 200)), "rejected_total", n)
					}
					return true
				}
				if payload == nil {
					return true
				}
				h.lastEvent.Store(time.Now().UnixNano())
				h.stat.received.Add(1)
				select {
				case s.ch <- pilotLine{host: idx, topic: topic, payload: payload}:
					return true
				case <-ctx.Done():
					return false
				}
			})
			err := p.wait()
			h.mu.Lock()
			h.proc = nil
			stalled := h.stalled
			h.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			var gapErr error = &PilotError{Op: "subscribe", Host: host, Code: "internal", Message: "subscribe exited"}
			switch {
			case stalled:
				gapErr = &PilotError{Op: "subscribe", Host: host, Code: "timeout", Message: "stalled: killed and restarted"}
			case err != nil:
				gapErr = parsePilotError("subscribe", host, p.stderr.Bytes(), err)
			}
			if t.opts.OnGap != nil {
				t.opts.OnGap(s.topic, host, gapErr)
			}
			t.c.resubscribes.Add(1)
			h.stat.restarts.Add(1)
			lived := time.Since(started)
			if lived >= t.opts.StableAfter || h.lastEvent.Load() > started.UnixNano() {
				bo.Reset() // it worked (a reset, an idle drop): back at once
			} else {
				wait = bo.Next()
			}
			log.Warn("pilot subscription ended; resubscribing (messages in the gap are lost)", "err", gapErr, "lived", lived.Round(time.Millisecond), "wait", wait.Round(time.Millisecond))
		} else {
			wait = bo.Next()
		}
		if wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
		}
		var err error
		p, err = s.start(ctx, h)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error("pilot subscribe: cannot start pilotctl", "err", err)
			p = nil
		}
	}
}

// watchStalls kills a subscribe process that delivered nothing for
// StallAfter (doubling with each consecutive stall of that broker, up to
// 16×) while another broker of the subscription delivered within
// StallAfter, or that is the subscription's only one. A blocked broker
// fan-out, a half-dead connection or a hung pilotctl look like this.
func (s *pilotSub) watchStalls(ctx context.Context) {
	after := s.t.opts.StallAfter
	tick := time.NewTicker(max(after/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now().UnixNano()
		for i, h := range s.hosts {
			quiet := time.Duration(now - max(h.lastEvent.Load(), h.since.Load()))
			othersDeliver := len(s.hosts) == 1
			for j, o := range s.hosts {
				if j != i && time.Duration(now-o.lastEvent.Load()) < after {
					othersDeliver = true
				}
			}
			h.mu.Lock()
			if h.lastEvent.Load() > h.since.Load() {
				h.stalls = 0 // it delivered since its last start
			}
			if h.proc != nil && !h.stalled && othersDeliver && quiet > after<<min(h.stalls, 4) {
				h.stalls++
				h.stalled = true
				h.stat.stalls.Add(1)
				s.t.logger.Warn("pilot subscription stalled; restarting it", "host", h.stat.name, "topic", s.topic,
					"quiet", quiet.Round(time.Millisecond), "consecutive", h.stalls)
				h.proc.cmd.Process.Kill()
			}
			h.mu.Unlock()
		}
	}
}

// parse validates one NDJSON line {"bytes":N,"data":"<string>","topic":"..."}
// and returns its topic and payload (the data string's bytes). Blank lines
// give a nil payload and no error.
func (s *pilotSub) parse(line []byte, tooLong bool) (string, []byte, error) {
	if tooLong {
		return "", nil, fmt.Errorf("line longer than %d bytes", s.t.opts.MaxLineBytes)
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return "", nil, nil
	}
	// A map keeps the keys exact: encoding/json would match struct fields
	// case-insensitively and take {"dAtA":…} for data.
	var ev map[string]json.RawMessage
	if err := json.Unmarshal(line, &ev); err != nil {
		return "", nil, fmt.Errorf("not a JSON event: %w", err)
	}
	var data, topic string
	isString := func(v json.RawMessage) bool { return len(v) > 0 && v[0] == '"' }
	if !isString(ev["data"]) || !isString(ev["topic"]) ||
		json.Unmarshal(ev["data"], &data) != nil || json.Unmarshal(ev["topic"], &topic) != nil {
		return "", nil, errors.New("event without string data or topic")
	}
	if s.topic != "*" && topic != s.topic {
		return "", nil, fmt.Errorf("event for topic %q on a subscription to %q", topic, s.topic)
	}
	payload := []byte(data)
	if s.t.opts.PayloadMustBeJSON && !json.Valid(payload) {
		return "", nil, errors.New("payload is not JSON")
	}
	return topic, payload, nil
}

// dedup remembers the last DedupSize distinct payloads delivered (by a
// 64-bit hash of topic and payload) and which sources sent a copy since.
type dedup struct {
	window time.Duration
	seed   maphash.Seed
	seen   map[uint64]*dedupEntry
	ring   []uint64 // insertion order, for eviction
	next   int
}

type dedupEntry struct {
	at      time.Time
	sources uint64 // bit i: source i sent a copy since the delivery
	slot    int    // its place in ring
}

func newDedup(size int, window time.Duration) *dedup {
	return &dedup{window: window, seed: maphash.MakeSeed(), seen: make(map[uint64]*dedupEntry, size), ring: make([]uint64, 0, size)}
}

// fresh reports whether a copy from source should be delivered: it is not
// a copy of a payload delivered within the window from another source. A
// payload that the same source sends again is a genuine repeat (pilot
// brokers do not duplicate), delivered again.
func (d *dedup) fresh(source int, topic string, payload []byte, now time.Time) bool {
	var h maphash.Hash
	h.SetSeed(d.seed)
	h.WriteString(topic)
	h.WriteByte(0)
	h.Write(payload)
	key := h.Sum64()
	bit := uint64(1) << source
	if e := d.seen[key]; e != nil && now.Sub(e.at) <= d.window && e.sources&bit == 0 {
		e.sources |= bit
		return false
	}
	if e := d.seen[key]; e != nil { // a repeat: move it to the newest slot
		d.ring[e.slot] = 0
		delete(d.seen, key)
	}
	slot := len(d.ring)
	if slot < cap(d.ring) {
		d.ring = append(d.ring, key)
	} else {
		slot = d.next
		d.next = (d.next + 1) % cap(d.ring)
		if old, e := d.ring[slot], d.seen[d.ring[slot]]; e != nil && e.slot == slot {
			delete(d.seen, old)
		}
		d.ring[slot] = key
	}
	d.seen[key] = &dedupEntry{at: now, sources: bit, slot: slot}
	return true
}

// deliverLoop is the subscription's only caller of deliver.
func (s *pilotSub) deliverLoop(ctx context.Context, deliver func(Message)) {
	sources := len(s.hosts)
	if s.t.opts.Loopback {
		sources++
	}
	var dd *dedup
	if sources > 1 {
		dd = newDedup(s.t.opts.DedupSize, s.t.opts.DedupWindow)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case l := <-s.ch:
			var stat *brokerStat
			if l.host < len(s.hosts) {
				stat = s.hosts[l.host].stat
			}
			if dd != nil && !dd.fresh(l.host, l.topic, l.payload, time.Now()) {
				s.t.c.duplicates.Add(1)
				if stat != nil {
					stat.duplicates.Add(1)
				}
				continue
			}
			if ctx.Err() != nil {
				return
			}
			s.t.c.received.Add(1)
			if stat != nil {
				stat.delivered.Add(1)
			}
			deliver(Message{Topic: l.topic, Payload: l.payload})
		}
	}
}

// readLines calls fn for each line of r (without the newline); lines longer
// than max are passed truncated with tooLong set. It stops when fn returns
// false or r fails.
func readLines(r *bufio.Reader, max int, fn func(line []byte, tooLong bool) bool) {
	var buf []byte
	tooLong := false
	for {
		frag, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if !tooLong {
				buf = append(buf, frag...)
				if len(buf) > max {
					tooLong = true
				}
			}
			continue
		}
		if !tooLong {
			buf = append(buf, frag...)
			if len(buf) > max+1 {
				tooLong = true
			}
		}
		line := bytes.TrimRight(buf, "\r\n")
		if len(line) > 0 || tooLong {
			if !fn(line, tooLong) {
				return
			}
		}
		buf, tooLong = buf[:0], false
		if err != nil {
			return
		}
	}
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// limitedBuffer keeps the first max bytes written and discards the rest.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(truncate(p, room))
	}
	return len(p), nil
}

func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf.Bytes()...)
}
