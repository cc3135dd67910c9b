package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestSelfContainedBinary: the electhost binary, copied into an empty
// directory and run with no environment at all (no $ELECTCORE_WASM, no
// module file anywhere near it), runs the demo and the simulator: the module
// travels inside it.
func TestSelfContainedBinary(t *testing.T) {
	t.Parallel()
	needBinary(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "electhost")
	b, err := os.ReadFile(binPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir, cmd.Env = dir, []string{"HOME=" + dir}
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = ee.Stderr
			}
			t.Fatalf("electhost %v: %v\n%s", args, err, stderr)
		}
		return out
	}
	var demo struct {
		OK bool `json:"ok"`
	}
	if out := run("demo", "--json"); json.Unmarshal(out, &demo) != nil || !demo.OK {
		t.Fatalf("demo: %s", out)
	}
	var sim struct {
		Violations int `json:"violations"`
		Seeds      int `json:"seeds"`
	}
	if out := run("sim", "--seeds", "20", "--json"); json.Unmarshal(out, &sim) != nil || sim.Violations != 0 || sim.Seeds != 20 {
		t.Fatalf("sim: %s", out)
	}
}
