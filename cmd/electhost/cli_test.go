package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/electcore/electcore/host"
	"github.com/electcore/electcore/internal/pilotstandin"
	"github.com/electcore/electcore/statestore"
	"github.com/electcore/electcore/transport/natstest"
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
	t.Parallel()
	tmp := t.TempDir()
	aFile := filepath.Join(tmp, "file")
	os.WriteFile(aFile, []byte("x"), 0o644)
	privFile := filepath.Join(tmp, "priv.pem")
	os.WriteFile(privFile, []byte("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"), 0o600)
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
		{"timeout below 3 heartbeats", []string{"run", "--group", "g", "--mode", "bully", "--heartbeat", "1s", "--election-timeout", "2s"}, exitUsage, "want 3×--heartbeat"},
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
		{"empty broker", []string{"run", "--group", "g", "--mode", "bully", "--broker", ""}, exitUsage, `--broker "": no URL given`},
		{"blank brokers", []string{"status", "--group", "g", "--broker", " , "}, exitUsage, `--broker " , ": no URL given`},
		{"broker not a NATS URL", []string{"run", "--group", "g", "--mode", "bully", "--broker", "http://127.0.0.1:4222"}, exitUsage, `--broker "http://127.0.0.1:4222": want nats://HOST:PORT`},
		{"broker malformed", []string{"run", "--group", "g", "--mode", "bully", "--broker", "nats://[::1"}, exitUsage, `--broker "nats://[::1"`},
		{"broker bad port", []string{"status", "--group", "g", "--broker", "127.0.0.1:99999"}, exitUsage, `--broker "127.0.0.1:99999"`},
		{"broker with a path", []string{"run", "--group", "g", "--mode", "bully", "--broker", "nats://host:4222/x"}, exitUsage, `--broker "nats://host:4222/x"`},
		{"status unreachable", []string{"status", "--group", "g", "--broker", deadPort}, exitTransport, "cannot reach NATS"},
		{"status without group", []string{"status"}, exitUsage, "--group"},
		{"sim bad seeds", []string{"sim", "--seeds", "0"}, exitUsage, "--seeds"},
		{"sim membership in bully mode", []string{"sim", "--mode", "bully", "--membership"}, exitUsage, "--membership"},
		{"sim negative latency", []string{"sim", "--latency", "-5"}, exitUsage, "--latency -5 --jitter 0: want 0..60000 ms each"},
		{"demo too few agents", []string{"demo", "--agents", "2"}, exitUsage, "--agents"},
		{"broker bad listen", []string{"broker", "--listen", "nowhere"}, exitUsage, "--listen"},
		{"join in bully mode", []string{"run", "--group", "g", "--mode", "bully", "--join"}, exitUsage, "--join is for quorum mode"},
		{"join without members", []string{"run", "--group", "g", "--id", "d", "--join"}, exitUsage, "--join needs --members"},
		{"members without a subcommand's ID", []string{"members", "add", "--group", "g"}, exitUsage, "accepts 1 arg"},
		{"members bad id", []string{"members", "add", "a b", "--group", "g"}, exitUsage, "member"},
		{"members without group", []string{"members", "remove", "x"}, exitUsage, "--group is required"},
		{"members bad timeout", []string{"members", "add", "x", "--group", "g", "--timeout", "0s"}, exitUsage, "--timeout"},
		{"members bad key", []string{"members", "add", "x", "--group", "g", "--key", "not-a-key"}, exitUsage, "--key not-a-key"},
		{"members private key", []string{"members", "add", "x", "--group", "g", "--key", privFile}, exitUsage, "is a private key"},
		{"members no agent", []string{"members", "list", "--group", "g", "--state-dir", filepath.Join(tmp, "s6")}, exitConfig, "no electhost run agent answers"},
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
	t.Parallel()
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
	t.Parallel()
	help := map[string]string{}
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"demo", "--help"}, {"sim", "--help"}, {"status", "--help"}, {"broker", "--help"},
		{"resign", "--help"}, {"transfer", "--help"}, {"drain", "--help"}, {"undrain", "--help"}, {"reset-state", "--help"}, {"keygen", "--help"}, {"version"}, {"--version"}} {
		code, stdout, stderr := runCLI(t, 30*time.Second, nil, args...)
		if code != 0 || stdout == "" {
			t.Fatalf("electhost %v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
		help[strings.Join(args, " ")] = stdout
	}
	if help["--version"] != help["version"] || !strings.HasPrefix(help["--version"], "electhost ") {
		t.Fatalf("--version %q, version %q", help["--version"], help["version"])
	}
	if n := strings.Count(help["--help"], "\n  run "); n != 1 {
		t.Fatalf("root help lists run %d times:\n%s", n, help["--help"])
	}
	for _, code := range []string{"\n  3  ", "\n  5  ", "\n  N  "} {
		if !strings.Contains(help["run --help"], code) {
			t.Fatalf("run --help lacks exit code %q", code)
		}
	}
	// demo --help names every row of the demo's table.
	for _, step := range []string{"start", "first election", "crash", "failover", "rejoin", "hand-off", "stop"} {
		if !strings.Contains(help["demo --help"], "  "+step+" ") {
			t.Fatalf("demo --help lacks step %q", step)
		}
	}
}

func TestSimCommand(t *testing.T) {
	t.Parallel()
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
	// The membership mix: changes commit, nothing breaks.
	code, stdout, stderr = runCLI(t, 2*time.Minute, nil, "sim", "--membership", "--scenario", "faults", "--seeds", "10", "--json")
	var mem struct {
		Violations    int   `json:"violations"`
		ConfigChanges int64 `json:"config_changes"`
	}
	if err := json.Unmarshal([]byte(stdout), &mem); code != 0 || err != nil || mem.Violations != 0 || mem.ConfigChanges == 0 {
		t.Fatalf("sim --membership: exit %d, %+v, %v\n%s\n%s", code, mem, err, stdout, stderr)
	}
	// The targeted schedule's hand-offs after the heal reach their cases.
	code, stdout, stderr = runCLI(t, 2*time.Minute, nil, "sim", "--targeted", "--scenario", "faults", "--seeds", "10", "--json")
	var tgt struct {
		Violations      int   `json:"violations"`
		HandoffsLost    int64 `json:"handoffs_lost"`
		HandoffsUnheard int64 `json:"handoffs_unheard"`
		StalledHandoffs int64 `json:"stalled_handoffs"`
		LateResigns     int64 `json:"late_handoff_resigns"`
	}
	if err := json.Unmarshal([]byte(stdout), &tgt); code != 0 || err != nil || tgt.Violations != 0 || tgt.HandoffsLost != 0 || tgt.HandoffsUnheard == 0 || tgt.StalledHandoffs == 0 || tgt.LateResigns == 0 {
		t.Fatalf("sim --targeted: exit %d, %+v, %v\n%s\n%s", code, tgt, err, stdout, stderr)
	}
	// A network too slow for any election (round trips of 20 s): each
	// measuring seed ends with a liveness violation, not an endless wait.
	code, stdout, stderr = runCLI(t, 2*time.Minute, nil, "sim", "--scenario", "failover", "--nodes", "3", "--latency", "10000", "--jitter", "-1", "--seeds", "2", "--json")
	var slow struct {
		Violations int `json:"violations"`
		List       []struct {
			Invariant string `json:"invariant"`
		} `json:"violation_list"`
	}
	if err := json.Unmarshal([]byte(stdout), &slow); code != exitFailure || err != nil || slow.Violations != 2 || len(slow.List) != 2 || slow.List[0].Invariant != "liveness" {
		t.Fatalf("sim --latency 10000: exit %d, %+v, %v\n%s\n%s", code, slow, err, stdout, stderr)
	}
	// Replay one seed: a trace is printed.
	code, stdout, _ = runCLI(t, time.Minute, nil, "sim", "--seed", "3", "--scenario", "failover", "--nodes", "3", "--cycles", "2")
	if code != 0 || !strings.Contains(stdout, "seed 3") || !strings.Contains(stdout, "join(") || !strings.Contains(stdout, "no violations") {
		t.Fatalf("replay: exit %d\n%s", code, stdout)
	}
}

// TestCLIUserWords: errors name the flag and the fix, never a Go package,
// a config field or a parser.
func TestCLIUserWords(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	natsURL, _ := natstest.Start(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"negative priority", []string{"run", "--group", "g", "--priority", "-1"}, exitUsage, `--priority "-1": want a whole number 0..4294967295`},
		{"bad duration", []string{"run", "--group", "g", "--heartbeat", "soon"}, exitUsage, `--heartbeat "soon": want a duration such as 500ms`},
		{"heartbeat too short", []string{"run", "--group", "g", "--id", "a", "--members", "a,b,c", "--heartbeat", "5ms"}, exitUsage, "--heartbeat 5ms: want 10ms..10m"},
		{"id not a member", []string{"run", "--group", "g", "--id", "a", "--members", "b,c,d"}, exitUsage, `--members must include this agent's --id "a"`},
		{"members file missing", []string{"run", "--group", "g", "--id", "a", "--members-file", filepath.Join(tmp, "absent.txt")}, exitConfig, "absent.txt: no such file"},
		{"grace without a command", []string{"run", "--group", "g", "--mode", "bully", "--grace", "1s"}, exitUsage, "--grace is the leader-only command's stop delay"},
		{"once without a command", []string{"run", "--group", "g", "--mode", "bully", "--once"}, exitUsage, "--once needs the command"},
		{"broker port busy", []string{"broker", "--listen", busy.Addr().String()}, exitConfig, "--listen 127.0.0.1:0"},
		{"demo without its module", []string{"demo", "--wasm", filepath.Join(tmp, "absent.wasm")}, exitConfig, "absent.wasm"},
		{"status --wait 0 means zero", []string{"status", "--group", "g", "--broker", natsURL, "--wait", "0"}, exitFailure, "within 0s"},
		{"resign without group", []string{"resign"}, exitUsage, "--group is required"},
		{"transfer without --to", []string{"transfer", "--group", "g"}, exitUsage, "--to is required"},
		{"drain without an agent", []string{"drain", "--group", "g", "--state-dir", filepath.Join(tmp, "none")}, exitConfig, "no electhost run agent answers"},
		{"check in bully mode", []string{"run", "--group", "g", "--mode", "bully", "--check", "true"}, exitUsage, "--check and --check-http need quorum mode"},
		{"check failures 0", []string{"run", "--group", "g", "--id", "a", "--members", "a", "--check", "true", "--check-failures", "0"}, exitUsage, "--check-failures 0: want at least 1"},
		{"check-http not a URL", []string{"run", "--group", "g", "--id", "a", "--members", "a", "--check-http", "localhost:80/health"}, exitUsage, `--check-http "localhost:80/health": want an http:// or https:// URL`},
		{"sim --drain in bully mode", []string{"sim", "--drain", "--mode", "bully"}, exitUsage, "--drain adds to the fault mix in quorum mode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t0 := time.Now()
			code, _, stderr := runCLI(t, 30*time.Second, nil, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, c.code, stderr)
			}
			oneErrorLine(t, stderr, c.want)
			for _, leak := range []string{"strconv.", " host: ", "transport: ", "statestore: ", "_ms", "member_keys", "RuntimeConfig"} {
				if strings.Contains(strings.TrimPrefix(stderr, "electhost: "), leak) {
					t.Fatalf("error names an internal (%q): %s", leak, stderr)
				}
			}
			if d := time.Since(t0); d > 5*time.Second {
				t.Fatalf("took %v: a failure that needs no waiting must be immediate", d)
			}
		})
	}
}

// TestCLICorruptStateNamesRecovery: a corrupt state file names the command
// that resets the member, and that command works.
func TestCLICorruptStateNamesRecovery(t *testing.T) {
	t.Parallel()
	natsURL, _ := natstest.Start(t)
	dir := t.TempDir()
	// 500 ms / 2 s: a group of one renews its lease from its own
	// heartbeats; at 100 ms / 600 ms a CI run at load 30 stalled past it
	// while the command ran, and --once exited 1 (lost the leadership).
	args := []string{"run", "--once", "--group", "g", "--id", "solo", "--members", "solo", "--heartbeat", "500ms", "--election-timeout", "2s",
		"--state-dir", dir, "--broker", natsURL, "--", "true"}
	if code, _, stderr := runCLI(t, 60*time.Second, nil, args...); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, stderr)
	}
	file, err := statestore.FileName(host.StateName("solo", "g"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, 60*time.Second, nil, args...)
	if code != exitConfig {
		t.Fatalf("corrupt state: exit %d, want 3\n%s", code, stderr)
	}
	reset := "electhost reset-state --group g --id solo --state-dir " + dir
	oneErrorLine(t, stderr, reset)
	if code, out, stderr := runCLI(t, 30*time.Second, nil, strings.Fields(reset)[1:]...); code != 0 || !strings.Contains(out, "starts from term 0") {
		t.Fatalf("%s: exit %d\n%s%s", reset, code, out, stderr)
	}
	if code, _, stderr := runCLI(t, 60*time.Second, nil, args...); code != 0 {
		t.Fatalf("after reset-state: exit %d\n%s", code, stderr)
	}
}

// TestCLIUnwritableDefaultCache: the default compilation cache directory
// unusable is a warning, not a failure.
func TestCLIUnwritableDefaultCache(t *testing.T) {
	t.Parallel()
	natsURL, _ := natstest.Start(t)
	notADir := filepath.Join(t.TempDir(), "file")
	os.WriteFile(notADir, []byte("x"), 0o644)
	// Compiling in memory under -race on a loaded machine took over a minute.
	// 500 ms / 2 s: a group of one renews its lease from its own
	// heartbeats; at 100 ms / 600 ms a CI run at load 30 stalled past it
	// while the command ran, and --once exited 1 (lost the leadership).
	code, _, stderr := runCLI(t, 4*time.Minute, []string{"XDG_CACHE_HOME=" + notADir, "HOME=" + notADir},
		"run", "--once", "--group", "g", "--id", "solo", "--members", "solo", "--heartbeat", "500ms", "--election-timeout", "2s",
		"--state-dir", t.TempDir(), "--broker", natsURL, "--", "true")
	if code != 0 || !strings.Contains(stderr, "compilation cache unusable") {
		t.Fatalf("exit %d, want 0 with a warning\n%s", code, stderr)
	}
}

// TestCLIResetStateNothingOrCorruptManifest: reset-state for an agent with
// no saved state says so and creates or changes nothing; a corrupt state
// manifest is named by run, with the reset-state command that rebuilds it,
// and that command works.
func TestCLIResetStateNothingOrCorruptManifest(t *testing.T) {
	t.Parallel()
	natsURL, _ := natstest.Start(t)
	dir := t.TempDir()
	absent := filepath.Join(dir, "absent")
	code, out, stderr := runCLI(t, 30*time.Second, nil, "reset-state", "--group", "g", "--id", "solo", "--state-dir", absent)
	if code != 0 || !strings.Contains(out, "nothing to reset") {
		t.Fatalf("reset-state of a directory never used: exit %d\n%s%s", code, out, stderr)
	}
	if _, err := os.Stat(absent); !os.IsNotExist(err) {
		t.Fatalf("reset-state created %s (%v)", absent, err)
	}

	state := filepath.Join(dir, "state")
	// 500 ms / 2 s: a group of one renews its lease from its own
	// heartbeats; at 100 ms / 600 ms a CI run at load 30 stalled past it
	// while the command ran, and --once exited 1 (lost the leadership).
	args := []string{"run", "--once", "--group", "g", "--id", "solo", "--members", "solo", "--heartbeat", "500ms", "--election-timeout", "2s",
		"--state-dir", state, "--broker", natsURL, "--", "true"}
	if code, _, stderr := runCLI(t, 60*time.Second, nil, args...); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, stderr)
	}
	snapshot := func() string {
		var b strings.Builder
		entries, _ := os.ReadDir(state)
		for _, e := range entries {
			content, _ := os.ReadFile(filepath.Join(state, e.Name()))
			fi, _ := e.Info()
			b.WriteString(e.Name() + " " + fi.ModTime().String() + " " + string(content) + "\n")
		}
		return b.String()
	}
	before := snapshot()
	for _, other := range [][]string{{"--id", "other", "--group", "g"}, {"--id", "solo", "--group", "other"}} {
		code, out, stderr := runCLI(t, 30*time.Second, nil, append([]string{"reset-state", "--state-dir", state}, other...)...)
		if code != 0 || !strings.Contains(out, "nothing to reset: no saved state") {
			t.Fatalf("reset-state %v: exit %d\n%s%s", other, code, out, stderr)
		}
	}
	if after := snapshot(); after != before {
		t.Fatalf("reset-state of nothing changed the directory:\nbefore %s\nafter %s", before, after)
	}

	manifest := filepath.Join(state, statestore.ManifestName)
	if err := os.WriteFile(manifest, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI(t, 60*time.Second, nil, args...)
	if code != exitConfig {
		t.Fatalf("corrupt manifest: exit %d, want 3\n%s", code, stderr)
	}
	oneErrorLine(t, stderr, "the state manifest "+manifest+" (")
	reset := "electhost reset-state --group g --id solo --state-dir " + state
	oneErrorLine(t, stderr, reset)
	if code, out, stderr := runCLI(t, 30*time.Second, nil, strings.Fields(reset)[1:]...); code != 0 || !strings.Contains(out, "rebuilt the corrupt state manifest") {
		t.Fatalf("%s: exit %d\n%s%s", reset, code, out, stderr)
	}
	if code, _, stderr := runCLI(t, 60*time.Second, nil, args...); code != 0 {
		t.Fatalf("after reset-state: exit %d\n%s", code, stderr)
	}
}

// TestCLINATSURL: $NATS_URL is --broker's default; a malformed one is a
// usage error naming it.
func TestCLINATSURL(t *testing.T) {
	t.Parallel()
	natsURL, _ := natstest.Start(t)
	code, _, stderr := runCLI(t, 30*time.Second, []string{"NATS_URL=http://127.0.0.1:1"}, "status", "--group", "g")
	if code != exitUsage {
		t.Fatalf("bad $NATS_URL: exit %d\n%s", code, stderr)
	}
	oneErrorLine(t, stderr, `$NATS_URL "http://127.0.0.1:1"`)
	// Heard no leader (exit 1), but reached the broker: not exit 4.
	if code, _, stderr := runCLI(t, 30*time.Second, []string{"NATS_URL=" + natsURL}, "status", "--group", "g", "--wait", "100ms"); code != exitFailure {
		t.Fatalf("status with $NATS_URL=%s: exit %d, want 1 (no leader heard)\n%s", natsURL, code, stderr)
	}
}

// A sim stopped by a signal (its context done) says so and fails, with no
// report: the seeds it was asked for did not all run.
func TestSimStoppedBySignal(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var stdout, stderr bytes.Buffer
	if code := execute(ctx, []string{"sim", "--seeds", "1000", "--json"}, &stdout, &stderr); code != exitFailure {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitFailure, stderr.String())
	}
	oneErrorLine(t, stderr.String(), "sim: interrupted before its 1000 seeds ran: nothing to report")
	if stdout.Len() != 0 {
		t.Fatalf("a report printed: %q", stdout.String())
	}
}
