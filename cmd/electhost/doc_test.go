package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docBlocks returns the shell blocks of a markdown file marked to run: the
// fenced code blocks whose info string is "sh doctest", one command a line.
func docBlocks(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks [][]string
	var cur []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && strings.TrimSpace(line) == "```sh doctest":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, cur)
		case in && strings.TrimSpace(line) != "":
			cur = append(cur, line)
		}
	}
	return blocks
}

// background is a command line that ends in '&' (before its comment).
var background = regexp.MustCompile(`^(.*[^\s&])\s*&\s*(#.*)?$`)

// TestDocCommands runs the README's quick start and the operator examples
// marked "sh doctest" in README.md and cmd/electhost/README.md, as written,
// against real processes: a broker, three agents and the operator's verbs.
// Each file's blocks run in order in a fresh environment of their own: a
// broker address of its own ($NATS_URL, which electhost's --broker and
// broker --listen default to), state under a temporary $XDG_STATE_HOME,
// and electhost (and bin/electhost) the binary under test. A line ending in
// '&' starts in the background and must still run at the end; any other
// line must exit 0, and may be retried while the group settles (a leader
// is elected, a hand-off lands: what a person typing them waits for too)
// for up to a minute. "go install" and "make build" are what the test's
// build does.
func TestDocCommands(t *testing.T) {
	t.Parallel()
	needBinary(t)
	for _, doc := range []string{"../../README.md", "README.md"} {
		t.Run(strings.TrimPrefix(filepath.Join("cmd/electhost", doc), "README.md/"), func(t *testing.T) {
			var lines []string
			for _, b := range docBlocks(t, doc) {
				lines = append(lines, b...)
			}
			if len(lines) < 8 {
				t.Fatalf("%s: %d lines marked to run; the doctest blocks are gone", doc, len(lines))
			}
			runDocLines(t, lines)
		})
	}
}

func runDocLines(t *testing.T, lines []string) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binPath, filepath.Join(bin, "electhost")); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	brokerAddr := ln.Addr().String()
	ln.Close()
	env := append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"NATS_URL=nats://"+brokerAddr, "XDG_STATE_HOME="+filepath.Join(dir, "state"), "ELECTCORE_WASM="+wasmPath)

	type bg struct {
		line, log string
		cmd       *exec.Cmd
		done      chan struct{}
	}
	var bgs []*bg
	t.Cleanup(func() {
		for _, b := range bgs {
			syscall.Kill(-b.cmd.Process.Pid, syscall.SIGTERM)
		}
		for _, b := range bgs {
			select {
			case <-b.done:
			case <-time.After(15 * time.Second):
				syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
				<-b.done
			}
		}
	})
	logs := func() string {
		var s strings.Builder
		for _, b := range bgs {
			out, _ := os.ReadFile(b.log)
			fmt.Fprintf(&s, "--- %s\n%s\n", b.line, tail(out, 1500))
		}
		return s.String()
	}
	shell := func(line string) *exec.Cmd {
		c := exec.Command("sh", "-c", line)
		c.Dir, c.Env = dir, env
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return c
	}
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "go install ") || strings.HasPrefix(trimmed, "make build") {
			continue // the test built electhost
		}
		if m := background.FindStringSubmatch(trimmed); m != nil {
			b := &bg{line: trimmed, log: filepath.Join(dir, fmt.Sprintf("bg%d.log", i)), done: make(chan struct{})}
			f, err := os.Create(b.log)
			if err != nil {
				t.Fatal(err)
			}
			b.cmd = shell("exec " + m[1])
			b.cmd.Stdout, b.cmd.Stderr = f, f
			if err := b.cmd.Start(); err != nil {
				t.Fatalf("%s: %v", trimmed, err)
			}
			go func() { b.cmd.Wait(); f.Close(); close(b.done) }()
			bgs = append(bgs, b)
			// What is started next may need the broker: wait until it
			// answers (the line that starts it is the first).
			waitFor(t, time.Minute, "the broker at "+brokerAddr+" answers", func() (bool, string) {
				select {
				case <-b.done:
					t.Fatalf("%q exited at once:\n%s", trimmed, logs())
				default:
				}
				c, err := net.DialTimeout("tcp", brokerAddr, time.Second)
				if err == nil {
					c.Close()
				}
				return err == nil, ""
			})
			continue
		}
		t0 := time.Now()
		var out []byte
		var err error
		for attempt := 1; ; attempt++ {
			c := shell(trimmed)
			out, err = c.CombinedOutput()
			if err == nil {
				t.Logf("%s\n  → after %v, %d attempts: %s", trimmed, time.Since(t0).Round(time.Millisecond), attempt, strings.TrimSpace(lastLine(string(out))))
				break
			}
			if time.Since(t0) > time.Minute {
				t.Fatalf("%q never succeeded in %v (%d attempts); last: %v\n%s\nbackground:\n%s", trimmed, time.Since(t0).Round(time.Second), attempt, err, out, logs())
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	for _, b := range bgs {
		select {
		case <-b.done:
			t.Fatalf("%q exited before the end:\n%s", b.line, logs())
		default:
		}
	}
}
