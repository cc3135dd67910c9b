package main

import (
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/electcore/electcore/transport/natstest"
)

// tcpProxy forwards a port to a target until cut; heal listens again on the
// same port. It partitions one agent from the NATS server.
type tcpProxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]struct{}
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	p := &tcpProxy{t: t, target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) url() string { return "nats://" + p.addr }

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[u] = struct{}{}, struct{}{}
			p.mu.Unlock()
			go func() { io.Copy(u, c); u.Close(); c.Close() }()
			go func() { io.Copy(c, u); u.Close(); c.Close() }()
		}
	}()
}

// cut drops every connection and refuses new ones.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *tcpProxy) heal() {
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}

// A leader cut off from the bus (its process keeps running) must stop its
// leader-only command when its lease ends, before the others can elect a
// new leader; once healed it follows the new leader at the higher term.
func TestE2EPartitionedLeaderStopsCommand(t *testing.T) {
	t.Parallel()
	natsURL, _ := natstest.Start(t)
	u, _ := url.Parse(natsURL)
	hb, et := 100*time.Millisecond, 600*time.Millisecond
	c := newCluster(t, 3, nil, nil, hb, et, 20*time.Millisecond)
	proxies := map[string]*tcpProxy{}
	for _, id := range c.ids {
		proxies[id] = newTCPProxy(t, u.Host)
		c.transport = []string{"--transport", "nats", "--broker", proxies[id].url()}
		c.start(id)
	}
	leader, term, _ := c.waitAgreement("", 1, 20*time.Second)
	c.waitCommand(leader, term, 5*time.Second)

	cutAt := time.Now()
	proxies[leader].cut()
	newLeader, newTerm, took := c.waitAgreement(leader, term+1, 2*et+10*time.Second)
	t.Logf("partition: %s cut off at term %d; %s leads term %d after %v", leader, term, newLeader, newTerm, took.Round(time.Millisecond))
	c.waitCommand(newLeader, newTerm, 5*time.Second)
	// The cut-off leader is alive, no longer leading, and its command was
	// stopped (before the new one started: checkCommandLog below).
	if !c.proc(leader).alive() {
		t.Fatalf("%s exited when cut off", leader)
	}
	if s, err := c.proc(leader).status(); err != nil || s.Role == "leader" || (s.LeaderCommand != nil && s.LeaderCommand.Running) {
		t.Fatalf("cut-off %s still leads or runs its command: %+v %v", leader, s, err)
	}
	// Not ready while cut off: it remembers no current leader (before,
	// /readyz stayed 200 with the leader's lease long gone).
	if code, body, err := c.proc(leader).get("/readyz"); err != nil || code != 503 {
		t.Fatalf("cut-off %s: /readyz %d %q %v, want 503", leader, code, body, err)
	}
	if code, body, err := c.proc(newLeader).get("/readyz"); err != nil || code != 200 {
		t.Fatalf("new leader %s: /readyz %d %q %v, want 200", newLeader, code, body, err)
	}
	var stopAt, startAt time.Time
	for _, l := range readLines(filepath.Join(c.shared, "log")) {
		f := strings.Fields(l)
		if len(f) == 4 && f[2] == leader && f[0] == "stop" {
			stopAt = parseNs(f[3])
		}
		if len(f) == 4 && f[2] == newLeader && f[0] == "start" {
			startAt = parseNs(f[3])
		}
	}
	if stopAt.IsZero() || startAt.IsZero() || !stopAt.Before(startAt) {
		t.Fatalf("old command stopped at %v, new one started at %v", stopAt, startAt)
	}
	t.Logf("old command stopped %v after the cut, %v before the new one started", stopAt.Sub(cutAt).Round(time.Millisecond), startAt.Sub(stopAt).Round(time.Millisecond))

	// Heal: the old leader follows the new one at the higher term.
	proxies[leader].heal()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s, err := c.proc(leader).status()
		if err == nil && s.Leader == newLeader && s.Term >= newTerm && s.Role == "follower" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not rejoin after the heal: %+v %v", leader, s, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, id := range c.ids {
		c.signal(id, syscall.SIGTERM)
	}
	for _, id := range c.ids {
		if code := c.waitExit(id, 15*time.Second); code != 0 {
			t.Errorf("%s exited %d", id, code)
		}
	}
	c.checkCommandLog()
	if commandRunning(c.shared) {
		t.Errorf("a leader-only command still runs after every agent exited")
	}
}
