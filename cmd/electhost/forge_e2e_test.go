package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/electcore/electcore/core"
	natstr "github.com/electcore/electcore/transport/nats"
	"github.com/nats-io/nats.go"
)

// forger is a publisher on a group's NATS subject that is no agent: it
// captures everything published there (the agents' own messages included),
// replays captured messages, publishes forged ones (signed with a key the
// test gives it, or not at all) and floods. The hostile e2e tests use it
// against real `electhost run` processes.
type forger struct {
	t       *testing.T
	nc      *nats.Conn
	group   string
	subject string

	sub      *nats.Subscription
	mu       sync.Mutex
	captured []captured
	recorded chan struct{} // closed and replaced at every capture
}

// captured is one message seen on the subject, with the fields the tests
// select by.
type captured struct {
	Raw  []byte
	Type string `json:"type"`
	From string `json:"from"`
	To   string `json:"to"`
	Term uint64 `json:"term"`
	Inc  uint64 `json:"inc"`
	// Epoch and Ctr are the signed envelope's (0 with auth off).
	Epoch uint64 `json:"epoch"`
	Ctr   uint64 `json:"ctr"`
	At    time.Time
}

// newForger connects to the broker at url and starts capturing group's
// subject.
func newForger(t *testing.T, url, group string) *forger {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	f := &forger{t: t, nc: nc, group: group, subject: natstr.Subject(core.Topic(group)), recorded: make(chan struct{})}
	if f.sub, err = nc.Subscribe(f.subject, func(m *nats.Msg) {
		c := captured{Raw: bytes.Clone(m.Data), At: time.Now()}
		json.Unmarshal(m.Data, &c) // a message that is no JSON is kept, untyped
		f.mu.Lock()
		f.captured = append(f.captured, c)
		close(f.recorded)
		f.recorded = make(chan struct{})
		f.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.FlushTimeout(flushWait); err != nil { // the subscription is live from here
		t.Fatal(err)
	}
	return f
}

// flushWait bounds a flush: the server's answer to a PING, which follows
// everything published before it. nats.go's default of 10 s timed out
// after a 300,000-message flood at load 20: a bound on the cause, not a
// timing claim.
const flushWait = 2 * time.Minute

// stopCapturing ends the capture (a flood need not be captured too).
func (f *forger) stopCapturing() {
	f.t.Helper()
	if err := f.sub.Unsubscribe(); err != nil {
		f.t.Fatal(err)
	}
}

// messages returns the captured messages that match (nil: all), oldest first.
func (f *forger) messages(match func(captured) bool) []captured {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []captured
	for _, c := range f.captured {
		if match == nil || match(c) {
			out = append(out, c)
		}
	}
	return out
}

// waitCaptured waits until n captured messages match and returns them.
func (f *forger) waitCaptured(n int, within time.Duration, what string, match func(captured) bool) []captured {
	f.t.Helper()
	deadline := time.After(within)
	for {
		f.mu.Lock()
		next := f.recorded
		f.mu.Unlock()
		if got := f.messages(match); len(got) >= n {
			return got
		}
		select {
		case <-next:
		case <-deadline:
			f.t.Fatalf("captured %d of %d %s within %v", len(f.messages(match)), n, what, within)
		}
	}
}

// publish sends payloads on the subject, in order, and waits until the
// broker has them.
func (f *forger) publish(payloads ...[]byte) {
	f.t.Helper()
	for _, p := range payloads {
		if err := f.nc.Publish(f.subject, p); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := f.nc.FlushTimeout(flushWait); err != nil {
		f.t.Fatal(err)
	}
}

// replay publishes the captured messages again, byte for byte.
func (f *forger) replay(cs []captured) {
	f.t.Helper()
	ps := make([][]byte, len(cs))
	for i, c := range cs {
		ps[i] = c.Raw
	}
	f.publish(ps...)
}

// forge encodes a message of this group from fields (the wire's JSON names;
// "group" is added), unsigned.
func (f *forger) forge(fields map[string]any) []byte {
	f.t.Helper()
	m := map[string]any{"group": f.group}
	for k, v := range fields {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// sign seals payload as a member holding key would (core.Seal), with the
// envelope's epoch and ctr.
func (f *forger) sign(mode core.AuthMode, key, payload []byte, epoch, ctr uint64) []byte {
	f.t.Helper()
	b, err := core.Seal(mode, key, f.group, payload, epoch, ctr)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// flood publishes n messages, message(i) for i in 0..n-1, as fast as the
// connection takes them, and returns how long that took.
func (f *forger) flood(n int, message func(i int) []byte) time.Duration {
	f.t.Helper()
	t0 := time.Now()
	for i := range n {
		if err := f.nc.Publish(f.subject, message(i)); err != nil {
			if err == nats.ErrSlowConsumer || strings.Contains(err.Error(), "slow consumer") {
				continue
			}
			f.t.Fatalf("flood: message %d: %v", i, err)
		}
	}
	if err := f.nc.FlushTimeout(flushWait); err != nil {
		f.t.Fatal(err)
	}
	return time.Since(t0)
}

// logLines returns the JSON log records of p's current run whose msg
// contains what.
func (p *agentProc) logLines(what string) []map[string]any {
	b, _ := readFileFrom(p.logPath, p.logFrom)
	var out []map[string]any
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, what) {
			continue
		}
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			if m, _ := rec["msg"].(string); strings.Contains(m, what) {
				out = append(out, rec)
			}
		}
	}
	return out
}

// waitLog waits until agent id's current run has logged a line whose msg
// contains what, and returns the first; it fails at once if the agent exits
// without.
func (c *cluster) waitLog(id, what string, within time.Duration) map[string]any {
	c.t.Helper()
	var rec map[string]any
	waitFor(c.t, within, fmt.Sprintf("%s logs %q", id, what), func() (bool, string) {
		p := c.proc(id)
		alive := p.alive()
		if ls := p.logLines(what); len(ls) > 0 {
			rec = ls[0]
			return true, ""
		}
		if !alive {
			c.t.Fatalf("%s exited %d before logging %q", id, p.exitCode, what)
		}
		return false, "not yet"
	})
	return rec
}

// readFileFrom reads path from byte offset from on.
func readFileFrom(path string, from int64) ([]byte, error) {
	b, err := os.ReadFile(path)
	return b[min(from, int64(len(b))):], err
}
