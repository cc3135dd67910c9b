package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/electcore/electcore/cmd/electhost/internal/supervise"
	"github.com/electcore/electcore/transport/natstest"
)

// The leader-only command of the containment tests: a tree that forks
// (background sleeps the shell waits for, not exec'd), double-forks into a
// new session (setsid, orphaned at once) and ignores SIGTERM there, so that
// only SIGKILL of everything found stops it. Its first step checks that no
// process of another term's command is alive as it starts.
const treeScript = `env ELECTHOST_TEST_HELPER=treecheck "$0" || exit 3
(setsid sh -c 'trap "" TERM; sleep 1000 & sleep 1000 & wait' &)
sleep 1000 & sleep 1000 & wait`

// termProcs lists the live processes of the leader-only commands of the
// tests sharing dir (their environment names it), by ELECT_TERM; the
// supervising processes are left out.
func termProcs(dir string) map[string][]int {
	out := map[string][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, []byte("\x00ELECTHOST_TEST_DIR="+dir+"\x00")) {
			continue
		}
		if cl, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); bytes.Contains(cl, []byte(supervise.ShimArg)) {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if t, ok := bytes.CutPrefix(kv, []byte("ELECT_TERM=")); ok {
				out[string(t)] = append(out[string(t)], pid)
			}
		}
	}
	return out
}

// treeCheckMain runs as the first step of treeScript: it records in
// $ELECTHOST_TEST_DIR/overlaps any process of another term's command still
// alive, and its own start in .../log.
func treeCheckMain() int {
	dir, term := os.Getenv("ELECTHOST_TEST_DIR"), os.Getenv("ELECT_TERM")
	for t, pids := range termProcs(dir) {
		if t != term {
			o, _ := os.OpenFile(filepath.Join(dir, "overlaps"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			fmt.Fprintf(o, "term %s's command started on %s while processes %v of term %s were alive\n", term, os.Getenv("ELECT_LEADER"), pids, t)
			o.Close()
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, "starts"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return 1
	}
	fmt.Fprintf(f, "%s %s %d\n", term, os.Getenv("ELECT_LEADER"), time.Now().UnixNano())
	f.Close()
	return 0
}

// TestE2EContainKill9: kill -9 of the leading electhost leaves nothing of
// its command's tree (forked children, a double-forked setsid'd subtree
// that ignores SIGTERM) once another member can lead: the supervising
// process hears of the agent's death and kills the tree, whatever the
// containment (a cgroup where cgroup v2 is writable; a subreaper). The next
// leader's command finds no process of the old term when it starts.
func TestE2EContainKill9(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("cgroups and subreapers are Linux's")
	}
	natsURL, _ := natstest.Start(t)
	for _, contain := range []supervise.Containment{supervise.ContainCgroup, supervise.ContainSubreaper} {
		t.Run(string(contain), func(t *testing.T) {
			if contain == supervise.ContainCgroup {
				if err := probeCgroup(); err != nil {
					t.Skipf("no writable cgroup v2 here: %v", err)
				}
			}
			hb, et := 100*time.Millisecond, 600*time.Millisecond
			c := newCluster(t, 3, []string{"--broker", natsURL, "--containment", string(contain)}, nil, hb, et, 20*time.Millisecond)
			c.group = "contain-" + string(contain)
			c.command = []string{"sh", "-c", treeScript, os.Args[0]}
			c.startAll()
			leader, term := c.waitBestLeader(30 * time.Second)
			oldTerm := strconv.FormatUint(term, 10)
			// The whole tree runs: the shell, two sleeps, the setsid'd shell
			// and its two sleeps.
			deadline := time.Now().Add(20 * time.Second)
			for len(termProcs(c.shared)[oldTerm]) < 6 {
				if time.Now().After(deadline) {
					t.Fatalf("term %d's command tree not up within 20s: %v", term, termProcs(c.shared))
				}
				time.Sleep(10 * time.Millisecond)
			}
			s, err := c.proc(leader).status()
			if err != nil || s.LeaderCommand == nil || s.LeaderCommand.Containment != string(contain) {
				t.Fatalf("%s /status leader_command %+v (%v), want containment %s", leader, s.LeaderCommand, err, contain)
			}

			t0 := time.Now()
			c.signal(leader, syscall.SIGKILL)
			deadline = time.Now().Add(20 * time.Second)
			for len(termProcs(c.shared)[oldTerm]) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("20s after kill -9 of %s, processes of its command alive: %v", leader, termProcs(c.shared)[oldTerm])
				}
				time.Sleep(5 * time.Millisecond)
			}
			gone := time.Since(t0)
			newLeader, newTerm, _ := c.waitAgreement(leader, term+1, 20*time.Second)
			// The new leader's command checked the process table as it started.
			want := strconv.FormatUint(newTerm, 10)
			deadline = time.Now().Add(20 * time.Second)
			for !strings.Contains(strings.Join(readLines(filepath.Join(c.shared, "starts")), "\n"), want+" "+newLeader) {
				if time.Now().After(deadline) {
					t.Fatalf("term %d's command never started on %s", newTerm, newLeader)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if o := readLines(filepath.Join(c.shared, "overlaps")); len(o) > 0 {
				t.Fatalf("commands of two terms alive at once:\n%s", strings.Join(o, "\n"))
			}
			var started time.Time
			for _, l := range readLines(filepath.Join(c.shared, "starts")) {
				if f := strings.Fields(l); len(f) == 3 && f[0] == want {
					started = parseNs(f[2])
				}
			}
			t.Logf("%s: kill -9 of %s (term %d) to its command's last process gone: %v; %s's term %d command started %v after the kill",
				contain, leader, term, gone.Round(time.Millisecond), newLeader, newTerm, started.Sub(t0).Round(time.Millisecond))
		})
	}
}

// probeCgroup says whether this process could make a cgroup v2 of its own.
func probeCgroup() error {
	_, err := supervise.New(supervise.Options{Path: "true", Shim: "true", Contain: supervise.ContainCgroup})
	return err
}
