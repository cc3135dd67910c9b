package pilot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/electcore/electcore/internal/backoff"
	"github.com/electcore/electcore/transport"
)

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
	t    *Transport
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
	// localDown: the last failure was our own daemon not running.
	localDown bool
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
	if p.failures > 0 && !p.localDown { // our own daemon down: try every message (settle)
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
				p.settle(nil, time.Time{})
				continue
			}
			start := time.Now()
			err := p.t.publishOne(p.stat.name, j.topic, j.payload)
			if errors.Is(err, transport.ErrClosed) {
				p.finish(j, err)
				return
			}
			if err == nil {
				p.stat.published.Add(1)
				p.stat.latency.observe(time.Since(start))
			} else {
				p.stat.publishErrors.Add(1)
			}
			p.settle(err, start)
			p.finish(j, err)
		}
	}
}

// settle records the outcome of a publish started at start for the
// back-off; a zero start: the message never reached pilotctl (a probe that
// was dropped ends the probe). After a failure the queued messages are
// dropped: they would wait for a broker that just failed.
func (p *brokerPub) settle(err error, start time.Time) {
	p.mu.Lock()
	p.probing = false
	if start.IsZero() {
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
		p.failures, p.localDown = 0, false
		p.backoff.Reset()
		p.failingSince, p.checked, p.cutOff = time.Time{}, false, false
		p.mu.Unlock()
		return
	}
	p.failures++
	p.lastErr = err
	now := time.Now()
	if errors.Is(err, transport.ErrNotRunning) {
		// Our own daemon is down: that says nothing about the broker, and
		// such a publish fails at once, without hanging. No back-off and no
		// failing spell for the broker: the first message after the daemon
		// is back goes out, and a restarted Pilot daemon is cut off from
		// each peer until it sends to it first (docs/pilotctl.md).
		first := !p.localDown
		p.localDown = true
		p.backoff.Reset()
		p.failingSince, p.checked, p.cutOff = time.Time{}, false, false
		p.mu.Unlock()
		if first {
			p.t.logger.Warn("pilot daemon not running; publishing to this broker again at every message", "host", p.stat.name, "err", err)
		}
		return
	}
	p.localDown = false
	if p.failingSince.IsZero() {
		p.failingSince = now
	}
	if !p.checked && now.Sub(p.failingSince) >= p.t.opts.CutOffAfter && !errors.Is(err, transport.ErrClosed) {
		p.checked = true
		since := p.failingSince
		p.t.wg.Go(func() { p.checkCutOff(since) })
	}
	// Counted from the failed publish's start, not its end: a publish to
	// an unreachable node hangs until its deadline, and a back-off added
	// after that would keep a broker that became reachable meanwhile
	// waiting for both. So a broker is tried again at most
	// max(PublishTimeout, PublishBackoffMax) after it answers again.
	wait := p.backoff.Next()
	p.retryAt = start.Add(wait)
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
func (t *Transport) registered(ctx context.Context, host string) (bool, error) {
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
	var pe *Error
	if errors.As(parsePilotError(args[1], host, stderr.Bytes(), err), &pe) &&
		(pe.Code == "not_found" || strings.Contains(pe.Message, "not found")) {
		return false, nil
	}
	return false, parsePilotError(args[1], host, stderr.Bytes(), err)
}

// publishOne runs one publish process, bounded by PublishTimeout and Close.
func (t *Transport) publishOne(host, topic string, payload []byte) error {
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
