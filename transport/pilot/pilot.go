package pilot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/electcore/electcore/internal/backoff"
	"github.com/electcore/electcore/transport"
)

// Transport is a transport.Transport over the pilotctl CLI (Pilot Protocol's
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
type Transport struct {
	bin     string
	opts    Options
	logger  *slog.Logger
	c       transport.Counters
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

	// localBack is closed when our own daemon, found not running by a
	// subscription, answers again; nil while it is not known to be down.
	localMu   sync.Mutex
	localBack chan struct{}
}

var _ transport.Transport = (*Transport)(nil)

// New checks the options and that the pilotctl binary exists,
// and starts the per-broker publish workers (Close stops them).
// A missing binary gives an error naming it that matches exec.ErrNotFound.
func New(opts Options) (*Transport, error) {
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
			return nil, fmt.Errorf("transport: pilot transport needs at least one broker host to %s: %w", list.what, transport.ErrInvalidArgument)
		}
		if len(list.hosts) > 32 {
			return nil, fmt.Errorf("transport: pilot transport supports at most 32 broker hosts: %w", transport.ErrInvalidArgument)
		}
		seen := map[string]bool{}
		for _, h := range list.hosts {
			if err := checkArg("host", h); err != nil {
				return nil, err
			}
			if seen[h] {
				return nil, fmt.Errorf("transport: pilot broker host %q listed twice: %w", h, transport.ErrInvalidArgument)
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
		opts.PublishBackoffMax = max(time.Second, opts.PublishBackoffMin)
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
		return nil, fmt.Errorf("transport: %d subscriptions per topic, at most 32: %w", n, transport.ErrInvalidArgument)
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
	t := &Transport{
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
func (t *Transport) broker(host string) *brokerStat {
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
		return fmt.Errorf("transport: pilot %s %q is empty, starts with \"--\" or contains NUL: %w", what, v, transport.ErrInvalidArgument)
	}
	return nil
}

func (t *Transport) command(ctx context.Context, args ...string) *exec.Cmd {
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
func (t *Transport) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Add(1)
	return true
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Publish hands the message to every broker's queue and returns as soon as
// one broker accepted it (the others carry on in the background, each up to
// its own deadline), or with every broker's error joined when all failed,
// or when ctx ends. Errors match ErrTimeout (deadline hit), ErrBackoff (the
// broker is backing off after failures, or its queue dropped the message),
// the *Error sentinels (ErrConnectionFailed, ErrNotFound, ...),
// ctx.Err() or ErrClosed. Per-broker outcomes are in BrokerStats.
func (t *Transport) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := t.publishCheck(ctx, topic, payload); err != nil {
		t.c.PublishErrors.Add(1)
		return err
	}
	if !t.enter() {
		t.c.PublishErrors.Add(1)
		return transport.ErrClosed
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
				t.c.Published.Add(1)
				return nil
			}
			errs = append(errs, err)
		case <-ctx.Done():
			t.c.PublishErrors.Add(1)
			return fmt.Errorf("pilotctl publish: no broker accepted the message in time: %w", ctx.Err())
		case <-t.ctx.Done():
			t.c.PublishErrors.Add(1)
			return transport.ErrClosed
		}
	}
	t.c.PublishErrors.Add(1)
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

func (t *Transport) publishCheck(ctx context.Context, topic string, payload []byte) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkArg("topic", topic); err != nil {
		return err
	}
	if bytes.IndexByte(payload, 0) >= 0 || !utf8.Valid(payload) {
		return fmt.Errorf("transport: pilot payloads must be UTF-8 text without NUL: %w", transport.ErrInvalidArgument)
	}
	return nil
}

// loopback hands a publish to this transport's own matching subscriptions.
func (t *Transport) loopback(topic string, payload []byte) {
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

// Subscribe starts one `pilotctl --json subscribe <host> <topic>` per
// subscribed broker (topic "*" is pilot's only wildcard: every topic, each
// Message carrying its own) and returns once they are started (pilot gives
// no ready signal: the subscription goes live 80-220 ms later, and anything
// published before is lost). The processes are restarted with back-off
// whenever they exit or stall; each restart is counted in Resubscribes and
// per broker (and reported to OnGap). It fails at once only for a bad
// topic, a closed transport or a missing binary.
func (t *Transport) Subscribe(ctx context.Context, topic string, deliver func(transport.Message)) error {
	if err := checkArg("topic", topic); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !t.enter() { // held until every goroutine of this subscription is started
		return transport.ErrClosed
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
func (t *Transport) Stats() transport.Stats { return t.c.Snapshot() }

// TextOnly reports that pilot carries only text (transport.TextOnly): an
// agent coalesces nothing over it, since each envelope would be one more
// command-line argument and process per publish.
func (t *Transport) TextOnly() bool { return true }

// Close refuses new publishes, lets the queued and running ones finish
// (at most PublishTimeout + 0.5 s: a resign published just before Close must
// reach every broker, not only the first that accepted it), then kills
// every pilotctl process of this transport and waits for its goroutines.
// Idempotent.
func (t *Transport) Close() error {
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
			p.finish(j, transport.ErrClosed)
		}
	}
	return nil
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
