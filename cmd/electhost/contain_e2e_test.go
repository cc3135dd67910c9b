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
			// 200 ms / 1.2 s: what is tested is what is left of a tree and
			// when a command starts, not a time; at 100 ms / 600 ms a loaded
			// runner loses leases.
			hb, et := 200*time.Millisecond, 1200*time.Millisecond
			c := newCluster(t, 3, []string{"--broker", natsURL, "--containment", string(contain)}, nil, hb, et, 20*time.Millisecond)
			c.group = "contain-" + string(contain)
			c.command = []string{"sh", "-c", treeScript, os.Args[0]}
			c.startAll()
			// The whole tree runs: the shell, two sleeps, the setsid'd shell
			// and its two sleeps. A leadership lost to load before then
			// takes its tree down: the next one's is waited for.
			var leader, oldTerm string
			var term uint64
			for try := 1; ; try++ {
				leader, term = c.waitBestLeader(2 * time.Minute) // the first start may compile the module
				oldTerm = strconv.FormatUint(term, 10)
				up := false
				waitFor(t, time.Minute, "term "+oldTerm+"'s command tree up", func() (bool, string) {
					up = len(termProcs(c.shared)[oldTerm]) >= 6
					return up || !c.leads(leader, term), fmt.Sprint(termProcs(c.shared))
				})
				if up {
					break
				}
				if try == stepTries {
					t.Fatalf("the leadership ended before its command tree was up in each of %d tries (the last: %s's term %d, %q)", try, leader, term, c.awaitStopped(leader, term))
				}
				t.Logf("%s's term %d ended before its command tree was up (%q): again", leader, term, c.stoppedLeading(leader, term))
			}
			s, err := c.proc(leader).status()
			if err != nil || s.LeaderCommand == nil || s.LeaderCommand.Containment != string(contain) {
				t.Fatalf("%s /status leader_command %+v (%v), want containment %s", leader, s.LeaderCommand, err, contain)
			}

			t0 := time.Now()
			c.signal(leader, syscall.SIGKILL)
			deadline := time.Now().Add(time.Minute)
			for len(termProcs(c.shared)[oldTerm]) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("a minute after kill -9 of %s, processes of its command alive: %v", leader, termProcs(c.shared)[oldTerm])
				}
				time.Sleep(5 * time.Millisecond)
			}
			gone := time.Since(t0)
			// The next leader's command checked the process table as it
			// started (its term's, or a later one's: a lease lost to load).
			var newLeader string
			var newTerm uint64
			var started time.Time
			waitFor(t, time.Minute, "a command of a term after "+oldTerm+" starts", func() (bool, string) {
				starts := readLines(filepath.Join(c.shared, "starts"))
				for _, l := range starts {
					if f := strings.Fields(l); len(f) == 3 && f[1] != leader {
						if tm, _ := strconv.ParseUint(f[0], 10, 64); tm > term {
							newLeader, newTerm, started = f[1], tm, parseNs(f[2])
							return true, ""
						}
					}
				}
				return false, strings.Join(starts, "; ")
			})
			if o := readLines(filepath.Join(c.shared, "overlaps")); len(o) > 0 {
				t.Fatalf("commands of two terms alive at once:\n%s", strings.Join(o, "\n"))
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
