package pilotstandin

import (
	"bytes"
	"encoding/json"
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
	deadline := time.Now().Add(10 * time.Second)
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
