package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/electcore/electcore/transport/natstest"
)

// TestE2ETwoGroupsDefaultID: agents of two groups on one host, both with
// the default --id and --state-dir, run side by side (state is kept per
// group), and the local verbs find each by its group.
func TestE2ETwoGroupsDefaultID(t *testing.T) {
	t.Parallel()
	needBinary(t)
	natsURL, _ := natstest.Start(t)
	env := []string{"XDG_STATE_HOME=" + t.TempDir()}
	id := defaultID()
	// 500 ms / 2 s: each group has one member, which renews its lease from
	// its own heartbeats; at 100 ms / 600 ms a 0.6 s stall of a loaded
	// machine lost it. Nothing here tests a timing.
	common := []string{"--members", id, "--heartbeat", "500ms", "--election-timeout", "2s", "--broker", natsURL}

	log := filepath.Join(t.TempDir(), "g1.log")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g1 := exec.Command(binPath, append([]string{"run", "--group", "g1"}, common...)...)
	g1.Env = append(append(os.Environ(), "ELECTCORE_WASM="+wasmPath), env...)
	g1.Stdout, g1.Stderr = f, f
	if err := g1.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- g1.Wait() }()
	t.Cleanup(func() {
		g1.Process.Kill()
		<-exited
	})
	waitFor(t, 60*time.Second, "g1's agent running", func() (bool, string) {
		b, _ := os.ReadFile(log)
		return strings.Contains(string(b), "msg=running"), string(b)
	})

	code, _, stderr := runCLI(t, 60*time.Second, env, append(append([]string{"run", "--once", "--group", "g2"}, common...), "--", "true")...)
	if code != 0 {
		t.Fatalf("g2 beside g1 with the default --id: exit %d\n%s", code, stderr)
	}
	for _, verb := range []string{"drain", "undrain"} {
		if code, out, stderr := runCLI(t, 30*time.Second, env, verb, "--group", "g1"); code != 0 {
			t.Fatalf("%s --group g1 with the default --id: exit %d\n%s%s", verb, code, out, stderr)
		}
	}
}
