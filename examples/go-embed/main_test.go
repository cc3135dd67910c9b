package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/electcore/electcore/internal/testwasm"
	"github.com/electcore/electcore/transport/natstest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testwasm.Cleanup()
	os.Exit(code)
}

// TestHelp: --help prints the usage and is a success (main exits 0).
func TestHelp(t *testing.T) {
	if err := run(context.Background(), []string{"--help"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v, want flag.ErrHelp", err)
	}
}

// TestMem runs three agents in this process over the in-memory bus: exactly
// one leads at a time and works under its term.
func TestMem(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &watch{cancel: cancel, until: "work #3 under term"}
	err := run(ctx, []string{"--transport", "mem", "--agents", "3", "--duration", "30s", "--wasm", testwasm.Path(t)}, w)
	if err != nil {
		t.Fatal(err)
	}
	out := w.String()
	if !regexp.MustCompile(`(?m)^a\d: leading term \d+$`).MatchString(out) || !strings.Contains(out, "work #3 under term") {
		t.Fatalf("no leader working:\n%s", out)
	}
}

// watch collects output and cancels once a line contains until.
type watch struct {
	bytes.Buffer
	cancel func()
	until  string
}

func (w *watch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.until) {
		w.cancel()
	}
	return w.Buffer.Write(p)
}

// proc is one go-embed process whose output lines are collected.
type proc struct {
	id  string
	cmd *exec.Cmd
	mu  sync.Mutex
	out []string
}

func (p *proc) lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.out...)
}

var leadingRe = regexp.MustCompile(`^(\w+): leading term (\d+)$`)

// TestNATS builds the program and runs three processes against an embedded
// NATS server: one leads and works; SIGKILL it and another takes over at a
// higher term; SIGTERM stops the rest with exit 0.
func TestNATS(t *testing.T) {
	bin := testwasm.BuildBinary(t, "./examples/go-embed")
	wasm := testwasm.Path(t)
	url, _ := natstest.Start(t)
	state := t.TempDir()
	ids := []string{"a", "b", "c"}
	procs := map[string]*proc{}
	for _, id := range ids {
		p := &proc{id: id, cmd: exec.Command(bin, "--transport", "nats", "--broker", url, "--group", "embed",
			"--id", id, "--members", strings.Join(ids, ","), "--state-dir", state, "--wasm", wasm)}
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.cmd.Stderr = os.Stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				p.mu.Lock()
				p.out = append(p.out, sc.Text())
				p.mu.Unlock()
			}
		}()
		procs[id] = p
	}
	// leader waits for a process other than except to print "leading term N"
	// and a work line under it. It gives up after a minute, not a bound:
	// the first wait includes three processes starting and loading the
	// module on what may be a loaded runner.
	leader := func(except string, minTerm uint64) (string, uint64) {
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			for _, id := range ids {
				if id == except {
					continue
				}
				ls := procs[id].lines()
				for i, l := range ls {
					m := leadingRe.FindStringSubmatch(l)
					if m == nil {
						continue
					}
					term, _ := strconv.ParseUint(m[2], 10, 64)
					want := fmt.Sprintf("%s: work #1 under term %d", id, term)
					if term >= minTerm && contains(ls[i:], want) {
						return id, term
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, id := range ids {
			t.Logf("%s:\n%s", id, strings.Join(procs[id].lines(), "\n"))
		}
		t.Fatal("no leader working")
		return "", 0
	}
	first, term := leader("", 1)
	t.Logf("%s leads term %d", first, term)
	killed := time.Now()
	procs[first].cmd.Process.Kill()
	procs[first].cmd.Wait()
	second, term2 := leader(first, term+1)
	t.Logf("%s SIGKILLed; %s leads term %d and works %v later", first, second, term2, time.Since(killed).Round(time.Millisecond))
	for _, id := range ids {
		if id == first {
			continue
		}
		p := procs[id]
		p.cmd.Process.Signal(syscall.SIGTERM)
		if err := p.cmd.Wait(); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
}

func contains(ls []string, s string) bool {
	for _, l := range ls {
		if l == s {
			return true
		}
	}
	return false
}
