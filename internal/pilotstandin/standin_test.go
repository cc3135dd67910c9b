package pilotstandin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ctl runs the CLI in-process.
func ctl(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return o.String(), e.String(), code
}

func okData(t *testing.T, stdout string) map[string]any {
	t.Helper()
	var env struct {
		Status string         `json:"status"`
		Data   map[string]any `json:"data"`
	}
	if err := json.Unmarshal([]byte(stdout), &env); err != nil || env.Status != "ok" {
		t.Fatalf("not an ok envelope: %q (%v)", stdout, err)
	}
	return env.Data
}

func errCode(t *testing.T, stderr string, code int) string {
	t.Helper()
	var e struct{ Status, Code, Message string }
	if code != 1 || json.Unmarshal([]byte(stderr), &e) != nil || e.Status != "error" || e.Message == "" {
		t.Fatalf("not an error (exit %d): %q", code, stderr)
	}
	return e.Code
}

func waitSubs(t *testing.T, d *Daemon, host, topic string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a give-up: a process start on a loaded runner
	for d.Subscribers(host, topic) < n {
		if time.Now().After(deadline) {
			t.Fatalf("no live subscriber on %s/%s", host, topic)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCLIContract(t *testing.T) {
	d := StartDaemon(t, Options{Hosts: []string{"alpha", "beta"}})
	t.Setenv(EnvSocket, d.Socket())

	out, _, code := ctl("info", "--json")
	if code != 0 {
		t.Fatal(code)
	}
	if !strings.HasPrefix(out, `{"data":{"address":"0:0000.0000.0001",`) {
		t.Fatalf("keys not sorted or wrong address: %s", out)
	}
	if info := okData(t, out); info["node_id"] != float64(1) || info["hostname"] != "alpha" {
		t.Fatalf("info %v", info)
	}

	// Flags: --k v and --k=v, --json anywhere; a "--" value is read as a flag.
	out, _, _ = ctl("publish", "--data", "x y", "beta", "--json", "t")
	if data := okData(t, out); data["target"] != "0:0000.0000.0002" || data["bytes"] != float64(3) || data["topic"] != "t" {
		t.Fatalf("publish %v", data)
	}
	out, _, _ = ctl("--json", "publish", "2", "t", "--data=--{}")
	okData(t, out)
	_, e, c := ctl("--json", "publish", "beta", "t", "--data", "--x")
	if errCode(t, e, c) != CodeInvalidArgument {
		t.Fatal(e)
	}
	_, e, c = ctl("--json", "publish", "nosuch", "t", "--data=x")
	if errCode(t, e, c) != CodeNotFound {
		t.Fatal(e)
	}
	_, e, c = ctl("--json", "frobnicate")
	if errCode(t, e, c) != CodeInvalidArgument {
		t.Fatal(e)
	}

	// subscribe --count: envelope; --timeout with nothing: timeout true, events null.
	var wg sync.WaitGroup
	var subOut string
	var subCode int
	wg.Go(func() { subOut, _, subCode = ctl("--json", "subscribe", "alpha", "t", "--count", "2", "--timeout=10s") })
	waitSubs(t, d, "alpha", "t", 1)
	ctl("--json", "publish", "alpha", "t", `--data={"a":1}`)
	ctl("--json", "publish", "alpha", "other", "--data=no")
	ctl("--json", "publish", "alpha", "t", "--data=two")
	wg.Wait()
	if subCode != 0 || subOut != `{"data":{"events":[{"bytes":7,"data":"{\"a\":1}","topic":"t"},{"bytes":3,"data":"two","topic":"t"}],"timeout":false},"status":"ok"}`+"\n" {
		t.Fatalf("count envelope (%d): %s", subCode, subOut)
	}
	out, _, code = ctl("--json", "subscribe", "alpha", "t", "--count=1", "--timeout", "300ms")
	if code != 0 || out != `{"data":{"events":null,"timeout":true},"status":"ok"}`+"\n" {
		t.Fatalf("timeout envelope: %s", out)
	}
	out, e, code = ctl("--json", "subscribe", "alpha", "t", "--timeout", "300ms")
	if code != 0 || out != "" || e != "" {
		t.Fatalf("NDJSON timeout must exit 0 silently: %q %q %d", out, e, code)
	}

	// send-message/inbox; published events never reach the inbox.
	out, _, _ = ctl("--json", "send-message", "alpha", "--data", `{"k":1}`, "--type", "json")
	if data := okData(t, out); data["ack"] != true || data["type"] != "json" {
		t.Fatalf("send-message %v", data)
	}
	out, _, _ = ctl("--json", "inbox")
	inbox := okData(t, out)
	msgs := inbox["messages"].([]any)
	if len(msgs) != 1 || inbox["total"] != float64(1) {
		t.Fatalf("inbox %v", inbox)
	}
	m := msgs[0].(map[string]any)
	if m["type"] != "JSON" || m["data"] != `{"k":1}` || m["from"] != "0:0000.0000.0001" || m["topic"] != nil || m["payload"] != nil {
		t.Fatalf("inbox message %v", m)
	}
	ctl("--json", "inbox", "--clear")
	out, _, _ = ctl("--json", "inbox")
	if !strings.Contains(out, `"messages":null`) {
		t.Fatalf("cleared inbox: %s", out)
	}
}

func TestSubscribeDropsAndEOF(t *testing.T) {
	d := StartDaemon(t, Options{Hosts: []string{"a"}, LiveDelayMin: time.Millisecond, LiveDelayMax: 2 * time.Millisecond})
	t.Setenv(EnvSocket, d.Socket())
	t.Setenv(EnvIdleDrop, "200ms")
	// Quiet subscription: dropped by the idle timer.
	out, e, c := ctl("--json", "subscribe", "a", "t")
	if errCode(t, e, c) != CodeConnectionFailed || !strings.Contains(e, `"message":"recv: EOF"`) || out != "" {
		t.Fatalf("idle drop: %q %q", out, e)
	}
	// Broker stopped cleanly: EOF at once, after the events so far.
	t.Setenv(EnvIdleDrop, "")
	var wg sync.WaitGroup
	wg.Go(func() { out, e, c = ctl("--json", "subscribe", "a", "t") })
	waitSubs(t, d, "a", "t", 1)
	ctl("--json", "publish", "a", "t", "--data=one")
	d.InjectRaw("a", "t", "garbage{")
	d.StopBroker("a") // both lines are already queued to the subscriber
	wg.Wait()
	if errCode(t, e, c) != CodeConnectionFailed || out != `{"bytes":3,"data":"one","topic":"t"}`+"\ngarbage{\n" {
		t.Fatalf("after stop: %q %q", out, e)
	}
	_, e, c = ctl("--json", "subscribe", "a", "t")
	if errCode(t, e, c) != CodeNotFound {
		t.Fatal(e)
	}
	d.StartBroker("a")
	out, _, _ = ctl("--json", "publish", "a", "t", "--data=x")
	okData(t, out)
}

func TestNoDaemonAndBinary(t *testing.T) {
	bin := Build(t)
	cmd := exec.Command(bin, "--json", "info")
	cmd.Env = []string{EnvSocket + "=/nonexistent/pilot.sock"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v", err)
	}
	if errCode(t, stderr.String(), 1) != CodeNotRunning {
		t.Fatal(stderr.String())
	}
}

// ctlOn runs the CLI in-process as if on node (PILOT_STANDIN_NODE).
func ctlOn(d *Daemon, node string, args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	env := map[string]string{EnvSocket: d.Socket(), EnvNode: node}
	code = mainEnv(args, &o, &e, func(k string) string { return env[k] })
	return o.String(), e.String(), code
}

// subscribeOn streams node's subscription to host/topic into lines until
// it exits; the returned func waits for the exit and gives its stderr.
func subscribeOn(d *Daemon, node, host, topic string) (lines <-chan string, wait func() string) {
	r, w := io.Pipe()
	ch := make(chan string, 1024)
	done := make(chan string, 1)
	go func() {
		_, e, _ := func() (string, string, int) {
			var errb bytes.Buffer
			env := map[string]string{EnvSocket: d.Socket(), EnvNode: node}
			code := mainEnv([]string{"--json", "subscribe", host, topic}, w, &errb, func(k string) string { return env[k] })
			w.Close()
			return "", errb.String(), code
		}()
		done <- e
	}()
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
		close(ch)
	}()
	return ch, func() string { return <-done }
}

func recvWithin(ch <-chan string, d time.Duration) (string, bool) {
	select {
	case l, ok := <-ch:
		return l, ok
	case <-time.After(d):
		return "", false
	}
}

// Fault 1: a node killed hard leaves its subscription on a broker, whose
// fan-out then blocks for everyone until the dead connection is reset or
// the node returns.
func TestDeadSubscriberBlocksFanout(t *testing.T) {
	d := StartDaemon(t, Options{Hosts: []string{"b", "x", "y"}, LiveDelayMin: time.Millisecond, LiveDelayMax: 2 * time.Millisecond,
		DeadSubscriberWindow: 2, DeadSubscriberBlock: 700 * time.Millisecond})
	xs, xwait := subscribeOn(d, "x", "b", "t")
	waitSubs(t, d, "b", "t", 1) // x first: the broker writes to x before y
	ys, _ := subscribeOn(d, "y", "b", "t")
	waitSubs(t, d, "b", "t", 2)
	pub := func(data string) {
		t.Helper()
		if _, e, c := ctlOn(d, "y", "--json", "publish", "b", "t", "--data="+data); c != 0 {
			t.Fatalf("publish: %s", e)
		}
	}
	pub("before")
	for _, ch := range []<-chan string{xs, ys} {
		if l, ok := recvWithin(ch, 2*time.Second); !ok || !strings.Contains(l, "before") {
			t.Fatalf("before the kill: %q %v", l, ok)
		}
	}
	d.KillNode("x")
	if e := xwait(); !strings.Contains(e, CodeConnectionFailed) {
		t.Fatalf("the killed node's pilotctl: %q", e)
	}
	if _, e, c := ctlOn(d, "x", "--json", "info"); errCode(t, e, c) != CodeNotRunning {
		t.Fatalf("a CLI on the killed node: %q", e)
	}
	killedAt := time.Now()
	pub("w1") // absorbed by the dead subscription's window...
	pub("w2")
	for _, w := range []string{"w1", "w2"} {
		if l, ok := recvWithin(ys, 2*time.Second); !ok || !strings.Contains(l, w) {
			t.Fatalf("within the window: %q %v", l, ok)
		}
	}
	pub("blocked") // ...then the broker blocks
	if !d.Blocked("b") {
		t.Fatal("the broker's fan-out is not blocked")
	}
	if l, ok := recvWithin(ys, 300*time.Millisecond); ok {
		t.Fatalf("delivered while blocked: %q", l)
	}
	for d.Blocked("b") {
		time.Sleep(10 * time.Millisecond)
	}
	if blocked := time.Since(killedAt); blocked < 600*time.Millisecond {
		t.Fatalf("blocked only %v", blocked)
	}
	pub("after")
	if l, ok := recvWithin(ys, 2*time.Second); !ok || !strings.Contains(l, "after") {
		t.Fatalf("after the reset: %q %v", l, ok)
	}

	// Again, ended early by the node's return.
	d.RestartNode("x")
	subscribeOn(d, "x", "b", "t")
	waitSubs(t, d, "b", "t", 2)
	d.KillNode("x")
	pub("a1")
	pub("a2")
	pub("a3")
	if !d.Blocked("b") {
		t.Fatal("not blocked the second time")
	}
	d.RestartNode("x")
	if d.Blocked("b") {
		t.Fatal("still blocked after the node restarted")
	}
	if _, e, c := ctlOn(d, "x", "--json", "info"); c != 0 {
		t.Fatalf("info on the restarted node: %s", e)
	}
}

// Fault 2: subscriptions end at random with connection_failed "recv: EOF".
func TestResetsEndSubscriptions(t *testing.T) {
	d := StartDaemon(t, Options{Hosts: []string{"b"}, LiveDelayMin: time.Millisecond, LiveDelayMax: 2 * time.Millisecond, ResetEvery: 200 * time.Millisecond})
	start := time.Now()
	type result struct {
		stderr string
		code   int
	}
	done := make(chan result, 1)
	go func() { _, e, c := ctlOn(d, "", "--json", "subscribe", "b", "t"); done <- result{e, c} }()
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second): // gives up: no reset at all
		t.Fatal("the subscription was not reset within 30 s")
	}
	if errCode(t, r.stderr, r.code) != CodeConnectionFailed || !strings.Contains(r.stderr, "recv: EOF") {
		t.Fatalf("reset: %q", r.stderr)
	}
	// The reset comes at a random time in [100 ms, 300 ms] of the daemon's
	// clock: never earlier (a loaded machine can only make it later).
	if took := time.Since(start); took < 100*time.Millisecond {
		t.Fatalf("reset after %v, want at least 100 ms", took)
	}
}

// Fault 3: a node publishing to its own broker while subscribed there is
// flagged, and its broker stops delivering until the node restarts.
func TestSelfPublishFloods(t *testing.T) {
	d := StartDaemon(t, Options{Hosts: []string{"a", "b"}, LiveDelayMin: time.Millisecond, LiveDelayMax: 2 * time.Millisecond})
	as, _ := subscribeOn(d, "a", "a", "t")
	waitSubs(t, d, "a", "t", 1)
	ctlOn(d, "b", "--json", "publish", "a", "t", "--data=from-b")
	if l, ok := recvWithin(as, 2*time.Second); !ok || !strings.Contains(l, "from-b") {
		t.Fatalf("a subscription on its own node: %q %v", l, ok)
	}
	if d.SelfPublishes() != 0 {
		t.Fatal("flagged a publish from another node")
	}
	if out, _, c := ctlOn(d, "a", "--json", "publish", "a", "t", "--data=self"); c != 0 || !strings.Contains(out, `"status":"ok"`) {
		t.Fatalf("a self-publish is accepted, as on real pilot: %q", out)
	}
	if d.SelfPublishes() != 1 {
		t.Fatalf("self-publishes %d, want 1", d.SelfPublishes())
	}
	ctlOn(d, "b", "--json", "publish", "a", "t", "--data=lost")
	if l, ok := recvWithin(as, 300*time.Millisecond); ok {
		t.Fatalf("a flooding broker delivered %q", l)
	}
	d.RestartNode("a")
}

// A killed node's broker holds publishes for KillHang, then connection_failed.
func TestKilledNodePublishHangs(t *testing.T) {
	d := StartDaemon(t, Options{Hosts: []string{"a", "b"}, KillHang: 300 * time.Millisecond})
	d.KillNode("a")
	start := time.Now()
	_, e, c := ctlOn(d, "b", "--json", "publish", "a", "t", "--data=x")
	if errCode(t, e, c) != CodeConnectionFailed || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("publish to a killed node: %q after %v", e, time.Since(start))
	}
}

// The per-connection ceiling: at 100 events/s offered and 25/s carried, a
// backlog builds.
func TestEventsPerSecondCeiling(t *testing.T) {
	d := StartDaemon(t, Options{Hosts: []string{"a"}, LiveDelayMin: time.Millisecond, LiveDelayMax: 2 * time.Millisecond, EventsPerSec: 25})
	ch, _ := subscribeOn(d, "", "a", "t")
	waitSubs(t, d, "a", "t", 1)
	start := time.Now()
	for i := range 40 {
		d.fanout("a", "t", streamLine{Event: &event{Topic: "t", Data: fmt.Sprint(i)}})
	}
	// All 40 are offered at once; at 25/s the 11th is written at least
	// 10 × 40 ms after the first, which was after start. A loaded machine
	// can only make that later.
	for i := range 11 {
		if _, ok := recvWithin(ch, 10*time.Second); !ok {
			t.Fatalf("event %d not carried within 10 s", i)
		}
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("11 events carried in %v at 25/s: want at least 400 ms", took)
	}
}

// A node restarted after kill -9 stays registered but cut off: the others'
// traffic to it fails until it sends to them first (healsOnSend), or for
// good; a normal restart (RestartNode) clears it.
func TestRestartNodeStale(t *testing.T) {
	d := StartDaemon(t, Options{Hosts: []string{"r", "p", "q"}, KillHang: 50 * time.Millisecond})
	pub := func(from, to string) string {
		t.Helper()
		_, e, c := ctlOn(d, from, "--json", "publish", to, "t", "--data=x")
		if c == 0 {
			return "ok"
		}
		return errCode(t, e, c)
	}
	registered := func(args ...string) bool {
		t.Helper()
		_, _, c := ctlOn(d, "p", append([]string{"--json"}, args...)...)
		return c == 0
	}

	d.KillNode("r")
	d.RestartNodeStale("r", true)
	if got := pub("p", "r"); got != CodeConnectionFailed {
		t.Fatalf("p -> restarted r: %s, want %s", got, CodeConnectionFailed)
	}
	if !registered("find", "r") || !registered("lookup", "1") {
		t.Fatal("the restarted node is not registered")
	}
	if got := pub("r", "r"); got != "ok" {
		t.Fatalf("r -> its own broker: %s", got)
	}
	if got := pub("r", "p"); got != "ok" { // r sends first: the pair is re-keyed
		t.Fatalf("r -> p: %s", got)
	}
	if got := pub("p", "r"); got != "ok" {
		t.Fatalf("p -> r after r sent first: %s", got)
	}
	if got, n := pub("q", "r"), d.StaleTunnels("r"); got != CodeConnectionFailed || n != 1 {
		t.Fatalf("q -> r: %s with %d stale tunnels, want %s and 1", got, n, CodeConnectionFailed)
	}

	d.KillNode("r")
	d.RestartNodeStale("r", false)
	if got := pub("r", "p"); got != CodeConnectionFailed {
		t.Fatalf("r -> p, refused for good: %s", got)
	}
	if got := pub("p", "r"); got != CodeConnectionFailed {
		t.Fatalf("p -> r, refused for good: %s", got)
	}
	d.RestartNode("r")
	if got := pub("p", "r"); got != "ok" {
		t.Fatalf("p -> r after a normal restart: %s", got)
	}

	// Two nodes restarted stale: the later one's daemon is fresh, so it
	// holds no stale tunnel to the earlier one, and its sending first
	// re-keys the pair as with any other peer.
	d.KillNode("r")
	d.KillNode("q")
	d.RestartNodeStale("r", true)
	d.RestartNodeStale("q", true)
	if got := pub("r", "q"); got != CodeConnectionFailed {
		t.Fatalf("r -> q restarted after it: %s, want %s", got, CodeConnectionFailed)
	}
	if got := pub("q", "r"); got != "ok" {
		t.Fatalf("q -> r restarted before it: %s", got)
	}
	if got := pub("r", "q"); got != "ok" {
		t.Fatalf("r -> q after q sent first: %s", got)
	}
	// A peer refusing a restarted node for good: restarting the peer's
	// daemon (docs/pilotctl.md) ends it.
	d.KillNode("r")
	d.RestartNodeStale("r", false)
	d.KillNode("p")
	d.RestartNode("p")
	if got := pub("r", "p"); got != "ok" {
		t.Fatalf("r -> p after p's daemon restarted: %s", got)
	}
	if got := pub("p", "r"); got != "ok" {
		t.Fatalf("p -> r after p's daemon restarted: %s", got)
	}
	d.RestartNode("r")
	d.RestartNode("q")

	d.StopBroker("q")
	if registered("find", "q") || registered("lookup", "3") || registered("find", "nosuch") {
		t.Fatal("a cleanly stopped or unknown node is registered")
	}
}

// FloodDelayMax: each publish takes at least the delay drawn for it, and
// its event arrives after the publish returns.
func TestFloodDelay(t *testing.T) {
	d := StartDaemon(t, Options{Hosts: []string{"p", "b"}, FloodDelayMax: 300 * time.Millisecond, LiveDelayMin: time.Millisecond, LiveDelayMax: time.Millisecond})
	lines, _ := subscribeOn(d, "p", "b", "t")
	waitSubs(t, d, "b", "t", 1)
	var took []time.Duration
	for i := range 10 {
		start := time.Now()
		if _, e, c := ctlOn(d, "p", "--json", "publish", "b", "t", fmt.Sprintf("--data=%d", i)); c != 0 {
			t.Fatalf("publish: %s", e)
		}
		took = append(took, time.Since(start))
		if l, ok := recvWithin(lines, 2*time.Second); !ok || !strings.Contains(l, fmt.Sprintf(`"data":"%d"`, i)) {
			t.Fatalf("event %d: %q %v", i, l, ok)
		}
	}
	delays := d.FloodDelays()
	if len(delays) != len(took) {
		t.Fatalf("%d delays drawn for %d publishes", len(delays), len(took))
	}
	var sum time.Duration
	for i, dl := range delays {
		sum += dl
		if took[i] < dl {
			t.Errorf("publish %d took %v, less than its flood delay %v", i, took[i], dl)
		}
	}
	if sum == 0 {
		t.Error("no flood delay drawn")
	}
}

// A node is deaf on a topic while none of its subscriptions to it, on any
// broker, is live: the spell opens when the last one ends and closes when
// one is live again.
func TestDeafSpells(t *testing.T) {
	d := StartDaemon(t, Options{Hosts: []string{"b", "c", "n"}, LiveDelayMin: time.Millisecond, LiveDelayMax: 2 * time.Millisecond})
	if s := d.DeafSpells("n", "t"); len(s) != 0 {
		t.Fatalf("spells before any subscription: %v", s)
	}
	_, waitB := subscribeOn(d, "n", "b", "t")
	_, waitC := subscribeOn(d, "n", "c", "t")
	waitSubs(t, d, "b", "t", 1)
	waitSubs(t, d, "c", "t", 1)
	d.StopBroker("b") // one of two ends: not deaf
	waitB()
	if s := d.DeafSpells("n", "t"); len(s) != 0 {
		t.Fatalf("deaf with a subscription still live: %v", s)
	}
	d.StopBroker("c")
	waitC()
	if s := d.DeafSpells("n", "t"); len(s) != 1 || s[0].From.IsZero() || !s[0].To.IsZero() {
		t.Fatalf("after the last one ended: %v, want one open spell", s)
	}
	d.StartBroker("b")
	_, _ = subscribeOn(d, "n", "b", "t")
	waitSubs(t, d, "b", "t", 1)
	if s := d.DeafSpells("n", "t"); len(s) != 1 || s[0].To.Before(s[0].From) || s[0].To.IsZero() {
		t.Fatalf("after a new one is live: %v, want the spell closed", s)
	}
	if s := d.DeafSpells("n", "other"); len(s) != 0 {
		t.Fatalf("spells on another topic: %v", s)
	}
}
