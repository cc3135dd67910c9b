package hostfuncs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// PilotOptions configures NewPilotTransport.
type PilotOptions struct {
	// Binary is the pilotctl executable: a name looked up in PATH or a path.
	// Default "pilotctl".
	Binary string
	// Hosts are the broker hosts (pilot host name, address or node id) to
	// publish to and subscribe on. Every publish goes to all of them; received
	// copies are de-duplicated so each message is delivered once. At least
	// one, at most 64.
	Hosts []string
	// Env is appended to this process's environment for every pilotctl run
	// (e.g. "PILOT_SOCKET=/run/pilot.sock", "HOME=/var/lib/agent").
	Env []string
	// PublishTimeout bounds one publish process (a killed broker holds a
	// publish for ~29 s). Default 5 s. A shorter ctx deadline wins.
	PublishTimeout time.Duration
	// MaxConcurrentPublishes bounds the pilotctl publish processes running at
	// once (process start-up costs 55-85 ms of CPU). Default 8.
	MaxConcurrentPublishes int
	// BackoffMin/BackoffMax bound the jittered exponential back-off between
	// restarts of a subscribe process. Defaults 200 ms and 2 s (a follower
	// must be back soon after a broker restart; each try costs a process).
	BackoffMin, BackoffMax time.Duration
	// StableAfter: a subscribe process that ran at least this long resets the
	// back-off to BackoffMin (the ~120 s idle drop restarts at once). Default 5 s.
	StableAfter time.Duration
	// DedupWindow: with several hosts, a copy of a message already delivered
	// from another host within this window is dropped. Default 10 s.
	DedupWindow time.Duration
	// MaxLineBytes: longer NDJSON lines are rejected. Default 1 MiB.
	MaxLineBytes int
	// PayloadMustBeJSON rejects (counts in Rejected) payloads that are not
	// valid JSON. Default false: the core validates payloads itself.
	PayloadMustBeJSON bool
	// OnGap, if set, is called (from the subscription's goroutine) each time a
	// subscribe process ended and will be restarted: messages may have been
	// missed between err and the restart going live.
	OnGap  func(topic, host string, err error)
	Logger *slog.Logger // nil: slog.Default()
}

// PilotTransport is a Transport over the pilotctl CLI (Pilot Protocol's
// event-stream broker), following /work/shared/pilotctl.md: one long-lived
// `pilotctl --json subscribe <host> <topic>` process per host and topic,
// reading NDJSON, restarted with back-off whenever it exits; one
// `pilotctl --json publish <host> <topic> --data=<payload>` process per
// message and host, with a deadline. pilotctl is always run with an argument
// vector, never a shell.
//
// Subscribers on the publishing node receive its publishes too (pilot fans
// out to every subscriber of the broker), so a node sees its own messages.
//
// Payloads must be UTF-8 text without NUL bytes (pilot carries data as a
// string); JSON always is. Topics and hosts must not start with "--".
type PilotTransport struct {
	bin    string
	opts   PilotOptions
	logger *slog.Logger
	sem    chan struct{}
	c      counters

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

var _ Transport = (*PilotTransport)(nil)

// NewPilotTransport checks the options and that the pilotctl binary exists.
// A missing binary gives an error naming it that matches exec.ErrNotFound.
func NewPilotTransport(opts PilotOptions) (*PilotTransport, error) {
	if opts.Binary == "" {
		opts.Binary = "pilotctl"
	}
	if len(opts.Hosts) == 0 {
		return nil, fmt.Errorf("hostfuncs: pilot transport needs at least one broker host: %w", ErrInvalidArgument)
	}
	if len(opts.Hosts) > 64 {
		return nil, fmt.Errorf("hostfuncs: pilot transport supports at most 64 broker hosts: %w", ErrInvalidArgument)
	}
	for _, h := range opts.Hosts {
		if err := checkArg("host", h); err != nil {
			return nil, err
		}
	}
	if opts.PublishTimeout <= 0 {
		opts.PublishTimeout = 5 * time.Second
	}
	if opts.MaxConcurrentPublishes <= 0 {
		opts.MaxConcurrentPublishes = 8
	}
	if opts.BackoffMin <= 0 {
		opts.BackoffMin = 200 * time.Millisecond
	}
	if opts.BackoffMax < opts.BackoffMin {
		opts.BackoffMax = max(2*time.Second, opts.BackoffMin)
	}
	if opts.StableAfter <= 0 {
		opts.StableAfter = 5 * time.Second
	}
	if opts.DedupWindow <= 0 {
		opts.DedupWindow = 10 * time.Second
	}
	if opts.MaxLineBytes <= 0 {
		opts.MaxLineBytes = 1 << 20
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	bin, err := exec.LookPath(opts.Binary)
	if err != nil {
		return nil, missingBinary(opts.Binary, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &PilotTransport{
		bin:    bin,
		opts:   opts,
		logger: logger.With("transport", "pilot"),
		sem:    make(chan struct{}, opts.MaxConcurrentPublishes),
		ctx:    ctx,
		cancel: cancel,
	}, nil
}

func missingBinary(bin string, err error) error {
	return fmt.Errorf("hostfuncs: pilotctl binary %q not found (install Pilot Protocol's pilotctl or set the binary path): %v: %w", bin, err, exec.ErrNotFound)
}

func checkArg(what, v string) error {
	if v == "" || strings.HasPrefix(v, "--") || strings.ContainsRune(v, 0) {
		return fmt.Errorf("hostfuncs: pilot %s %q is empty, starts with \"--\" or contains NUL: %w", what, v, ErrInvalidArgument)
	}
	return nil
}

func (t *PilotTransport) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, t.bin, args...)
	cmd.Env = append(os.Environ(), t.opts.Env...)
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

// Publish runs one publish process per host, concurrently. It succeeds if at
// least one host accepted the message (each failing host is counted in
// PublishErrors and logged); if all fail it returns their errors joined.
// Errors match ErrTimeout (deadline hit), the *PilotError sentinels
// (ErrConnectionFailed, ErrNotFound, ...), ctx.Err() or ErrClosed.
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
	hosts := t.opts.Hosts
	errs := make([]error, len(hosts))
	if len(hosts) == 1 {
		errs[0] = t.publishOne(ctx, hosts[0], topic, payload)
	} else {
		var wg sync.WaitGroup
		for i, h := range hosts {
			wg.Go(func() { errs[i] = t.publishOne(ctx, h, topic, payload) })
		}
		wg.Wait()
	}
	ok := false
	for i, err := range errs {
		if err == nil {
			ok = true
			continue
		}
		t.c.publishErrors.Add(1)
		if len(hosts) > 1 {
			t.logger.Warn("pilot publish failed on one host", "host", hosts[i], "topic", topic, "err", err)
		}
	}
	if ok {
		t.c.published.Add(1)
		return nil
	}
	if len(hosts) == 1 {
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
		return fmt.Errorf("hostfuncs: pilot payloads must be UTF-8 text without NUL: %w", ErrInvalidArgument)
	}
	return nil
}

func (t *PilotTransport) publishOne(ctx context.Context, host, topic string, payload []byte) error {
	ctx, cancel := context.WithTimeout(ctx, t.opts.PublishTimeout)
	defer cancel()
	stop := context.AfterFunc(t.ctx, cancel)
	defer stop()
	select {
	case t.sem <- struct{}{}:
	case <-ctx.Done():
		return t.ctxError(ctx, "publish", host)
	}
	defer func() { <-t.sem }()
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

// ctxError explains why ctx (a child of the caller's ctx, the publish
// deadline and the transport) ended.
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
	ctx, cancel := context.WithTimeout(ctx, t.opts.PublishTimeout)
	defer cancel()
	cmd := t.command(ctx, "--json", "info")
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = 1<<20, 64<<10
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return nil, missingBinary(t.opts.Binary, err)
		}
		if ctx.Err() != nil {
			return nil, t.ctxError(ctx, "info", "")
		}
		return nil, parsePilotError("info", "", stderr.Bytes(), err)
	}
	var env struct {
		Status string         `json:"status"`
		Data   map[string]any `json:"data"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &env); err != nil || env.Status != "ok" {
		return nil, fmt.Errorf("pilotctl info: unexpected output %q: %w", truncate(stdout.Bytes(), 200), ErrInternal)
	}
	return env.Data, nil
}

// Subscribe starts one `pilotctl --json subscribe <host> <topic>` per host
// (topic "*" is pilot's only wildcard: every topic, each Message carrying its
// own)
// and returns once they are started (pilot gives no ready signal: the
// subscription goes live 80-220 ms later, and anything published before is
// lost). The processes are restarted with back-off whenever they exit; each
// restart is counted in Resubscribes (and reported to OnGap). It fails at
// once only for a bad topic, a closed transport or a missing binary.
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
	s := &pilotSub{t: t, topic: topic, ch: make(chan pilotLine, 64)}
	cmds := make([]*pilotProc, len(t.opts.Hosts))
	for i, h := range t.opts.Hosts {
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
	var readers sync.WaitGroup
	for i, h := range t.opts.Hosts {
		readers.Add(1)
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer readers.Done()
			s.loop(ctx, i, h, cmds[i])
		}()
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer stop()
		defer cancel()
		s.deliverLoop(ctx, deliver, len(t.opts.Hosts) > 1)
		readers.Wait()
	}()
	return nil
}

// Stats returns the transport's counters.
func (t *PilotTransport) Stats() Stats { return t.c.snapshot() }

// Close kills every pilotctl process of this transport and waits for its
// goroutines. Idempotent.
func (t *PilotTransport) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
	return nil
}

type pilotLine struct {
	host    int
	topic   string
	payload []byte
}

type pilotSub struct {
	t     *PilotTransport
	topic string
	ch    chan pilotLine
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

func (s *pilotSub) start(ctx context.Context, host string) (*pilotProc, error) {
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
		return nil, fmt.Errorf("hostfuncs: starting pilotctl subscribe %s %s: %w", host, s.topic, err)
	}
	return &pilotProc{cmd: cmd, stdout: stdout, stderr: stderr}, nil
}

// loop reads one host's subscribe process and restarts it until ctx ends.
func (s *pilotSub) loop(ctx context.Context, idx int, host string, p *pilotProc) {
	t := s.t
	log := t.logger.With("host", host, "topic", s.topic)
	backoff := t.opts.BackoffMin
	for {
		started := time.Now()
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
				select {
				case s.ch <- pilotLine{host: idx, topic: topic, payload: payload}:
					return true
				case <-ctx.Done():
					return false
				}
			})
			err := p.wait()
			if ctx.Err() != nil {
				return
			}
			var gapErr error = &PilotError{Op: "subscribe", Host: host, Code: "internal", Message: "subscribe exited"}
			if err != nil {
				gapErr = parsePilotError("subscribe", host, p.stderr.Bytes(), err)
			}
			t.c.resubscribes.Add(1)
			lived := time.Since(started)
			if lived >= t.opts.StableAfter {
				backoff = t.opts.BackoffMin
			}
			log.Warn("pilot subscription ended; resubscribing (messages in the gap are lost)", "err", gapErr, "lived", lived.Round(time.Millisecond), "backoff", backoff)
			if t.opts.OnGap != nil {
				t.opts.OnGap(s.topic, host, gapErr)
			}
		}
		// Full jitter in [backoff/2, backoff].
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		backoff = min(backoff*2, t.opts.BackoffMax)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		var err error
		p, err = s.start(ctx, host)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error("pilot subscribe: cannot start pilotctl", "err", err)
			p = nil
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
	var ev struct {
		Bytes *int    `json:"bytes"`
		Data  *string `json:"data"`
		Topic *string `json:"topic"`
	}
	if err := json.Unmarshal(line, &ev); err != nil {
		return "", nil, fmt.Errorf("not a JSON event: %w", err)
	}
	if ev.Data == nil || ev.Topic == nil {
		return "", nil, errors.New("event without string data or topic")
	}
	if s.topic != "*" && *ev.Topic != s.topic {
		return "", nil, fmt.Errorf("event for topic %q on a subscription to %q", *ev.Topic, s.topic)
	}
	payload := []byte(*ev.Data)
	if s.t.opts.PayloadMustBeJSON && !json.Valid(payload) {
		return "", nil, errors.New("payload is not JSON")
	}
	return *ev.Topic, payload, nil
}

type dedupEntry struct {
	at    time.Time
	hosts uint64 // bit i: host i delivered a copy since the last delivery
}

// deliverLoop is the subscription's only caller of deliver.
func (s *pilotSub) deliverLoop(ctx context.Context, deliver func(Message), dedup bool) {
	seen := map[[32]byte]*dedupEntry{}
	lastPrune := time.Now()
	window := s.t.opts.DedupWindow
	for {
		select {
		case <-ctx.Done():
			return
		case l := <-s.ch:
			if dedup {
				now := time.Now()
				if now.Sub(lastPrune) > window {
					for k, e := range seen {
						if now.Sub(e.at) > window {
							delete(seen, k)
						}
					}
					lastPrune = now
				}
				h := sha256.New()
				h.Write([]byte(l.topic))
				h.Write([]byte{0})
				h.Write(l.payload)
				var key [32]byte
				h.Sum(key[:0])
				bit := uint64(1) << l.host
				if e := seen[key]; e != nil && now.Sub(e.at) <= window && e.hosts&bit == 0 {
					// Another host's copy of a message already delivered.
					e.hosts |= bit
					s.t.c.duplicates.Add(1)
					continue
				}
				// New, or a genuine repeat from the same host.
				seen[key] = &dedupEntry{at: now, hosts: bit}
			}
			if ctx.Err() != nil {
				return
			}
			s.t.c.received.Add(1)
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
