package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/electcore/electcore/hostfuncs/natstest"
	"github.com/electcore/electcore/internal/pilotstandin"
)

// oneErrorLine checks that stderr is exactly one line "electhost: ..."
// containing want, with no panic or stack trace.
func oneErrorLine(t *testing.T, stderr, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "electhost: ") {
		t.Fatalf("stderr is not one 'electhost: ' line:\n%s", stderr)
	}
	if !strings.Contains(lines[0], want) {
		t.Fatalf("error line %q does not mention %q", lines[0], want)
	}
	if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
		t.Fatalf("panic on stderr:\n%s", stderr)
	}
}

func TestCLIErrors(t *testing.T) {
	tmp := t.TempDir()
	aFile := filepath.Join(tmp, "file")
	os.WriteFile(aFile, []byte("x"), 0o644)
	natsURL, _ := natstest.Start(t)
	deadPort := "nats://127.0.0.1:1"
	quick := []string{"--heartbeat", "100ms", "--election-timeout", "600ms"}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"unknown command", []string{"frobnicate"}, exitUsage, "unknown command"},
		{"unknown flag", []string{"run", "--group", "g", "--bogus"}, exitUsage, "unknown flag: --bogus"},
		{"no group", []string{"run", "--mode", "bully"}, exitUsage, "--group is required"},
		{"bad mode", []string{"run", "--group", "g", "--mode", "raft"}, exitUsage, `--mode "raft"`},
		{"bad duration", []string{"run", "--group", "g", "--heartbeat", "soon"}, exitUsage, "--heartbeat"},
		{"timeout below 3 heartbeats", []string{"run", "--group", "g", "--mode", "bully", "--heartbeat", "1s", "--election-timeout", "2s"}, exitUsage, "at least 3×--heartbeat"},
		{"quorum without members", []string{"run", "--group", "g", "--id", "a"}, exitUsage, "members"},
		{"id not a member", []string{"run", "--group", "g", "--id", "a", "--members", "b,c,d"}, exitUsage, "must include"},
		{"bad id", []string{"run", "--group", "g", "--id", "a b", "--mode", "bully"}, exitUsage, "id"},
		{"bad transport", []string{"run", "--group", "g", "--mode", "bully", "--transport", "carrier-pigeon"}, exitUsage, "--transport"},
		{"pilot without broker", []string{"run", "--group", "g", "--mode", "bully", "--transport", "pilot"}, exitUsage, "--broker"},
		{"argument without --", []string{"run", "--group", "g", "--mode", "bully", "sleep", "1"}, exitUsage, "after --"},
		{"nothing after --", []string{"run", "--group", "g", "--mode", "bully", "--"}, exitUsage, "nothing after --"},
		{"missing leader command", []string{"run", "--group", "g", "--mode", "bully", "--", "/nonexistent/cmd"}, exitUsage, "/nonexistent/cmd"},
		{"grace too long for the lease", append(append([]string{"run", "--group", "g", "--id", "a", "--members", "a,b,c", "--grace", "550ms"}, quick...), "--", "true"), exitUsage, "--grace"},
		{"missing pilotctl", []string{"run", "--group", "g", "--mode", "bully", "--state-dir", filepath.Join(tmp, "s1"), "--transport", "pilot", "--broker", "node-1", "--pilotctl", "/nonexistent/pilotctl"}, exitTransport, "pilotctl not found"},
		{"pilotctl not in PATH", []string{"run", "--group", "g", "--mode", "bully", "--state-dir", filepath.Join(tmp, "s2"), "--transport", "pilot", "--broker", "node-1", "--pilotctl", "pilotctl-electcore-absent"}, exitTransport, "pilotctl not found"},
		{"unreachable NATS", []string{"run", "--group", "g", "--mode", "bully", "--state-dir", filepath.Join(tmp, "s3"), "--broker", deadPort}, exitTransport, "cannot reach NATS"},
		{"unwritable state dir", []string{"run", "--group", "g", "--mode", "bully", "--state-dir", filepath.Join(aFile, "state"), "--broker", natsURL}, exitConfig, "--state-dir"},
		{"missing wasm", []string{"run", "--group", "g", "--mode", "bully", "--state-dir", filepath.Join(tmp, "s4"), "--broker", natsURL, "--wasm", "/nonexistent/electcore.wasm"}, exitConfig, "electcore.wasm"},
		{"http address in use or bad", []string{"run", "--group", "g", "--mode", "bully", "--state-dir", filepath.Join(tmp, "s5"), "--broker", natsURL, "--http", "256.0.0.1:1"}, exitConfig, "--http"},
		{"status unreachable", []string{"status", "--group", "g", "--broker", deadPort}, exitTransport, "cannot reach NATS"},
		{"status without group", []string{"status"}, exitUsage, "--group"},
		{"sim bad seeds", []string{"sim", "--seeds", "0"}, exitUsage, "--seeds"},
		{"demo too few agents", []string{"demo", "--agents", "2"}, exitUsage, "--agents"},
		{"broker bad listen", []string{"broker", "--listen", "nowhere"}, exitUsage, "--listen"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, 30*time.Second, nil, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, c.code, stderr)
			}
			oneErrorLine(t, stderr, c.want)
		})
	}
}

func TestCLIStatePilotDaemonDown(t *testing.T) {
	pilotctl := pilotstandin.Build(t)
	// A socket nobody listens on: the daemon is down.
	env := []string{"PILOT_SOCKET=" + filepath.Join(t.TempDir(), "none.sock")}
	code, _, stderr := runCLI(t, 30*time.Second, env, "run", "--group", "g", "--mode", "bully", "--state-dir", t.TempDir(),
		"--transport", "pilot", "--broker", "node-1", "--pilotctl", pilotctl)
	if code != exitTransport {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitTransport, stderr)
	}
	oneErrorLine(t, stderr, "pilot daemon unreachable")
}

func TestCLIHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"demo", "--help"}, {"sim", "--help"}, {"status", "--help"}, {"broker", "--help"}, {"version"}} {
		code, stdout, stderr := runCLI(t, 30*time.Second, nil, args...)
		if code != 0 || stdout == "" {
			t.Fatalf("electhost %v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
}

func TestSimCommand(t *testing.T) {
	code, stdout, stderr := runCLI(t, 2*time.Minute, nil, "sim", "--seeds", "10", "--nodes", "5", "--json")
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var rep struct {
		Seeds      int   `json:"seeds"`
		Violations int   `json:"violations"`
		List       []any `json:"violation_list"`
		FailoverMs struct {
			N   int   `json:"n"`
			P50 int64 `json:"p50"`
			P99 int64 `json:"p99"`
			Max int64 `json:"max"`
		} `json:"failover_ms"`
		PublishesPerElection struct {
			Mean float64 `json:"mean"`
			Max  int64   `json:"max"`
		} `json:"publishes_per_election"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("sim --json: %v\n%s", err, stdout)
	}
	if rep.Seeds != 10 || rep.Violations != 0 || rep.List == nil || rep.FailoverMs.N == 0 || rep.FailoverMs.P50 <= 0 ||
		rep.FailoverMs.P99 < rep.FailoverMs.P50 || rep.FailoverMs.Max < rep.FailoverMs.P99 || rep.PublishesPerElection.Mean <= 0 {
		t.Fatalf("implausible report: %+v\n%s", rep, stdout)
	}
	if strings.Contains(stderr, "\r") {
		t.Fatalf("progress bar drawn on a non-terminal stderr: %q", stderr)
	}
	// Replay one seed: a trace is printed.
	code, stdout, _ = runCLI(t, time.Minute, nil, "sim", "--seed", "3", "--scenario", "failover", "--nodes", "3", "--cycles", "2")
	if code != 0 || !strings.Contains(stdout, "seed 3") || !strings.Contains(stdout, "join(") || !strings.Contains(stdout, "no violations") {
		t.Fatalf("replay: exit %d\n%s", code, stdout)
	}
}
