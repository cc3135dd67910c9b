package pilot

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/electcore/electcore/internal/backoff"
	"github.com/electcore/electcore/transport"
)

type pilotLine struct {
	host    int // index in pilotSub.hosts; len(hosts): the local loopback
	topic   string
	payload []byte
}

type pilotSub struct {
	t     *Transport
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
		var back <-chan struct{} // our own daemon is down: wait for it instead
		if p != nil {
			readLines(bufio.NewReaderSize(p.stdout, 64<<10), t.opts.MaxLineBytes, func(line []byte, tooLong bool) bool {
				topic, payload, err := s.parse(line, tooLong)
				if err != nil {
					if n := t.c.Rejected.Add(1); n <= 10 || n%100 == 0 { // bounded log volume
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
			var gapErr error = &Error{Op: "subscribe", Host: host, Code: "internal", Message: "subscribe exited"}
			switch {
			case stalled:
				gapErr = &Error{Op: "subscribe", Host: host, Code: "timeout", Message: "stalled: killed and restarted"}
			case err != nil:
				gapErr = parsePilotError("subscribe", host, p.stderr.Bytes(), err)
			}
			if t.opts.OnGap != nil {
				t.opts.OnGap(s.topic, host, gapErr)
			}
			t.c.Resubscribes.Add(1)
			h.stat.restarts.Add(1)
			lived := time.Since(started)
			switch {
			case errors.Is(gapErr, transport.ErrNotRunning):
				back = t.localDaemonBack()
			case lived >= t.opts.StableAfter || h.lastEvent.Load() > started.UnixNano():
				bo.Reset() // it worked (a reset, an idle drop): back at once
			default:
				wait = bo.Next()
			}
			if back != nil {
				log.Warn("pilot subscription ended; resubscribing when our daemon runs again", "err", gapErr, "lived", lived.Round(time.Millisecond))
			} else {
				log.Warn("pilot subscription ended; resubscribing (messages in the gap are lost)", "err", gapErr, "lived", lived.Round(time.Millisecond), "wait", wait.Round(time.Millisecond))
			}
		} else {
			wait = bo.Next()
		}
		if back != nil {
			select {
			case <-ctx.Done():
				return
			case <-back:
			}
			bo.Reset()
		} else if wait > 0 {
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

// localDaemonBack returns a channel closed when our own daemon, which a
// subscription found not running, answers again. A back-off grown while it
// is down would delay the resubscription past its restart by up to
// BackoffMax, and a restarted agent would hear nothing meanwhile; asking
// every BackoffMin instead, once for the whole transport (a pilotctl info
// that fails at once while the daemon is down), resubscribes within about
// that of the restart.
func (t *Transport) localDaemonBack() <-chan struct{} {
	t.localMu.Lock()
	defer t.localMu.Unlock()
	if t.localBack == nil {
		back := make(chan struct{})
		t.localBack = back
		t.logger.Warn("pilot daemon not running; subscriptions wait for it", "check_every", t.opts.BackoffMin)
		t.wg.Go(func() { t.pollLocalDaemon(back) }) // our caller holds t.wg
	}
	return t.localBack
}

// rekeyTopic is the topic of the message published to every broker when
// our own daemon answers again after an outage: nobody subscribes to it.
const rekeyTopic = "electcore.rekey"

// pollLocalDaemon asks our daemon every BackoffMin whether it runs, and
// closes back when it answers (anything but not_running) or ends with the
// transport.
func (t *Transport) pollLocalDaemon(back chan struct{}) {
	tick := time.NewTicker(t.opts.BackoffMin)
	defer tick.Stop()
	since := time.Now()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		_, err := pilotInfo(t.ctx, t.bin, t.opts.Binary, t.opts.Env, t.opts.PublishTimeout)
		if t.ctx.Err() != nil {
			return
		}
		if !errors.Is(err, transport.ErrNotRunning) {
			t.localMu.Lock()
			t.localBack = nil
			t.localMu.Unlock()
			t.logger.Info("pilot daemon answers again; resubscribing", "down_for", time.Since(since).Round(time.Millisecond))
			close(back)
			// A restarted Pilot daemon is cut off from each peer until it
			// sends to it first; a follower may have nothing to send for an
			// election timeout, its leader's heartbeats lost meanwhile. One
			// message to every broker, on a topic nobody subscribes to,
			// re-keys those tunnels now.
			t.Publish(t.ctx, rekeyTopic, []byte("rekey"))
			return
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

// deliverLoop is the subscription's only caller of deliver.
func (s *pilotSub) deliverLoop(ctx context.Context, deliver func(transport.Message)) {
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
				s.t.c.Duplicates.Add(1)
				if stat != nil {
					stat.duplicates.Add(1)
				}
				continue
			}
			if ctx.Err() != nil {
				return
			}
			s.t.c.Received.Add(1)
			if stat != nil {
				stat.delivered.Add(1)
			}
			deliver(transport.Message{Topic: l.topic, Payload: l.payload})
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
